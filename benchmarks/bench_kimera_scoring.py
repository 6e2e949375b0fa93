"""What one KIMERA mask-search round costs on CAPR dev at the headline defaults, by scoring-set size.

A round = forward+backward for head importance over ``importance_examples`` pairs (kimera.importance.score_heads)
+ forward only over the rest of the scoring set (kimera.importance.gated_logits) + the metric and its paired
bootstrap interval against the unmasked round (kimera.search_report.round_intervals, in the report stage after
the search). Per-pair costs are measured on
the same CAPR dev batches, interleaved (so load changes hit both), and combined into the cost of a round for
several (importance, metric) sizes. The weights do not change the cost, so the pre-trained minilm with a fresh
2-class head stands in for the phase-1 model.

Usage: KINJECT_DATA_DIR=../shared/data .venv/bin/python -m benchmarks.bench_kimera_scoring [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import numpy as np
    import torch

    from kinject.interfaces import Environment
    from kinject.training import minilm_path
    from kinject.api import load_tokenizer
    from kinject.plugins.kimera.importance import gated_logits, score_heads
    from kinject.plugins.kimera.scoring import build_scoring_set
    from kinject.plugins.kimera.search import RoundPredictions
    from kinject.plugins.kimera.search_report import round_intervals
    from kinject.registry import registry
    from kinject.training import build_task_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, default=3, help="batches of 32 pairs timed per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    env = Environment(data_dir=os.environ.get("KINJECT_DATA_DIR", "../shared/data"),
                      cache_dir=os.environ.get("KINJECT_CACHE_DIR", "/tmp/kinject-bench-cache"))
    task = registry("tasks").get("capr")()
    split = task.eval_splits[0]
    model = build_task_model(str(minilm_path()), task.head(env))
    scoring = build_scoring_set(task, env, split, None, load_tokenizer(str(minilm_path())), 128, 32, 1000)
    every = [*scoring.batches, *scoring.metric_batches]
    real = sum(int(b["attention_mask"].sum()) for b in every)
    padded = sum(b["attention_mask"].numel() for b in every)
    pairs = len(scoring.features)
    print(f"{task.describe_data(env)}\nsplit {split}: {pairs} pairs, {len(set(e['group'] for e in scoring.examples))} "
          f"queries, {real / pairs:.0f} tokens per pair, padding {1 - real / padded:.1%}; threads {args.threads}, "
          f"load {os.getloadavg()[0]:.1f}")

    timed = scoring.batches[:args.batches]
    n = sum(len(b["input_ids"]) for b in timed)
    gates = torch.ones(model.config.num_hidden_layers, model.config.num_attention_heads)

    def clock(fn) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) / n

    importance, forward = [], []
    clock(lambda: score_heads(model, timed[:1], "single_label_classification"))  # warm-up
    for _ in range(args.repeats):
        importance.append(clock(lambda: score_heads(model, timed, "single_label_classification")))
        forward.append(clock(lambda: gated_logits(model, timed, gates)))
    c_imp, c_fwd = statistics.median(importance), statistics.median(forward)
    print(f"per pair: importance (forward+backward) {c_imp * 1000:.1f} ms, forward only {c_fwd * 1000:.1f} ms, "
          f"ratio {c_fwd / c_imp:.2f}")

    logits = np.random.default_rng(0).normal(size=(pairs, 2))
    start = time.perf_counter()
    observe = RoundPredictions(task, env, split, scoring)
    observe(0, logits)
    observe(1, logits + 0.1)
    round_intervals(task, task.head(env).labels, "mrr", observe.rounds)
    interval = time.perf_counter() - start
    print(f"paired bootstrap interval (2000 resamples, {len(set(e['group'] for e in scoring.examples))} queries): "
          f"{interval:.2f} s per round")
    print("round cost (this machine, now):")
    for imp, total in ((1000, 1000), (1000, pairs), (2000, 2000), (2000, pairs), (pairs, pairs)):
        cost = imp * c_imp + (total - imp) * c_fwd + interval
        print(f"  importance on {imp:5d} pairs, metric on {total:5d}: {cost:6.1f} s "
              f"({cost / (1000 * c_imp + interval):.2f} x the previous default)")


if __name__ == "__main__":
    main()
