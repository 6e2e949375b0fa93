"""Paired statistics for comparing two systems on the same examples and seeds (scipy).

* :func:`paired_bootstrap` - a confidence interval for the difference of a statistic between two systems,
  resampling *examples* (queries, sentences, documents) with the same indices on both sides
  (``scipy.stats.bootstrap(..., paired=True)``). A statistic that is not a mean of per-example values
  (micro/macro F1, entity F1, Pearson, AUROC) is recomputed on every resample from per-example sufficient
  statistics (see :mod:`kinject.evidence.scorers`), never approximated by a mean.
* :func:`seed_tests` - paired per-seed differences with a paired t-test and a Wilcoxon signed-rank test.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Mapping

import numpy as np
from scipy import stats

#: upper bound on the array elements one batch of resamples materialises (keeps memory near 200 MB)
ELEMENTS_PER_BATCH = 25_000_000


@dataclass(frozen=True)
class PairedDifference:
    """``difference`` = statistic(b) - statistic(a) on all examples, with its bootstrap interval."""

    a: float
    b: float
    difference: float
    low: float
    high: float
    confidence: float
    n: int
    n_resamples: int
    method: str
    standard_error: float

    def as_dict(self) -> dict:
        return asdict(self)


def paired_bootstrap(per_example_a, per_example_b, statistic: Callable = np.mean, n_resamples: int = 2000,
                     confidence: float = 0.95, seed: int = 0, method: str = "percentile") -> PairedDifference:
    """Bootstrap interval of ``statistic(b) - statistic(a)`` over examples paired by position.

    ``per_example_a``/``per_example_b``: arrays with one row per example (axis 0; further axes hold
    per-example sufficient statistics, and may differ between the sides). ``statistic(x, axis=-1)`` is
    vectorised as scipy's: ``x`` has the examples on its last axis and may carry a batch axis before it.
    ``method``: ``percentile`` (default), ``basic`` or ``BCa`` (falls back to percentile when the resampled
    differences are degenerate, e.g. identical predictions). ``seed`` fixes the resampling.
    """
    a, b = np.asarray(per_example_a, dtype=float), np.asarray(per_example_b, dtype=float)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"paired samples need the same number of examples ({a.shape[0]} vs {b.shape[0]})")
    n = a.shape[0]
    if n < 2:
        raise ValueError(f"a bootstrap over examples needs at least 2 examples, got {n}")

    def difference(x, y, axis=-1):
        return statistic(y, axis=axis) - statistic(x, axis=axis)

    point_a = float(statistic(np.moveaxis(a, 0, -1), axis=-1))
    point_b = float(statistic(np.moveaxis(b, 0, -1), axis=-1))
    batch = max(1, min(n_resamples, ELEMENTS_PER_BATCH // max(1, a.size + b.size)))
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap((a, b), difference, paired=True, vectorized=True, axis=0, n_resamples=n_resamples,
                                 confidence_level=confidence, method=method, batch=batch,
                                 rng=np.random.default_rng(seed))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    used = method
    if not (np.isfinite(low) and np.isfinite(high)):  # BCa on a degenerate distribution
        tail = (1 - confidence) / 2
        low, high = (float(v) for v in np.quantile(result.bootstrap_distribution, [tail, 1 - tail]))
        used = "percentile"
    return PairedDifference(a=point_a, b=point_b, difference=point_b - point_a, low=low, high=high,
                            confidence=confidence, n=n, n_resamples=n_resamples, method=used,
                            standard_error=float(result.standard_error))


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
