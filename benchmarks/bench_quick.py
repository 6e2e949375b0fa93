"""``--quick`` with the real model: every registered strategy on one task of each kind it supports
(``kinject run STRATEGY --task TASK --model minilm --quick``), each on a fresh cache, timed from the command's start
to its exit (Python start, imports, the embedded graph and the knowledge probe included). Goal (issue #52): under 3
minutes each on 2 cores. A strategy that does not support a task's kind says so in one line (exit 2): the table
shows it as not supported. ``--isa avx2`` caps the matmul libraries at AVX2 (an emulation; float32, as kinject
decides there). Figures in docs/benchmarks.md.

Usage: KINJECT_DATA_DIR=../shared/data .venv/bin/python -m benchmarks.bench_quick [--isa native|avx2]
       [--strategies finetune kimera ...] [--tasks hpo-isa capr ncbi-disease] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.machine_class import capped_env, label

#: one task of each kind: sequence classification (embedded), retrieval (embedded), token tagging (the data dir)
TASKS = ("hpo-isa", "capr", "ncbi-disease")
GOAL_S = 180.0


def run_quick(strategy: str, task: str, model: str, isa: str) -> dict:
    """One ``--quick`` run on a fresh cache: its wall seconds, exit status and, on exit 2, its one-line reason."""
    with tempfile.TemporaryDirectory(prefix="bench-quick-") as tmp:
        command = [sys.executable, "-m", "kinject", "run", strategy, "--task", task, "--model", model, "--quick",
                   "--cache-dir", str(Path(tmp) / "cache"), "-o", str(Path(tmp) / "run")]
        env = {**capped_env(isa), "HF_HUB_OFFLINE": "1", "KINJECT_PROGRESS": "0"}
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    reason = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "") if done.returncode else ""
    return {"strategy": strategy, "task": task, "seconds": round(seconds, 1), "rc": done.returncode,
            "supported": not (done.returncode == 2 and "supports" in reason), "reason": reason[:200]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--strategies", nargs="*", help="default: every registered strategy")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from kinject.api import registry

    strategies = args.strategies or registry("strategies").names()
    print(f"{label() if args.isa == 'native' else 'AVX2 (emulated) on ' + label()}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print("| strategy | task | wall | under 3 min | exit |\n|---|---|---|---|---|", flush=True)
    rows = []
    for strategy in strategies:
        for task in args.tasks:
            row = run_quick(strategy, task, args.model, args.isa)
            rows.append(row)
            if not row["supported"]:
                print(f"| {strategy} | {task} | not supported | | 2 |", flush=True)
                continue
            verdict = "yes" if row["rc"] == 0 and row["seconds"] < GOAL_S else "**no**"
            print(f"| {strategy} | {task} | {row['seconds']:.0f} s | {verdict} | {row['rc']}"
                  f"{': ' + row['reason'] if row['rc'] else ''} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": label(), "isa": args.isa, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
