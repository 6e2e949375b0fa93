"""Built-in evaluators (metrics), registered through the ``kinject.tasks.evaluators`` entry points.

A metric that is undefined on its input (empty input, one class only, a constant series) is NaN, with an
:class:`UndefinedMetricWarning` saying why: never a number that reads as a real result (0.0 AUROC reads as a
perfectly inverted ranking).
"""

from __future__ import annotations

import warnings


class UndefinedMetricWarning(UserWarning):
    """A metric is undefined on its input and is reported as NaN."""


def undefined(metric: str, why: str) -> float:
    """Warn that ``metric`` is undefined (``why``) and return NaN."""
    warnings.warn(f"{metric} is undefined ({why}): reported as NaN", UndefinedMetricWarning, stacklevel=3)
    return float("nan")
