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
    fold run's dev split; else the other k - 1 folds), drawn by the ``kinject_fold`` hook (the training library's:
    grouped by unit, stratified by label; :mod:`kinject.plugins.training.folds`)."""
    from kinject.errors import KinjectError
    from kinject.hooks import plugin_manager

    rows = plugin_manager().hook.kinject_fold(examples=examples, fold=fold, held_out=held_out)
    if rows is None:
        raise KinjectError("fold: no hook plugin draws cross-validation folds (the training library's 'decisions' "
                           "hook plugin is missing: `kinject list hooks`)")
    return rows
