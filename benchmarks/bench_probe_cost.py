"""What the knowledge probe costs in a quick try: ``kinject run finetune --task textcls --quick`` (minilm, a
text-classification task unrelated to the probe's graph), each on a fresh cache, with the full probe (400 + 400
pairs: ``--set hooks.knowledge-probe.pairs=400``) and with the quick try's default (100 + 100); every stage's seconds
from its stage.json. Optionally with the ISA capped at AVX2 (``--isa avx2``: an emulation, float32 as kinject decides
there). Figures in docs/benchmarks.md.

Usage: .venv/bin/python -m benchmarks.bench_probe_cost [--isa native|avx2] [--model minilm]
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


def stage_seconds(cache: Path) -> dict[str, float]:
    return {p.parent.parent.name: float(json.loads(p.read_text())["seconds"])
            for p in cache.glob("stages/*/*/stage.json")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--model", default="minilm")
    args = parser.parse_args()
    from benchmarks.common import write_textcls
    from benchmarks.machine_class import EMULATED, capped_env, label

    work = Path(tempfile.mkdtemp(prefix="bench-probe-"))
    data = write_textcls(work / "textcls", n_train=200, n_eval=64)
    rows = []
    for name, extra in (("full probe (400 + 400 pairs)", ["--set", "hooks.knowledge-probe.pairs=400"]),
                        ("quick try's probe (100 + 100, the default under --quick)", [])):
        cache = work / f"cache-{len(rows)}"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kinject", "run", "finetune", "--task", "textcls", "--model", args.model,
                        "--quick", "--set", f"task.path={data}", "--cache-dir", str(cache), "-o",
                        str(work / f"run-{len(rows)}"), *extra], check=True, env=capped_env(args.isa),
                       stdout=subprocess.DEVNULL)
        seconds = stage_seconds(cache)
        rows.append((name, time.perf_counter() - start, seconds))
    where = f"{EMULATED}" if args.isa == "avx2" else label()
    print(f"machine: {where if args.isa == 'native' else where + ' (' + label() + ')'}; load average "
          f"{os.getloadavg()[0]:.1f} at the end; {args.model}, textcls --quick (200 train / 64 dev / 64 test)\n")
    print("| probe | wall s | stages s | probe-base s | probe s | probe share of the stages |")
    print("|---|---|---|---|---|---|")
    for name, wall, seconds in rows:
        total = sum(seconds.values())
        probe = seconds.get("probe-base", 0) + seconds.get("probe", 0)
        print(f"| {name} | {wall:.0f} | {total:.1f} | {seconds.get('probe-base', 0):.1f} | "
              f"{seconds.get('probe', 0):.1f} | {probe / total:.0%} |")


if __name__ == "__main__":
    main()
