"""Evaluation passes: ``kinject.training.predict`` (the Trainer's prediction loop, length-sorted batches) beside a plain
``torch.inference_mode`` loop over the same length-sorted batches (:func:`kinject.training.prediction.predict_here`),
at evaluation batch sizes 32 / 64 / 128, on the same features and model; the logits must agree. Timed in this
process's CPU time (the machine is shared), setups alternated over rounds; figures in docs/benchmarks.md.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.bench_eval [--model minilm|tiny] [--n 512] [--rounds 3]
       [--isa native|avx2] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the kinject CLI runs (read when torch loads)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def features(tokenizer, n: int, seed: int = 0) -> list[dict]:
    """``n`` sentence pairs of 16-240 tokens (a retrieval set's query + passage lengths), ids drawn at random."""
    import random

    rng = random.Random(seed)
    low = 1000 if len(tokenizer) > 2000 else len(tokenizer.all_special_ids) + 1
    rows = []
    for _ in range(n):
        length = rng.randint(16, 240)
        ids = [tokenizer.cls_token_id] + [rng.randrange(low, len(tokenizer)) for _ in range(length - 2)] + \
            [tokenizer.sep_token_id]
        rows.append({"input_ids": ids, "attention_mask": [1] * length, "token_type_ids": [0] * length})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("tiny", "minilm"), default="minilm")
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from benchmarks.machine_class import capped, capped_env, label

    if args.isa == "avx2" and not capped():
        return subprocess.run([sys.executable, "-m", "benchmarks.bench_eval", *(argv or sys.argv[1:])],
                              env=capped_env("avx2")).returncode
    import numpy as np
    import torch
    from transformers import DataCollatorWithPadding

    from kinject.api import load_tokenizer, resolve_model
    from kinject.defaults import native_bf16
    from kinject.interfaces import Head
    from kinject.training import build_task_model, minilm_path
    from kinject.training.prediction import predict, predict_here

    torch.set_num_threads(args.threads)
    bf16 = native_bf16()
    work = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    path = resolve_model("tiny", work) if args.model == "tiny" else str(minilm_path())
    tokenizer = load_tokenizer(path)
    model = build_task_model(path, Head("sequence", 2, labels=("no", "yes")), seed=0).eval()
    rows = features(tokenizer, args.n)
    collator = DataCollatorWithPadding(tokenizer)
    setups = {f"{kind} B={b}": (kind, b) for b in (32, 64, 128) for kind in ("Trainer.predict", "inference_mode loop")}
    times: dict[str, list[float]] = {name: [] for name in setups}
    logits: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        for name in (list(setups) if r % 2 == 0 else list(setups)[::-1]):
            kind, batch = setups[name]
            start = time.process_time()
            if kind == "Trainer.predict":
                out = predict(model, rows, collator, batch, work, bf16=bf16)
            else:
                out = predict_here(model, rows, collator, batch, bf16=bf16)
            times[name].append(time.process_time() - start)
            logits[name] = out
    reference = logits["Trainer.predict B=64"]
    base = statistics.median(times["Trainer.predict B=64"])
    print(f"{args.model}, {args.n} pairs of 16-240 tokens, {'bf16 autocast' if bf16 else 'float32'}, {label()}; "
          f"{args.threads} thread(s), {args.rounds} rounds, CPU time, load average {os.getloadavg()[0]:.1f}\n")
    print("| setup | CPU s (median) | pairs per CPU-s | vs Trainer.predict B=64 (kinject's default) | max abs logit "
          "difference |")
    print("|---|---|---|---|---|")
    for name in setups:
        t = statistics.median(times[name])
        diff = float(np.max(np.abs(logits[name] - reference)))
        print(f"| {name} | {t:.2f} | {args.n / t:.1f} | {base / t:.2f}x | {diff:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
