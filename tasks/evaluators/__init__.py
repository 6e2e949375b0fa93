"""Built-in evaluators (metrics), registered through the ``kinject.evaluators`` entry points.

Each declares its sufficient statistics beside ``compute`` (``Evaluator.statistics``), and ``compute`` derives from
them, so the value in metrics.json and the one a comparison resamples cannot drift. A metric that is undefined on its
input (empty input, one class only, a constant series) is NaN, with an :class:`UndefinedMetricWarning` saying why:
never a number that reads as a real result (0.0 AUROC reads as a perfectly inverted ranking).
"""

from __future__ import annotations

import warnings

import numpy as np


class UndefinedMetricWarning(UserWarning):
    """A metric is undefined on its input and is reported as NaN."""


def undefined(metric: str, why: str) -> float:
    """Warn that ``metric`` is undefined (``why``) and return NaN."""
    warnings.warn(f"{metric} is undefined ({why}): reported as NaN", UndefinedMetricWarning, stacklevel=3)
    return float("nan")


def ratio(numerator, denominator):
    """numerator / denominator, 0 where the denominator is 0 (scikit-learn's ``zero_division=0``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), 0.0)


def f1_of_counts(tp, fp, fn):
    """F1 from true positive, false positive and false negative counts (0 when all are 0)."""
    return ratio(2 * tp, 2 * tp + fp + fn)
