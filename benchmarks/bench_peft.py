"""LoRA (and IA3) vs full fine-tuning: time per optimiser step, peak memory and trainable parameters, on the same
batches (docs/benchmarks.md "peft").

Each setting runs in its own process (peak RSS is per process on a CPU; on CUDA the peak allocated memory), builds
the sequence-classification model kinject builds (``build_task_model``), wraps it with
``kinject.training.peft_tuning.add_peft`` for LoRA/IA3 (the head trained in full), and times ``--steps`` AdamW steps on random token batches of
``--batch`` x ``--length`` after ``--warmup`` steps. Settings alternate over ``--rounds`` so they share the
machine's noise; ratios are taken within a round.

Usage: .venv/bin/python -m benchmarks.bench_peft [--models tiny minilm bert-base] [--device cpu|cuda] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
METHODS = ("full", "lora", "ia3")


def one(model_name: str, method: str, args) -> dict:
    """Time one setting in this process."""
    import resource

    import torch

    from benchmarks.bench_mfu import encoder_dir

    from kinject.interfaces import Head
    from kinject.training.peft_tuning import add_peft
    from kinject.spec import PeftSpec
    from kinject.training import build_task_model

    torch.manual_seed(0)
    path = encoder_dir(model_name, Path(tempfile.mkdtemp()))  # tiny, minilm or bert-base (random, from a config)
    head = Head(kind="sequence", num_labels=2)
    model = build_task_model(path, head, seed=0)
    if method != "full":
        model = add_peft(model, PeftSpec(method=method), head)
    model.to(args.device).train()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randint(5, vocab, (args.batch, args.length), generator=generator),
                torch.randint(0, 2, (args.batch,), generator=generator)) for _ in range(4)]
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.bf16)

    def step(i: int) -> None:
        ids, labels = (t.to(args.device) for t in batches[i % len(batches)])
        with autocast:
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(args.warmup):
        step(i)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    peak = (torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"model": model_name, "method": method, "step_s": seconds, "peak_mb": peak, "trainable": trainable,
            "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "minilm"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                        help="bfloat16 autocast (kinject's default on CPUs with bf16 and on GPUs)")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args)))
        return
    passed = [a for a in sys.argv[1:]]
    rows: dict[tuple, list[dict]] = {}
    for _ in range(args.rounds):
        for model in args.models:
            for method in args.methods:
                out = subprocess.run([sys.executable, "-m", "benchmarks.bench_peft", *passed, "--one", model, method], check=True,
                                     capture_output=True, text=True).stdout
                result = json.loads(out.strip().splitlines()[-1])
                rows.setdefault((model, method), []).append(result)
    print(f"| model | method | trainable params | step (ms) | vs full | peak {'GPU' if args.device == 'cuda' else 'RSS'}"
          f" (MB) | vs full |\n|---|---|---|---|---|---|---|")
    for (model, method), results in rows.items():
        full = rows[(model, "full")] if (model, "full") in rows else None
        step = statistics.median(r["step_s"] for r in results)
        peak = statistics.median(r["peak_mb"] for r in results)
        ratio = (statistics.median(r["step_s"] / f["step_s"] for r, f in zip(results, full)) if full else float("nan"))
        mem = (statistics.median(r["peak_mb"] / f["peak_mb"] for r, f in zip(results, full)) if full else float("nan"))
        share = results[0]["trainable"] / results[0]["total"]
        print(f"| {model} | {method} | {results[0]['trainable']:,} ({share:.2%}) | {step * 1000:.1f} | {ratio:.2f}x | "
              f"{peak:.0f} | {mem:.2f}x |")


if __name__ == "__main__":
    main()
