"""Cross-validation folds of a train split as the training library draws them: the ``decisions`` hook plugin answers
the kernel's ``kinject_fold`` with :func:`kinject_fold` (the kernel applies the fold to every task's ``examples()``
of a ``fold`` run; a plugin draws folds otherwise with a ``tryfirst`` implementation, and this module, or the
replacement's, is part of every fold run's key)."""

from __future__ import annotations

import warnings

from kinject.api import DataError, hookimpl


@hookimpl
def kinject_fold(examples: list, fold: tuple[int, int, int], held_out: bool) -> list:
    """``fold`` = (i, k, seed): the examples of fold i (``held_out``: the dev split of the fold) or of the other k - 1
    folds (its training split). Examples that share a ``group`` (a query's candidates, an abstract's sentences) stay
    in one fold, and single labels (strings) are spread over the folds in proportion (scikit-learn's
    StratifiedGroupKFold, shuffled with ``seed``)."""
    import numpy as np
    from sklearn.model_selection import StratifiedGroupKFold

    index, k, seed = fold
    groups = [str(ex.get("group", i)) if isinstance(ex, dict) else str(i) for i, ex in enumerate(examples)]
    if len(set(groups)) < k:
        raise DataError(f"fold {index}/{k}: the train split has {len(set(groups))} unit(s), fewer than {k} folds")
    labels = [ex.get("label") if isinstance(ex, dict) else None for ex in examples]
    if not all(isinstance(label, str) for label in labels):
        labels = ["-"] * len(examples)  # scores, label lists, tags: grouped folds only
    with warnings.catch_warnings():  # a class rarer than k folds is spread as far as it goes
        warnings.simplefilter("ignore", UserWarning)
        splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
        _, held = list(splitter.split(np.zeros(len(examples)), labels, groups))[index]
    chosen = set(held.tolist())
    return [ex for i, ex in enumerate(examples) if (i in chosen) == held_out]
