"""Paired per-seed tests (scipy): :func:`seed_tests` gives the per-seed differences of two systems with a paired
t-test and a Wilcoxon signed-rank test. The paired interval over seeds and examples is
:mod:`kinject.evidence.bootstrap`'s."""

from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
from scipy import stats


def finite_or_none(value) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def seed_tests(values_a: Mapping[int, float], values_b: Mapping[int, float]) -> dict | None:
    """Paired per-seed comparison of b against a over the seeds both have (None with fewer than 2).

    Returns the seeds, the differences b - a, their mean, the paired t-test (``scipy.stats.ttest_rel``)
    and the Wilcoxon signed-rank test (``scipy.stats.wilcoxon``, exact for few seeds) - statistics and
    two-sided p-values; a p-value is None where the test is undefined (e.g. all differences equal).
    """
    seeds = sorted(set(values_a) & set(values_b))
    if len(seeds) < 2:
        return None
    a = np.array([values_a[s] for s in seeds], dtype=float)
    b = np.array([values_b[s] for s in seeds], dtype=float)
    diff = b - a
    out: dict = {"seeds": seeds, "differences": diff.tolist(), "mean_difference": float(diff.mean()),
                 "t_statistic": None, "t_pvalue": None, "wilcoxon_statistic": None, "wilcoxon_pvalue": None}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if np.ptp(diff) > 0:
            t = stats.ttest_rel(b, a)
            out.update(t_statistic=finite_or_none(t.statistic), t_pvalue=finite_or_none(t.pvalue))
        if np.any(diff != 0):
            w = stats.wilcoxon(b, a)
            out.update(wilcoxon_statistic=finite_or_none(w.statistic), wilcoxon_pvalue=finite_or_none(w.pvalue))
    return out
