"""Engine safety figures (docs/benchmarks.md, "Engine safety"):

1. ``concurrent``: N identical runs started together on one cache vs one run alone (wall time, and how many
   processes computed each stage: 1 is the goal).
2. ``overlong``: peak RSS of a run whose training file holds one overlong line vs the same run without it.
3. ``verify``: what checking a cache hit's files costs, as a share of a fully cached run (goal < 5%), for the
   run given by --run-args (default: the headline, `kimera --task capr`), once by size and time (every hit)
   and once by full sha256 (a hit whose files were touched).

Usage: .venv/bin/python -m benchmarks.bench_engine_safety [concurrent|overlong|verify ...] [--processes 4]
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

from benchmarks.common import write_textcls

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, HF_HUB_OFFLINE="1", KINJECT_PROGRESS="0", TOKENIZERS_PARALLELISM="false")
MEASURED = ("import resource, sys\nfrom kinject.cli.app import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
            "    print('peak-rss-kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


def kinject(args: list[str], **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", MEASURED, *args], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **popen)


def wait(processes: list[subprocess.Popen]) -> list[float]:
    peaks = []
    for process in processes:
        _, err = process.communicate()
        if process.returncode != 0:
            raise SystemExit(err[-3000:])
        peaks.append(next(int(l.split()[1]) / 1024 for l in err.splitlines() if l.startswith("peak-rss-kb")))
    return peaks


def finetune_args(data: Path, cache: Path, out: Path) -> list[str]:
    return ["run", "finetune", "--task", "textcls", "--model", "minilm", "--set", f"task.path={data}",
            "--set", "training.epochs=2", "--set", "training.batch_size=16", "--cache-dir", str(cache),
            "-o", str(out)]


def concurrent(tmp: Path, processes: int) -> None:
    data = write_textcls(tmp / "data", n_train=1024, n_eval=64)
    start = time.perf_counter()
    wait([kinject(finetune_args(data, tmp / "alone", tmp / "alone-run"))])
    alone = time.perf_counter() - start
    start = time.perf_counter()
    outs = [tmp / f"shared-{i}" for i in range(processes)]
    wait([kinject(finetune_args(data, tmp / "shared", out)) for out in outs])
    together = time.perf_counter() - start
    computed = {}
    for out in outs:
        for stage in json.loads((out / "run.json").read_text())["stages"]:
            computed[stage["name"]] = computed.get(stage["name"], 0) + (not stage["cached"])
    print(f"concurrent: 1 run alone {alone:.1f} s; {processes} identical runs together on one cache {together:.1f} s "
          f"({together / alone:.2f}x); processes that computed each stage: {computed}")


def overlong(tmp: Path, megabytes: int) -> None:
    normal, long = write_textcls(tmp / "normal"), write_textcls(tmp / "long")
    with open(long / "train.jsonl", "a") as handle:
        handle.write(json.dumps({"text": "gene " * (megabytes * 200_000), "label": "bio"}) + "\n")
    base = ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", "training.epochs=1",
            "--cache-dir", str(tmp / "cache")]
    rss = []
    for data, name in ((normal, "normal"), (long, "long")):
        start = time.perf_counter()
        rss.append((wait([kinject([*base, "--set", f"task.path={data}", "-o", str(tmp / f"{name}-run")])])[0],
                    time.perf_counter() - start))
    print(f"overlong: peak RSS {rss[0][0]:.0f} MB ({rss[0][1]:.1f} s) without, {rss[1][0]:.0f} MB ({rss[1][1]:.1f} s) "
          f"with one {megabytes} MB line in the training file")


def verify(tmp: Path, run_args: list[str]) -> None:
    from kinject.cache import check_finished, read_stage_info

    out = tmp / "cached-run"
    wait([kinject([*run_args, "-o", str(out)])])  # fills the cache (or hits it)
    start = time.perf_counter()
    wait([kinject([*run_args, "-o", str(out)])])
    cached = time.perf_counter() - start
    folders = [Path(s["dir"]) for s in json.loads((out / "run.json").read_text())["stages"]]
    assert all(s["cached"] for s in json.loads((out / "run.json").read_text())["stages"])
    start = time.perf_counter()
    for folder in folders:
        assert check_finished(folder) == (True, [])
    by_stat = time.perf_counter() - start
    size = sum(r["size"] for f in folders for r in (read_stage_info(f)["files"] or {}).values())
    start = time.perf_counter()
    from kinject.cache import file_records

    for folder in folders:
        file_records(folder)  # what a hit whose files were all touched costs: every file hashed
    hashed = time.perf_counter() - start
    print(f"verify: fully cached run {cached:.1f} s ({len(folders)} stages, {size / 1e6:.0f} MB of files); checking "
          f"every hit by size and time {by_stat * 1e3:.1f} ms ({by_stat / cached:.2%}); hashing every file "
          f"{hashed:.2f} s ({hashed / cached:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="*", default=["concurrent", "overlong", "verify"])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--megabytes", type=int, default=51)
    parser.add_argument("--run-args", default="run kimera --task capr")
    parser.add_argument("--cache-dir", default=None, help="for verify: a cache that may already hold the run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "concurrent" in args.what:
            concurrent(tmp, args.processes)
        if "overlong" in args.what:
            overlong(tmp, args.megabytes)
        if "verify" in args.what:
            cache = args.cache_dir or str(tmp / "verify-cache")
            verify(tmp, [*args.run_args.split(), "--cache-dir", cache])


if __name__ == "__main__":
    main()
