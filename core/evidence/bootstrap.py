"""The intervals that answer "does the method help": over seeds and examples, chosen by measured coverage.

A comparison's runs are a crossed design: every seed of a system scores the same test examples. An interval that
resamples the examples only (jointly across seeds) says how sure we are *about these trained models*; it leaves
out how much another seed would move the result. :func:`interval_set` computes every candidate from one set of
replicates, each drawing the examples with replacement (the same examples on both sides; whole units where items
are grouped, e.g. the two pairs of one hpo-isa child term, the candidates of one query) and recomputing each seed's
metric on them: the example-only interval, the pigeonhole two-way bootstrap (seeds drawn too; Owen 2007, Ann. Appl.
Stat. 1(2)) with and without a small-S correction, a t-interval over per-seed differences, the wider of that and
the example interval, and the default, ``seeds-t+examples``: the example replicates plus a t-distributed seed effect
(:data:`DEFAULT_INTERVAL`; ``python -m benchmarks.coverage`` measures each one's coverage, docs/evidence.md). With
one seed every kind is the example-only interval, and a verdict is not given (:func:`verdict`'s ``seeds``).

Seeds that share a stage (one KG retraining, one teacher for every fine-tuning seed) share its random draw:
``draws`` labels each paired seed's draw. When draws repeat but vary (2 <= D < S), the seed part of ``seeds-t`` and
of the default is a t over the D draws' mean differences (cluster-robust, D-1 degrees of freedom), so it carries
the draw's variance. With one draw for every seed (D = 1) nothing estimates it: the interval is conditional on that
draw, and :mod:`.comparison` says so.

A metric from sums of its evaluator's statistics (accuracy, F1 from counts, MRR, Pearson from moments, ECE) is
resampled as weighted sums (a replicate is a matrix product); others (AUROC, an evaluator without statistics) are
recomputed on the resampled examples (:mod:`.scorers`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from kinject.evidence.scorers import Scorer

ELEMENTS_PER_BATCH = 20_000_000  # array elements one batch of replicates may hold (about 160 MB of float64)


@dataclass(frozen=True)
class Interval:
    """``difference`` = mean over seeds of metric(b) - metric(a), with its bootstrap interval."""

    a: float
    b: float
    difference: float
    low: float
    high: float
    confidence: float
    n: int
    seeds: int
    groups: int
    n_resamples: int
    method: str
    standard_error: float
    resampled: str  # what was resampled, in words (:data:`INTERVALS`)
    kind: str = "examples"  # a key of :data:`INTERVALS`
    p_value: float = float("nan")  # two-sided: twice the share of replicates on the far side of 0 (t: the t-test's)
    draws: int = 0  # distinct draws of a shared stage behind the seed part (0: every seed its own)

    def as_dict(self) -> dict:
        return asdict(self)


def _weights(draws: np.ndarray, codes: np.ndarray, groups: int) -> np.ndarray:
    """How often each example is drawn in each replicate: (replicates, n), from the groups drawn."""
    size = len(draws)
    flat = (np.arange(size)[:, None] * groups + draws).ravel()
    counts = np.bincount(flat, minlength=size * groups).reshape(size, groups).astype(np.float64)
    return counts if groups == len(codes) else counts[:, codes]


def _values(scorer: Scorer, x: np.ndarray, draws: np.ndarray, weights: np.ndarray | None,
            members: list[np.ndarray] | None) -> np.ndarray:
    """Per-seed metric of each replicate: (replicates, seeds). ``x``: (n, d, seeds); ``draws``: (replicates, groups)
    group indices drawn; ``weights``: their example counts, for a scorer whose value is one of sums."""
    n, d, seeds = x.shape
    if weights is not None:
        sums = (weights @ x.reshape(n, d * seeds)).reshape(len(weights), d, seeds)  # (replicates, d, seeds)
        return np.asarray(scorer.reduce(np.moveaxis(sums, 0, -1), n)).T  # reduce: (d, seeds, replicates)
    moved = np.moveaxis(x, 0, -1)  # (d, seeds, n)
    if members is None:  # one example per group: all replicates of the batch as one array (d, seeds, size, n)
        return np.asarray(scorer.value(moved[:, :, draws])).T
    return np.stack([scorer.value(moved[:, :, np.concatenate([members[g] for g in row])]) for row in draws])


INTERVALS = {  # every interval kinject can compute for a comparison: key -> what it resamples (table headings)
    "seeds-t+examples": "seeds (t) × examples",
    "two-way": "seeds × examples, two-way bootstrap",
    "two-way-corrected": "seeds × examples, two-way bootstrap, seed part × √(S/(S-1))",
    "seeds-t": "seeds (t over per-seed differences)",
    "wider": "wider of seeds (t) and examples",
    "examples": "examples only",
}
#: the verdict's interval with two or more paired seeds (chosen by measured coverage: docs/evidence.md,
#: ``python -m benchmarks.coverage``); with one seed every kind is the example-only interval
DEFAULT_INTERVAL = "seeds-t+examples"


def _replicates(scorer: Scorer, a: np.ndarray, b: np.ndarray, codes: np.ndarray, count: int,
                members: list[np.ndarray] | None, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(per-seed differences of every replicate, (replicates, seeds); the seed draws, (replicates, seeds)):
    one example draw per replicate, shared by both systems and every seed."""
    seeds, n = a.shape[2], a.shape[0]
    example_rng = np.random.default_rng(seed)
    seed_rng = np.random.default_rng([seed, 1])
    weighted = scorer.additive
    width = max(1, a.shape[1] + b.shape[1]) * seeds * n + 3 * n  # per replicate: the gathered or weighted arrays
    batch = max(1, min(n_resamples, ELEMENTS_PER_BATCH // max(1, width)))
    diffs, picks = [], []
    done = 0
    with np.errstate(invalid="ignore", divide="ignore"):
        while done < n_resamples:
            size = min(batch, n_resamples - done)
            draws = example_rng.integers(0, count, (size, count))
            picks.append(seed_rng.integers(0, seeds, (size, seeds)))
            weights = _weights(draws, codes, count) if weighted else None
            diffs.append(_values(scorer, b, draws, weights, members) - _values(scorer, a, draws, weights, members))
            done += size
    return np.concatenate(diffs), np.concatenate(picks)


def interval_set(scorer: Scorer, a: np.ndarray, b: np.ndarray, groups: list | None = None, n_resamples: int = 2000,
                 confidence: float = 0.95, seed: int = 0, method: str = "percentile",
                 draws: list | None = None) -> dict[str, Interval]:
    """Every interval of :data:`INTERVALS` for mean-over-seeds metric(b) - metric(a), from one set of replicates
    (the same example draws for both systems and every kind). ``a``/``b``: per-example sufficient statistics of
    the two systems, shape (examples, d, seeds), seeds paired by position; ``groups``: a unit per example (None:
    each its own); ``method``: percentile (default) or basic, for the bootstrap kinds.

    * ``examples``: the seeds' mean held fixed, examples (units) resampled: conditional on these trained models.
    * ``two-way``: seeds and examples resampled independently (the pigeonhole bootstrap, Owen 2007).
    * ``two-way-corrected``: the same, its seed part (two-way minus example-only replicate) widened by √(S/(S-1)).
    * ``seeds-t``: a t-interval over the per-seed differences (each seed's metric on all examples).
    * ``wider``: the wider of ``seeds-t`` and ``examples``.
    * ``seeds-t+examples``: each example replicate, its spread around the point shrunk by the seed × example
      noise (a variance-components estimate: per-seed minus joint example variance, over S-1), plus a seed effect
      drawn from the t distribution (S-1 degrees of freedom) scaled by the standard error of the mean per-seed
      difference; with no seed spread it is the example interval.
    ``draws``: a label per seed position for the draw of a stage its seeds share (None: each seed its own). With
    2 <= D < S distinct draws the t parts are over the D draws' means (D-1 degrees of freedom).
    With one seed every kind is the example-only interval."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError(f"paired samples need the same examples and seeds ({a.shape} vs {b.shape})")
    n, seeds = a.shape[0], a.shape[2]
    if n < 2:
        raise ValueError(f"a bootstrap over examples needs at least 2 examples, got {n}")
    labels = list(groups) if groups is not None else list(range(n))
    _, codes = np.unique(np.asarray([str(g) for g in labels]), return_inverse=True)
    count = int(codes.max()) + 1
    members = None if count == n else [np.flatnonzero(codes == g) for g in range(count)]

    def per_seed(x: np.ndarray) -> np.ndarray:
        return np.asarray(scorer.value(np.moveaxis(x, 0, -1)), dtype=float)  # (seeds,)

    values_a, values_b = per_seed(a), per_seed(b)
    point_a, point_b = float(values_a.mean()), float(values_b.mean())
    difference = point_b - point_a
    diff, picks = _replicates(scorer, a, b, codes, count, members, n_resamples, seed)
    diff = np.where(np.isfinite(diff), diff, np.nan)
    examples = np.nanmean(diff, axis=1)
    used = "basic" if method.lower() == "basic" else "percentile"
    tail = (1 - confidence) / 2

    clusters = _clusters(draws, seeds)

    def make(kind: str, low: float, high: float, error: float, p: float = float("nan")) -> Interval:
        return Interval(a=point_a, b=point_b, difference=difference, low=float(low), high=float(high),
                        confidence=confidence, n=n, seeds=seeds, groups=count, n_resamples=n_resamples,
                        method=used if kind != "seeds-t" else "t", standard_error=float(error),
                        resampled=INTERVALS[kind] if seeds > 1 else INTERVALS["examples"], kind=kind,
                        p_value=float(p), draws=len(clusters) if seeds > 1 and kind in DRAWN else 0)

    def from_replicates(kind: str, replicates: np.ndarray) -> Interval:
        found = replicates[np.isfinite(replicates)]
        if not len(found):
            return make(kind, float("nan"), float("nan"), 0.0)
        low, high = np.quantile(found, [tail, 1 - tail])
        if used == "basic":
            low, high = 2 * difference - high, 2 * difference - low
        return make(kind, low, high, np.std(found, ddof=1) if len(found) > 1 else 0.0,
                    replicate_p_value(found, difference if used == "basic" else None))

    only = from_replicates("examples", examples)
    if seeds < 2:
        return {kind: replace(only, kind=kind) for kind in INTERVALS}
    two_way = np.take_along_axis(diff, picks, axis=1).mean(axis=1)
    per = values_b - values_a
    # the seed mean's variance (seed effect + seed x example noise), and its degrees of freedom: over seeds, or
    # over the draws of a stage seeds share where those repeat but vary
    spread, freedom = _seed_mean_variance(per, clusters)
    # the seed x example noise in it, which the example replicates carry already: per-seed minus joint variance
    cell = max(0.0, (float(np.nanmean(np.nanvar(diff, axis=0, ddof=1))) - float(np.nanvar(examples, ddof=1)))
               / (seeds - 1))
    t = float(stats.t.ppf(1 - tail, freedom))
    half = t * np.sqrt(spread)
    t_p = 2 * float(stats.t.sf(abs(difference) / np.sqrt(spread), freedom)) if spread > 0 else \
        (1.0 if difference == 0 else 0.0)
    seeds_t = make("seeds-t", difference - half, difference + half, np.sqrt(spread), t_p)
    draws = np.random.default_rng([seed, 2]).standard_t(freedom, len(examples))
    joint = float(np.nanvar(examples, ddof=1))
    shrink = np.sqrt(max(joint - cell, 0.0) / joint) if joint > 0 else 1.0  # the example part less that noise
    out = {"two-way": from_replicates("two-way", two_way),
           "two-way-corrected": from_replicates("two-way-corrected", examples + np.sqrt(seeds / (seeds - 1))
                                                * (two_way - examples)),
           "seeds-t": seeds_t,
           "wider": replace(max(seeds_t, only, key=lambda i: i.high - i.low), kind="wider"),
           "seeds-t+examples": from_replicates("seeds-t+examples", difference + shrink * (examples - difference)
                                               + np.sqrt(spread) * draws),
           "examples": only}
    out["wider"] = replace(out["wider"], resampled=INTERVALS["wider"])
    return out


DRAWN = ("seeds-t", "seeds-t+examples", "wider")  # the kinds whose seed part is over the draws of a shared stage


def _clusters(draws: list | None, seeds: int) -> list[np.ndarray]:
    """The seed positions of each distinct draw (one per seed when ``draws`` is None)."""
    if draws is None:
        return [np.array([s]) for s in range(seeds)]
    if len(draws) != seeds:
        raise ValueError(f"draws: {len(draws)} labels for {seeds} seeds")
    labels = [str(d) for d in draws]
    return [np.flatnonzero(np.asarray(labels) == label) for label in dict.fromkeys(labels)]


def _seed_mean_variance(per: np.ndarray, clusters: list[np.ndarray]) -> tuple[float, int]:
    """(variance of the mean per-seed difference, degrees of freedom). Each seed its own draw, or one draw for all:
    var(per-seed differences)/S over S-1 (one draw: conditional on it). 2 <= D < S draws: the cluster-robust
    variance D/(D-1) * sum_d (n_d/S)^2 (mean_d - mean)^2 over D-1."""
    seeds = len(per)
    if len(clusters) in (1, seeds):
        return float(np.var(per, ddof=1)) / seeds, seeds - 1
    mean = float(per.mean())
    count = len(clusters)
    total = sum((len(c) / seeds) ** 2 * (float(per[c].mean()) - mean) ** 2 for c in clusters)
    return count / (count - 1) * total, count - 1


def replicate_p_value(replicates: np.ndarray, centre: float | None = None) -> float:
    """Two-sided bootstrap p-value of "the difference is 0": twice the share of replicates at or beyond 0 on the
    far side of their bulk, (k+1)/(B+1) so never 0. ``centre``: the point estimate, for the basic interval (whose
    replicates are reflected about it)."""
    found = np.asarray(replicates, dtype=float)
    found = found[np.isfinite(found)]
    if not len(found):
        return float("nan")
    if centre is not None:
        found = 2 * centre - found
    below, above = int((found <= 0).sum()), int((found >= 0).sum())
    return float(min(1.0, 2 * (min(below, above) + 1) / (len(found) + 1)))


def bootstrap_intervals(scorer: Scorer, a: np.ndarray, b: np.ndarray, groups: list | None = None,
                        n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                        method: str = "percentile", kind: str = DEFAULT_INTERVAL) -> tuple[Interval, Interval]:
    """(the verdict's interval ``kind``, the example-only interval) of :func:`interval_set`."""
    found = interval_set(scorer, a, b, groups, n_resamples, confidence, seed, method)
    return found[kind], found["examples"]


def two_way_bootstrap(scorer: Scorer, a: np.ndarray, b: np.ndarray, groups: list | None = None,
                      resample_seeds: bool = True, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                      method: str = "percentile") -> Interval:
    """The pigeonhole two-way interval over seeds and examples (``resample_seeds``) or the example-only one."""
    found = interval_set(scorer, a, b, groups, n_resamples, confidence, seed, method)
    return found["two-way" if resample_seeds else "examples"]


ONE_SEED = "1 seed: no verdict"


def verdict(low: float, high: float, greater_is_better: bool = True, seeds: int | None = None) -> str:
    """gain / loss / no evidence, from an interval of b - a and the metric's direction; :data:`ONE_SEED` when
    ``seeds`` (the paired seeds behind the interval) is under 2: an interval over one seed's examples says nothing
    about another seed, so it never gives a gain or a loss."""
    if seeds is not None and seeds < 2:
        return ONE_SEED
    if not (np.isfinite(low) and np.isfinite(high)):
        return "no evidence"
    if low > 0:
        return "gain" if greater_is_better else "loss"
    if high < 0:
        return "loss" if greater_is_better else "gain"
    return "no evidence"
