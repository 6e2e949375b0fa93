"""Time and memory of the comparison interval at a study's size: the two-way bootstrap over seeds and examples
(kinject.evidence.bootstrap) and the example-only one, on synthetic accuracy records of S seeds x N test
examples per system, through the same ``pair`` that `kinject compare`, `grid` and `report` call.

Usage: python -m benchmarks.bench_intervals [--seeds 10] [--examples 50000] [--resamples 2000] [--metric accuracy]
Prints one Markdown row per interval kind: seconds and the peak RSS of the process (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np


def records(n: int, correct: np.ndarray, labels=("no", "yes")) -> list[dict]:
    gold = np.arange(n) % 2
    pred = np.where(correct, gold, 1 - gold)
    return [{"id": str(i), "gold": labels[g], "pred": labels[p], "scores": [float(p == 0), float(p == 1)]}
            for i, (g, p) in enumerate(zip(gold.tolist(), pred.tolist()))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--examples", type=int, default=50_000)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--metric", default="accuracy", choices=["accuracy", "auroc_macro"])
    args = parser.parse_args()
    from kinject.api import MetricRef
    from kinject.evidence.comparison import pair
    from kinject.evidence.metrics import MetricDef, define

    rng = np.random.default_rng(0)
    base = {s: records(args.examples, rng.random(args.examples) < 0.70) for s in range(args.seeds)}
    arm = {s: records(args.examples, rng.random(args.examples) < 0.71) for s in range(args.seeds)}
    if args.metric == "accuracy":
        metric = define("accuracy")
    else:
        options = MetricRef(name="auroc", options={"averages": ["macro"], "positive": "yes"}).build().config
        metric = MetricDef("auroc_macro", "auroc", options.model_dump(), ("no", "yes"))
    start = time.perf_counter()
    _, row = pair(metric, base, [arm], n_resamples=args.resamples)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| seeds | examples | resamples | metric | both intervals (s) | peak RSS (MB) | Δ | CI seeds x examples | "
          "CI examples |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {args.seeds} | {args.examples:,} | {args.resamples} | {args.metric} | {seconds:.1f} | {peak_mb:,.0f} | "
          f"{row['difference']:+.4f} | [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}] | "
          f"[{row['ci_low_examples']:+.4f}, {row['ci_high_examples']:+.4f}] |")


if __name__ == "__main__":
    main()
