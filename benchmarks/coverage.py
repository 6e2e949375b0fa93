"""Coverage of kinject's comparison intervals on simulated paired runs with a known answer.

For arm A and B, seed s and test example i, an example is scored correct with probability
sigmoid(base + effect*[B] + u_i + v_i*[B] + theta_{arm,s} + w_{arm,s,i}): u_i the example's difficulty, v_i how much
more (or less) B gets it right, theta a seed's effect on a whole arm, w the seed x example noise. The known answer is
the population difference of accuracy over examples and seeds (computed by Gauss-Hermite quadrature). Each
replication draws a test set and S seeds per arm, and every interval of
:data:`kinject.evidence.bootstrap.INTERVALS` is computed by kinject's own code
(:func:`~kinject.evidence.bootstrap.interval_set`); the table gives how often each covers the answer.

Two designs the first table leaves out have a second table:

* a shared draw: delta ~ N(0, draw^2) added to B's logits and shared by ``seeds_per_draw`` of B's seeds (all of
  them: one KG retraining for every fine-tuning seed), as a stage whose key holds no run seed is. The answer over
  draws is the population difference with delta's variance in it; the answer conditional on the draw is that of
  the replication's delta. The draw-aware default gets each seed's draw label (:func:`interval_set`'s ``draws``).
* bimodal seeds: each of B's seeds collapses with probability ``collapse`` (logit ``COLLAPSE`` lower, about -0.45
  accuracy), as the shuffled-facts arms do.

Usage: python -m benchmarks.coverage [--replications 500] [--resamples 1000] [--seeds 3 5 10] [--regimes ...]
The first table's regimes took 816 s of wall time on the shared, loaded 2-core machine, the second's 1,402 s;
docs/evidence.md holds both tables.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

BASE, EFFECT, DIFFICULTY, INTERACTION = 0.8, 0.2, 1.5, 0.7
COLLAPSE = -3.0  # a collapsed seed's logit shift (about -0.45 accuracy)


@dataclass(frozen=True)
class Regime:
    """One data-generating setting: seed effect sd ``tau``, seed x example sd ``omega``; ``pairs``: examples come in
    units of two sharing u and v (grouped in the bootstrap)."""

    name: str
    tau: float
    omega: float
    examples: int = 500
    pairs: bool = False
    draw: float = 0.0  # sd of a draw added to B's logits, shared by seeds_per_draw of B's seeds
    seeds_per_draw: int | None = None  # None: one draw for all of B's seeds
    collapse: float = 0.0  # probability that a seed of B collapses (logit COLLAPSE lower)
    seeds: tuple[int, ...] = (3, 5, 10)  # the seed counts it is measured at (--seeds overrides)

    @property
    def designed(self) -> bool:
        """A shared-draw or bimodal regime (the second table)."""
        return bool(self.draw or self.collapse)

    def draw_labels(self, seeds: int) -> list[int] | None:
        """Which draw each of B's seeds has (None: no shared draw)."""
        if not self.draw:
            return None
        size = self.seeds_per_draw or seeds
        return [s // size for s in range(seeds)]


REGIMES = {
    "modest": Regime("modest seed effect + seed x example noise (tau .15, omega .5)", 0.15, 0.5),
    "larger-seed-effect": Regime("larger seed effect (tau .3, omega .5)", 0.3, 0.5),
    "seed-dominated": Regime("seed-dominated (tau .5, omega 0)", 0.5, 0.0),
    "no-seed-effect": Regime("no seed effect (tau 0, omega 0)", 0.0, 0.0),
    "units": Regime("units: 1,000 examples in 500 pairs sharing u, v, grouped (tau .15, omega .5)", 0.15, 0.5,
                    examples=1000, pairs=True),
    "shared-draw-0.1": Regime("one draw shared by B's seeds, sd 0.1 logit (~0.015 accuracy; tau .15, omega .5)",
                              0.15, 0.5, examples=1000, draw=0.1, seeds=(5,)),
    "shared-draw-0.2": Regime("one draw shared by B's seeds, sd 0.2 logit (~0.029 accuracy)", 0.15, 0.5,
                              examples=1000, draw=0.2, seeds=(5, 10)),
    "reseeded-draw-0.2": Regime("a draw per seed (reseeded), sd 0.2 logit", 0.15, 0.5, examples=1000, draw=0.2,
                                seeds_per_draw=1, seeds=(5,)),
    "paired-draws-0.2": Regime("a draw per 2 seeds, sd 0.2 logit", 0.15, 0.5, examples=1000, draw=0.2,
                               seeds_per_draw=2, seeds=(6, 10)),
    "bimodal": Regime("B's seed collapses with p 0.2 (logit -3; tau .15, omega .5)", 0.15, 0.5, collapse=0.2,
                      seeds=(3, 5, 10)),
}


def _mean_sigmoid(mean: float, sd: float) -> float:
    """E[sigmoid(X)] for X ~ N(mean, sd^2), by Gauss-Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    return float(np.sum(weights / (1 + np.exp(-(mean + sd * nodes)))) / np.sqrt(2 * np.pi))


def true_difference(regime: Regime, shift: float = 0.0, over_draws: bool = True) -> float:
    """The population accuracy of B minus A, over examples and seeds (and over draws and collapses); ``shift``,
    with ``over_draws`` False: conditional on B's shared draw being ``shift``."""
    noise = DIFFICULTY ** 2 + regime.tau ** 2 + regime.omega ** 2
    spread = noise + INTERACTION ** 2 + (regime.draw ** 2 if over_draws else 0.0)
    centre = BASE + EFFECT + (0.0 if over_draws else shift)
    b = (1 - regime.collapse) * _mean_sigmoid(centre, np.sqrt(spread)) \
        + regime.collapse * _mean_sigmoid(centre + COLLAPSE, np.sqrt(spread))
    return b - _mean_sigmoid(BASE, np.sqrt(noise))


def simulate(regime: Regime, seeds: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list | None,
                                                                          float]:
    """One replication: per-example statistics (examples, 2, seeds) of A and B for kinject's accuracy scorer, the
    units (None: every example its own) and the first shared draw of B (0.0 without one)."""
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
    shift = 0.0
    labels = regime.draw_labels(seeds)
    if labels is not None:  # B's seeds share their draws
        shifts = rng.normal(0, regime.draw, max(labels) + 1)
        logits[1] += shifts[labels][:, None]
        shift = float(shifts[0])
    if regime.collapse:
        logits[1] += COLLAPSE * (rng.random(seeds) < regime.collapse)[:, None]
    correct = rng.random((2, seeds, n)) < 1 / (1 + np.exp(-logits))  # (arm, seed, example)
    stats = np.stack([correct.astype(float), np.ones_like(correct, dtype=float)], axis=2)  # (arm, seed, 2, n)
    a, b = (np.moveaxis(stats[arm], -1, 0).transpose(0, 2, 1) for arm in (0, 1))  # (n, 2, seeds)
    return a, b, groups, shift


def coverage(regime: Regime, seeds: int, replications: int = 500, resamples: int = 1000, seed: int = 0,
             confidence: float = 0.95) -> dict:
    """How often each interval kind covers the true difference, with its mean width and the sd over seeds of one
    seed's difference: {kind: {"coverage", "width"}, "sd_per_seed": float, "truth": float}."""
    from kinject.evidence.bootstrap import DEFAULT_INTERVAL, INTERVALS, interval_set
    from kinject.evidence.metrics import MetricDef
    from kinject.evidence.scorers import scorer_for

    scorer = scorer_for(MetricDef("accuracy", "accuracy"), [[{"id": "0", "gold": "a", "pred": "a"}]])  # its columns
    truth = true_difference(regime)
    key = [seed, seeds, int(regime.tau * 100), int(regime.omega * 100), regime.examples]
    if regime.designed:  # the first table's regimes keep their draws
        key += [int(regime.draw * 100), regime.seeds_per_draw or 0, int(regime.collapse * 100)]
    rng = np.random.default_rng(key)
    labels = regime.draw_labels(seeds)
    aware = labels is not None and 1 < len(set(labels)) < seeds  # the draw-aware default differs from the default
    one_draw = labels is not None and len(set(labels)) == 1  # its answer conditional on the draw is defined
    columns = [*INTERVALS, *(["draw-aware"] if aware else []), *(["conditional"] if one_draw else [])]
    hits = {kind: 0 for kind in columns}
    widths = {kind: 0.0 for kind in columns}
    spread = []
    for r in range(replications):
        a, b, groups, shift = simulate(regime, seeds, rng)
        found = interval_set(scorer, a, b, groups, n_resamples=resamples, confidence=confidence, seed=r)
        if aware:
            found["draw-aware"] = interval_set(scorer, a, b, groups, n_resamples=resamples, confidence=confidence,
                                               seed=r, draws=labels)[DEFAULT_INTERVAL]
        per_seed = b[:, 0, :].mean(0) - a[:, 0, :].mean(0)
        if seeds > 1:
            spread.append(float(np.std(per_seed, ddof=1)))
        targets = {kind: truth for kind in found}
        if one_draw:  # the default against the answer conditional on this draw
            found["conditional"] = found[DEFAULT_INTERVAL]
            targets["conditional"] = true_difference(regime, shift, over_draws=False)
        for kind, interval in found.items():
            hits[kind] += int(interval.low <= targets[kind] <= interval.high)
            widths[kind] += interval.high - interval.low
    out = {kind: {"coverage": hits[kind] / replications, "width": widths[kind] / replications} for kind in columns}
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


def design_table(results: list[tuple[Regime, int, dict]]) -> str:
    """The Markdown table of the shared-draw and bimodal regimes: the default against the answer over draws (and,
    where draws repeat but vary, the draw-aware default), against the answer conditional on one draw, and the
    other kinds."""
    from kinject.evidence.bootstrap import DEFAULT_INTERVAL

    kinds = ["two-way", "seeds-t", "wider", "examples"]
    head = ["regime", "seeds", "draws", "sd(Δ) per seed", f"{DEFAULT_INTERVAL} (default)", "draw-aware default",
            "default, conditional on the draw", *kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for regime, seeds, found in results:
        labels = regime.draw_labels(seeds)
        shown = lambda kind: f"{found[kind]['coverage']:.3f}" if kind in found else "-"  # noqa: E731
        cells = [regime.name, str(seeds), "-" if labels is None else str(len(set(labels))),
                 f"{found['sd_per_seed']:.3f}", shown(DEFAULT_INTERVAL), shown("draw-aware"), shown("conditional"),
                 *map(shown, kinds)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seed counts (default: each regime's)")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = [(REGIMES[name], seeds, coverage(REGIMES[name], seeds, args.replications, args.resamples))
               for name in args.regimes for seeds in (args.seeds or REGIMES[name].seeds)]
    plain = [(regime.name, seeds, found) for regime, seeds, found in results if not regime.designed]
    if plain:
        print(table(plain, args.replications, args.resamples))
    designed = [entry for entry in results if entry[0].designed]
    if designed:
        print(("\n" if plain else "") + design_table(designed))
        if not plain:
            print(f"\nCoverage of the 95% intervals over {args.replications} replications ({args.resamples} "
                  "bootstrap resamples each).")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
