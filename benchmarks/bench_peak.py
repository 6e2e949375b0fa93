"""This machine's matmul peak: fp32 sgemm at 1 and 2 threads and bf16, natively and with the ISA capped at AVX2
(``benchmarks.machine_class``), each configuration in a child process, the configurations alternated over rounds.

It checks the emulation before any figure relies on it: the capped fp32 and bf16 peaks must differ from the native
ones (exit 1 if not). Figures: docs/benchmarks.md ("Know the limit").

Usage: .venv/bin/python -m benchmarks.bench_peak [--size 2048] [--bf16-size 2048] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = [(isa, threads) for isa in ("native", "avx2") for threads in (1, 2)]


def matmul_rates(dtype, n: int, device: str = "cpu", blocks: int = 3, block_s: float = 0.5) -> tuple[float, float]:
    """(best FLOP/s in wall time, best FLOP/s in this process's CPU time) of blocks of square n x n matmuls (two input
    pairs alternated, ~``block_s`` per block). CPU time: what a core of its own would do (summed over threads)."""
    import torch

    pairs = [(torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype))
             for _ in range(2)]
    out = torch.empty(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for a, b in pairs * 2:
        torch.matmul(a, b, out=out)
    sync()
    start = time.process_time()
    torch.matmul(*pairs[0], out=out)
    sync()
    one = max(time.process_time() - start, 1e-6)
    reps = max(2, min(50, int(block_s / one)))
    wall = cpu = 0.0
    for _ in range(blocks):
        sync()
        start, start_cpu = time.perf_counter(), time.process_time()
        for i in range(reps):
            torch.matmul(*pairs[i % 2], out=out)
        sync()
        flops = 2 * n ** 3 * reps
        wall = max(wall, flops / max(time.perf_counter() - start, 1e-9))
        cpu = max(cpu, flops / max(time.process_time() - start_cpu, 1e-9))
    return wall, cpu


def matmul_peak(dtype, n: int, device: str = "cpu", blocks: int = 3, block_s: float = 0.5, cpu: bool = False) -> float:
    """Best FLOP/s of :func:`matmul_rates` (in CPU time with ``cpu``)."""
    return matmul_rates(dtype, n, device, blocks, block_s)[cpu]


def child(threads: int, size: int, bf16_size: int) -> None:
    """One configuration, in this (child) process: prints one JSON line."""
    import torch

    from benchmarks.machine_class import capped, label

    torch.set_num_threads(threads)
    small = bf16_size if not capped() else max(128, bf16_size // 8)  # capped bf16 is emulated: ~1,000x slower
    found = {"threads": threads, "capability": torch.backends.cpu.get_cpu_capability(), "label": label()}
    found["fp32"], found["fp32_cpu"] = matmul_rates(torch.float32, size)
    found["bf16"], found["bf16_cpu"] = matmul_rates(torch.bfloat16, small, blocks=2, block_s=0.25)
    print(json.dumps(found))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=2048, help="fp32 matrix size (a large sgemm)")
    parser.add_argument("--bf16-size", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.size, args.bf16_size)
        return 0
    from benchmarks.machine_class import EMULATED, capped_env

    found: dict[tuple[str, int], list[dict]] = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        for isa, threads in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
            proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_peak", "--child", str(threads), "--size",
                                   str(args.size), "--bf16-size", str(args.bf16_size)], env=capped_env(isa),
                                  capture_output=True, text=True, check=True)
            found[(isa, threads)].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"  round {r}: {isa} {threads} thread(s): fp32 {found[(isa, threads)][-1]['fp32'] / 1e9:.1f} "
                  f"GFLOP/s", flush=True)
    rows = []
    for (isa, threads), runs in found.items():
        rows.append({"isa": isa, "threads": threads, "label": runs[0]["label"], "capability": runs[0]["capability"],
                     **{f"{k}_gflops": statistics.median(x[k] for x in runs) / 1e9
                        for k in ("fp32", "bf16", "fp32_cpu", "bf16_cpu")}})
    print(f"\nmatmul peak, median of {args.rounds} rounds (fp32 {args.size}^2; bf16 {args.bf16_size}^2, capped "
          f"{max(128, args.bf16_size // 8)}^2); machine: {rows[0]['label']}; load average {os.getloadavg()[0]:.1f}\n"
          "wall: FLOP per second; per CPU-s: FLOP per second of this process's CPU time (summed over its threads: what "
          "each core does while it runs)\n")
    print("| class | threads | ATen kernels | fp32 GFLOP/s wall | fp32 per CPU-s | bf16 GFLOP/s wall | "
          "bf16 per CPU-s | fp32 vs native (per CPU-s) |")
    print("|---|---|---|---|---|---|---|---|")
    native = {r["threads"]: r for r in rows if r["isa"] == "native"}
    for r in rows:
        name = "this machine" if r["isa"] == "native" else EMULATED
        print(f"| {name} | {r['threads']} | {r['capability']} | {r['fp32_gflops']:.1f} | {r['fp32_cpu_gflops']:.1f} | "
              f"{r['bf16_gflops']:.1f} | {r['bf16_cpu_gflops']:.1f} | "
              f"{r['fp32_cpu_gflops'] / native[r['threads']]['fp32_cpu_gflops']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "raw": {f"{k[0]}-{k[1]}": v for k, v in found.items()}},
                                        indent=2))
    capped = [r for r in rows if r["isa"] == "avx2"]
    if not all(r["fp32_cpu_gflops"] < 0.9 * native[r["threads"]]["fp32_cpu_gflops"] and
               r["bf16_cpu_gflops"] < 0.5 * native[r["threads"]]["bf16_cpu_gflops"] for r in capped):
        print("the AVX2 cap did not slow the fp32 and bf16 matmuls: the emulation does not hold here", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
