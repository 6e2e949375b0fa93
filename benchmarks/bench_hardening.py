"""What hardening costs (issue #36): peak memory when the data is a device or one huge line, and the time the weight
and digest checks add to `kinject eval` and to a fully cached run - measured in one run, as ratios.

Usage: python -m benchmarks.bench_hardening [--line-gb 2] [--workdir DIR]
Prints Markdown tables (docs/benchmarks.md, "Hardening").
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

from benchmarks.common import two_line_splits, write_textcls

PROBE = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(p.returncode)")


def kinject(args: list[str], env: dict) -> tuple[int, float, float]:
    """(exit code, peak RSS in MB, seconds) of one `kinject` process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, sys.executable, "-m", "kinject", *args], capture_output=True,
                          text=True, env=env)
    return done.returncode, int(done.stdout.strip() or 0) / 1024, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line-gb", type=float, default=2.0)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kinject-hardening-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "KINJECT_CACHE_DIR": str(work / "cache"), "KINJECT_PROGRESS": "0",
           "KINJECT_CHOOSE": "0", "OMP_NUM_THREADS": "1"}
    run = ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set"]
    kinject([*run, f"task.path={work / 'none'}"], env)  # builds the tiny model once (not measured)
    rows = []
    code, normal, _ = kinject([*run, f"task.path={work / 'none'}"], env)
    rows.append(("a run that stops at its missing data (the baseline)", code, normal))
    zero = two_line_splits(work / "zero")
    (zero / "train.jsonl").unlink(missing_ok=True)
    (zero / "train.jsonl").symlink_to("/dev/zero")
    code, peak, _ = kinject([*run, f"task.path={zero}"], env)
    rows.append(("/dev/zero as the train file", code, peak))
    big = two_line_splits(work / "big")
    with open(big / "train.jsonl", "wb") as handle:
        handle.write(b'{"text": "')
        block = b"a" * 2**20
        for _ in range(int(args.line_gb * 1024)):
            handle.write(block)
        handle.write(b'", "label": "x"}\n')
    code, peak, _ = kinject([*run, f"task.path={big}"], env)
    rows.append((f"a {args.line_gb:g} GB file of one line", code, peak))
    print("| data | exit code | peak RSS (MB) | vs the baseline |\n|---|---|---|---|")
    for what, code, peak in rows:
        print(f"| {what} | {code} | {peak:,.0f} | {peak - normal:+,.0f} MB |")

    # the checks' share of `kinject eval` and of a fully cached run (the same process, the checks timed alone)
    data = write_textcls(work / "textcls", n_train=200, n_eval=200)
    out = work / "run"
    base = [*run, f"task.path={data}", "--set", "training.epochs=1", "--set", "hooks.knowledge-probe.enabled=false"]
    kinject([*base, "-o", str(out)], env)
    _, _, cached = kinject([*base, "-o", str(work / "again")], env)
    _, _, evaluated = kinject(["eval", str(out / "model"), "--task", "textcls", "--set", f"task.path={data}"], env)
    from kinject.cache import damaged_files, read_stage_info
    from kinject.files import check_weights

    stages = [Path(s["dir"]) for s in json.loads((out / "run.json").read_text())["stages"]]
    start = time.perf_counter()
    for _ in range(10):
        check_weights(out / "model")
    weights = (time.perf_counter() - start) / 10
    start = time.perf_counter()
    for _ in range(10):
        for folder in stages:
            damaged_files(folder, (read_stage_info(folder) or {}).get("files"))
    digests = (time.perf_counter() - start) / 10
    print("\n| command | wall (s) | check (s) | share |\n|---|---|---|---|")
    print(f"| kinject eval (tiny, 400 examples) | {evaluated:.2f} | {weights:.4f} (weights) | {weights / evaluated:.2%} |")
    print(f"| kinject run, every stage cached | {cached:.2f} | {digests:.4f} (stage digests; weights were checked "
          f"before too) | {digests / cached:.2%} |")


if __name__ == "__main__":
    main()
