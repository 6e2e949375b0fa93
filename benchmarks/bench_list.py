"""`kinject list` wall time (goal: median < 0.5 s) and proof that listing imports no torch.

Usage: .venv/bin/python -m benchmarks.bench_list [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cmd = [sys.executable, "-m", "kinject", "list"]
    subprocess.run(cmd, capture_output=True, check=True)  # warm the file cache
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    baseline = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=True)
        baseline.append(time.perf_counter() - start)
    trace = subprocess.run([sys.executable, "-X", "importtime", "-m", "kinject", "list"], capture_output=True,
                           text=True, check=True).stderr
    imported = {line.split("|")[-1].strip() for line in trace.splitlines() if "|" in line}
    heavy = sorted(m for m in imported if m.split(".")[0] in {"torch", "transformers", "datasets", "numpy"})
    print(f"kinject list: median {statistics.median(times):.3f} s, min {min(times):.3f} s over {args.runs} runs "
          f"(bare python start: median {statistics.median(baseline):.3f} s)")
    print(f"modules imported: {len(imported)}; torch/transformers/datasets/numpy imported: {heavy or 'none'}")


if __name__ == "__main__":
    main()
