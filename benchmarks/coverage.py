"""Coverage of kinject's comparison intervals on simulated paired runs with a known answer.

For arm A and B, seed s and test example i, an example is scored correct with probability
sigmoid(base + effect*[B] + u_i + v_i*[B] + theta_{arm,s} + w_{arm,s,i}): u_i the example's difficulty, v_i how much
more (or less) B gets it right, theta a seed's effect on a whole arm, w the seed x example noise. The known answer is
the population difference of accuracy over examples and seeds (computed by Gauss-Hermite quadrature). Each
replication draws a test set and S seeds per arm, and every interval of
:data:`kinject.evidence.bootstrap.INTERVALS` is computed by kinject's own code
(:func:`~kinject.evidence.bootstrap.interval_set`); the table gives how often each covers the answer.

Usage: python -m benchmarks.coverage [--replications 500] [--resamples 1000] [--seeds 3 5 10] [--regimes ...]
The defaults take about two minutes of CPU (816 s of wall time on the shared, loaded 2-core machine); docs/evidence.md holds its table.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

BASE, EFFECT, DIFFICULTY, INTERACTION = 0.8, 0.2, 1.5, 0.7


@dataclass(frozen=True)
class Regime:
    """One data-generating setting: seed effect sd ``tau``, seed x example sd ``omega``; ``pairs``: examples come in
    units of two sharing u and v (grouped in the bootstrap)."""

    name: str
    tau: float
    omega: float
    examples: int = 500
    pairs: bool = False


REGIMES = {
    "modest": Regime("modest seed effect + seed x example noise (tau .15, omega .5)", 0.15, 0.5),
    "larger-seed-effect": Regime("larger seed effect (tau .3, omega .5)", 0.3, 0.5),
    "seed-dominated": Regime("seed-dominated (tau .5, omega 0)", 0.5, 0.0),
    "no-seed-effect": Regime("no seed effect (tau 0, omega 0)", 0.0, 0.0),
    "units": Regime("units: 1,000 examples in 500 pairs sharing u, v, grouped (tau .15, omega .5)", 0.15, 0.5,
                    examples=1000, pairs=True),
}


def _mean_sigmoid(mean: float, sd: float) -> float:
    """E[sigmoid(X)] for X ~ N(mean, sd^2), by Gauss-Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    return float(np.sum(weights / (1 + np.exp(-(mean + sd * nodes)))) / np.sqrt(2 * np.pi))


def true_difference(regime: Regime) -> float:
    """The population accuracy of B minus A, over examples and seeds."""
    noise = DIFFICULTY ** 2 + regime.tau ** 2 + regime.omega ** 2
    return _mean_sigmoid(BASE + EFFECT, np.sqrt(noise + INTERACTION ** 2)) - _mean_sigmoid(BASE, np.sqrt(noise))


def simulate(regime: Regime, seeds: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list | None]:
    """One replication: per-example statistics (examples, 2, seeds) of A and B for kinject's accuracy scorer, and the
    units (None: every example its own)."""
    n = regime.examples
    units = n // 2 if regime.pairs else n
    u = rng.normal(0, DIFFICULTY, units)
    v = rng.normal(0, INTERACTION, units)
    groups = None
    if regime.pairs:
        u, v, groups = np.repeat(u, 2), np.repeat(v, 2), np.repeat(np.arange(units), 2).tolist()
    theta = rng.normal(0, regime.tau, (2, seeds, 1)) if regime.tau else np.zeros((2, seeds, 1))
    w = rng.normal(0, regime.omega, (2, seeds, n)) if regime.omega else 0.0
    logits = BASE + np.array([0.0, EFFECT])[:, None, None] + u + np.array([0.0, 1.0])[:, None, None] * v + theta + w
    correct = rng.random((2, seeds, n)) < 1 / (1 + np.exp(-logits))  # (arm, seed, example)
    stats = np.stack([correct.astype(float), np.ones_like(correct, dtype=float)], axis=2)  # (arm, seed, 2, n)
    a, b = (np.moveaxis(stats[arm], -1, 0).transpose(0, 2, 1) for arm in (0, 1))  # (n, 2, seeds)
    return a, b, groups


def coverage(regime: Regime, seeds: int, replications: int = 500, resamples: int = 1000, seed: int = 0,
             confidence: float = 0.95) -> dict:
    """How often each interval kind covers the true difference, with its mean width and the sd over seeds of one
    seed's difference: {kind: {"coverage", "width"}, "sd_per_seed": float, "truth": float}."""
    from kinject.evidence.bootstrap import INTERVALS, interval_set
    from kinject.evidence.metrics import MetricDef
    from kinject.evidence.scorers import scorer_for

    scorer = scorer_for(MetricDef("accuracy", "accuracy"), [[{"id": "0", "gold": "a", "pred": "a"}]])  # its columns
    truth = true_difference(regime)
    rng = np.random.default_rng([seed, seeds, int(regime.tau * 100), int(regime.omega * 100), regime.examples])
    hits = {kind: 0 for kind in INTERVALS}
    widths = {kind: 0.0 for kind in INTERVALS}
    spread = []
    for r in range(replications):
        a, b, groups = simulate(regime, seeds, rng)
        found = interval_set(scorer, a, b, groups, n_resamples=resamples, confidence=confidence, seed=r)
        per_seed = b[:, 0, :].mean(0) - a[:, 0, :].mean(0)
        if seeds > 1:
            spread.append(float(np.std(per_seed, ddof=1)))
        for kind, interval in found.items():
            hits[kind] += int(interval.low <= truth <= interval.high)
            widths[kind] += interval.high - interval.low
    out = {kind: {"coverage": hits[kind] / replications, "width": widths[kind] / replications} for kind in INTERVALS}
    out["sd_per_seed"] = float(np.mean(spread)) if spread else float("nan")
    out["truth"] = truth
    return out


def table(results: list[tuple[str, int, dict]], replications: int, resamples: int) -> str:
    """The Markdown table of :func:`coverage` results: one row per regime and seed count."""
    from kinject.evidence.bootstrap import DEFAULT_INTERVAL, INTERVALS

    kinds = [DEFAULT_INTERVAL, *[k for k in INTERVALS if k != DEFAULT_INTERVAL]]
    head = (["regime", "seeds", "sd(Δ) per seed"] + [f"{k}{' (default)' if k == DEFAULT_INTERVAL else ''}"
                                                      for k in kinds] + [f"width {DEFAULT_INTERVAL} / two-way"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, seeds, found in results:
        ratio = found[DEFAULT_INTERVAL]["width"] / found["two-way"]["width"] if found["two-way"]["width"] else 0.0
        cells = [name, str(seeds), f"{found['sd_per_seed']:.3f}"] + [f"{found[k]['coverage']:.3f}" for k in kinds]
        lines.append("| " + " | ".join(cells + [f"{ratio:.2f}"]) + " |")
    lines.append(f"\nCoverage of the 95% intervals over {replications} replications ({resamples} bootstrap resamples "
                 f"each; Monte Carlo SE about {np.sqrt(0.95 * 0.05 / replications):.3f} at 0.95).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = [(REGIMES[name].name, seeds, coverage(REGIMES[name], seeds, args.replications, args.resamples))
               for name in args.regimes for seeds in args.seeds]
    print(table(results, args.replications, args.resamples))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
