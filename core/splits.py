"""What every task's ``examples(split, env)`` returns, whatever the task: texts under the environment's cap, the
cross-validation fold of a ``fold`` run, and the first ``--limit`` evaluation units. Applied to each Task subclass's
``examples`` when the class is defined (:class:`kinject.interfaces.Task`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from kinject.interfaces import Environment


_IN_EXAMPLES: list[bool] = []  # examples() calls in progress (a subclass calling super().examples nests them)


def text_capped(examples: Callable) -> Callable:
    """``examples`` under the environment's text cap and, at the outermost call, its cross-validation fold."""
    import functools

    @functools.wraps(examples)
    def capped(self, split: str, env: "Environment", *args: Any, **kwargs: Any):
        from kinject.io import text_cap

        fold = getattr(env, "fold", None)
        outermost = not _IN_EXAMPLES
        _IN_EXAMPLES.append(True)
        try:
            with text_cap(getattr(env, "max_chars", None), f"{self.name} {split}"):
                if fold is None or not outermost or split not in (self.train_split, "dev"):
                    rows = examples(self, split, env, *args, **kwargs)
                else:
                    rows = fold_of(examples(self, self.train_split, env, *args, **kwargs), fold,
                                   held_out=split == "dev")
                limit = getattr(env, "limit", None)
                return limited(rows, limit) if outermost and limit else rows
        finally:
            _IN_EXAMPLES.pop()

    capped._text_capped = True
    return capped


def unit_key(example: Any, index: int) -> str:
    """The evaluation unit an example belongs to: its ``group`` (a query's candidates, a document's sentences), else
    itself (by its position). Limits, folds' unit counts and ``Task.units`` all count units by this key."""
    return str(example.get("group", f"#{index}")) if isinstance(example, dict) else f"#{index}"


def limited(examples: list[dict], limit: int) -> list[dict]:
    """The first ``limit`` evaluation units of a split (``--limit``): examples that share a ``group`` (a query's
    candidates) count as one. Applied to every task by the engine, so a task that does not slice its data itself
    is bounded too; a task that does (to ``limit`` or fewer units) is left as it is."""
    if len(examples) <= limit:
        return examples
    seen: dict[str, None] = {}
    out = []
    for i, example in enumerate(examples):
        unit = unit_key(example, i)
        if unit not in seen:
            if len(seen) == limit:
                break
            seen[unit] = None
        out.append(example)
    return out


def fold_of(examples: list[dict], fold: tuple[int, int, int], held_out: bool) -> list[dict]:
    """The examples of cross-validation fold ``fold`` = (i, k, seed) of a train split (``held_out``: fold i, the
    fold run's dev split; else the other k - 1 folds). Examples that share a ``group`` (a query's candidates, an
    abstract's sentences) stay in one fold, and single labels (strings) are spread over the folds in proportion
    (scikit-learn's StratifiedGroupKFold, shuffled with ``seed``). This module keys every fold run."""
    import warnings

    import numpy as np
    from sklearn.model_selection import StratifiedGroupKFold

    from kinject.errors import DataError

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
