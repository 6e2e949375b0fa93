"""Thread settings on a small CPU: a training step (forward, backward, fused AdamW) of two transformer layers, minilm's
size (hidden 384) and the tiny model's (hidden 32), at 1 and 2 torch threads, with OpenMP's default wait policy
(spin, then sleep) and ``OMP_WAIT_POLICY=PASSIVE`` (sleep at once: kinject's default since #52). Each configuration in
a child process (the OpenMP runtime reads its settings when torch loads), the configurations alternated over rounds;
wall and CPU time per step. Figures in docs/benchmarks.md ("Thread settings").

Usage: .venv/bin/python -m benchmarks.bench_threads [--rounds 3] [--isa native|avx2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

POLICIES = {"default (spin, then sleep)": None, "PASSIVE": "PASSIVE"}
CONFIGS = [(policy, threads) for policy in POLICIES for threads in (1, 2)]


def child(threads: int, hidden: int, steps: int = 8) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(hidden, 4, 4 * hidden, batch_first=True,
                                                                   dropout=0.0) for _ in range(2)])
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(16, 128, hidden)
    for i in range(steps + 2):
        if i == 2:
            start, start_cpu = time.perf_counter(), time.process_time()
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    print(json.dumps({"wall": (time.perf_counter() - start) / steps, "cpu": (time.process_time() - start_cpu) / steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--child", nargs=2, type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from benchmarks.machine_class import EMULATED, capped_env, label

    base = capped_env(args.isa)
    found: dict[tuple, list[dict]] = {}
    loads = []
    for r in range(args.rounds):
        for policy, threads in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
            env = {k: v for k, v in base.items() if k != "OMP_WAIT_POLICY"}
            if POLICIES[policy]:
                env["OMP_WAIT_POLICY"] = POLICIES[policy]
            for hidden in (384, 32):
                loads.append(os.getloadavg()[0])
                proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_threads", "--child", str(threads),
                                       str(hidden)], env=env, capture_output=True, text=True, check=True)
                found.setdefault((hidden, policy, threads), []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    name = label() if args.isa == "native" else f"{EMULATED}: {label()}"
    print(f"machine: {name}; load average {min(loads):.1f}-{max(loads):.1f} during the runs; {args.rounds} rounds, "
          "medians; ms per step\n")
    print("| layers | OpenMP wait policy | threads | wall ms | CPU ms | wall vs 1 thread, default policy |")
    print("|---|---|---|---|---|---|")
    for hidden in (384, 32):
        ref = statistics.median(x["wall"] for x in found[(hidden, "default (spin, then sleep)", 1)])
        for policy, threads in CONFIGS:
            runs = found[(hidden, policy, threads)]
            wall, cpu = (statistics.median(x[k] for x in runs) for k in ("wall", "cpu"))
            print(f"| hidden {hidden} | {policy} | {threads} | {wall * 1000:.0f} | {cpu * 1000:.0f} | "
                  f"{ref / wall:.2f}x |")


if __name__ == "__main__":
    main()
