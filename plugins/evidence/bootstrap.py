"""The interval that answers "does the method help": a two-way bootstrap over seeds and examples.

A comparison's runs are a crossed design: every seed of a system scores the same test examples. An interval that
resamples the examples only (jointly across seeds) says how sure we are *about these trained models*; it leaves
out how much another seed would move the result. :func:`two_way_bootstrap` resamples both factors independently in
each replicate - seeds with replacement (the same seeds on both sides: pairs of runs), examples with replacement
(the same examples on both sides; whole units where items are grouped, e.g. the two pairs of one hpo-isa child term,
the candidates of one query) - and recomputes each seed's metric on the resampled examples, then averages over the
resampled seeds (the pigeonhole bootstrap of Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat. 1(2)). With one
seed, or with ``resample_seeds=False``, it is the example-only interval; both draw the examples from the same
random stream, so when every seed scores exactly alike the two intervals are identical.

Metrics that are sums over examples (accuracy, F1 from counts, MRR, Pearson from moments, ECE) are resampled as
weighted sums (a replicate is a matrix product); others (AUROC, a third party's evaluator) are recomputed on the
resampled examples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from kinject.plugins.evidence.scorers import Scorer

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
    resampled: str  # "seeds and examples" | "examples"

    def as_dict(self) -> dict:
        return asdict(self)


def _weighted(scorer: Scorer) -> bool:
    """Whether the scorer's value is a function of per-example sums (a replicate is then a weighted sum)."""
    return type(scorer).value is Scorer.value


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


def bootstrap_intervals(scorer: Scorer, a: np.ndarray, b: np.ndarray, groups: list | None = None,
                        n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                        method: str = "percentile") -> tuple[Interval, Interval]:
    """(two-way interval over seeds and examples, example-only interval) of mean-over-seeds metric(b) - metric(a),
    from one set of replicates (the same example draws for both). ``a``/``b``: per-example sufficient statistics of
    the two systems, shape (examples, d, seeds) (seeds paired by position); ``groups``: a unit per example (None:
    each example its own); ``method``: percentile (default) or basic."""
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
    weighted = _weighted(scorer)

    def per_seed(x: np.ndarray) -> np.ndarray:
        return np.asarray(scorer.value(np.moveaxis(x, 0, -1)), dtype=float)  # (seeds,)

    point_a, point_b = float(per_seed(a).mean()), float(per_seed(b).mean())
    example_rng = np.random.default_rng(seed)
    seed_rng = np.random.default_rng([seed, 1])
    width = max(1, a.shape[1] + b.shape[1]) * seeds * n + 3 * n  # per replicate: the gathered or weighted arrays
    batch = max(1, min(n_resamples, ELEMENTS_PER_BATCH // max(1, width)))
    both, examples = [], []
    done = 0
    with np.errstate(invalid="ignore", divide="ignore"):
        while done < n_resamples:
            size = min(batch, n_resamples - done)
            draws = example_rng.integers(0, count, (size, count))
            picks = seed_rng.integers(0, seeds, (size, seeds))
            weights = _weights(draws, codes, count) if weighted else None
            diff = _values(scorer, b, draws, weights, members) - _values(scorer, a, draws, weights, members)
            examples.append(diff.mean(axis=1))
            both.append(np.take_along_axis(diff, picks, axis=1).mean(axis=1) if seeds > 1 else diff.mean(axis=1))
            done += size
    difference = point_b - point_a

    def interval(replicates: list[np.ndarray], resampled: str) -> Interval:
        distribution = np.concatenate(replicates)
        distribution = distribution[np.isfinite(distribution)]
        tail = (1 - confidence) / 2
        low, high = (float(v) for v in np.quantile(distribution, [tail, 1 - tail])) if len(distribution) else \
            (float("nan"), float("nan"))
        used = "basic" if method.lower() == "basic" else "percentile"
        if used == "basic":
            low, high = 2 * difference - high, 2 * difference - low
        return Interval(a=point_a, b=point_b, difference=difference, low=low, high=high, confidence=confidence,
                        n=n, seeds=seeds, groups=count, n_resamples=n_resamples, method=used,
                        standard_error=float(np.std(distribution, ddof=1)) if len(distribution) > 1 else 0.0,
                        resampled=resampled)

    return (interval(both, "seeds and examples" if seeds > 1 else "examples"), interval(examples, "examples"))


def two_way_bootstrap(scorer: Scorer, a: np.ndarray, b: np.ndarray, groups: list | None = None,
                      resample_seeds: bool = True, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                      method: str = "percentile") -> Interval:
    """One of :func:`bootstrap_intervals`: the two-way interval (``resample_seeds``) or the example-only one."""
    both, examples = bootstrap_intervals(scorer, a, b, groups, n_resamples, confidence, seed, method)
    return both if resample_seeds else examples


def verdict(low: float, high: float, greater_is_better: bool = True) -> str:
    """gain / loss / no evidence, from an interval of b - a and the metric's direction."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "no evidence"
    if low > 0:
        return "gain" if greater_is_better else "loss"
    if high < 0:
        return "loss" if greater_is_better else "gain"
    return "no evidence"
