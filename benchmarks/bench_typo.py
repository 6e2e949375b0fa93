"""How long a typo takes to be reported by `kinject run`, and that torch and transformers were not imported by then
(goal: under 2 s on an idle 2-core machine). Each case runs in a fresh process; figures in docs/benchmarks.md.

Usage: HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.bench_typo [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {  # what a user mistypes -> the kinject run arguments
    "strategy": ["run", "kimerx", "--task", "capr"],
    "task": ["run", "kimera", "--task", "caprr"],
    "model": ["run", "kimera", "--task", "capr", "--model", "minilmm"],
    "--set field": ["run", "kimera", "--task", "capr", "--set", "training.learnig_rate=1e-4"],
    "--set strategy field": ["run", "kimera", "--task", "capr", "--set", "strategy.tua=0.1"],
    "--set hook field": ["run", "kimera", "--task", "capr", "--set", "hooks.knowledge-probe.enabld=false"],
}
# runs the CLI's entry point, then says which heavy libraries the process had imported when the error came
PROBE = ("import json, sys\nfrom kinject.cli.app import main\ntry:\n    main(sys.argv[1:])\n    code = 0\n"
         "except SystemExit as exc:\n    code = exc.code\nprint(json.dumps({'code': code, 'imported': sorted(m for m "
         "in ('torch', 'transformers', 'datasets') if m in sys.modules)}))\n")


def typo_result(args: list[str], env: dict | None = None, python: str = sys.executable) -> dict:
    """One case in a fresh process: its exit code, stderr, the heavy modules imported, the wall time and the CPU time
    (user + system: about the wall time on an idle core)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([python, "-c", PROBE, *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {**found, "stderr": proc.stderr.strip(), "seconds": seconds, "cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose kinject is timed (another "
                        "checkout's venv, to compare)")
    args = parser.parse_args()
    from benchmarks.machine_class import label

    load = os.getloadavg()[0]
    rows = []
    for name, argv in CASES.items():
        results = [typo_result(argv, python=args.python) for _ in range(args.runs)]
        rows.append({"case": name, "command": "kinject " + " ".join(argv),
                     "median_s": statistics.median(r["seconds"] for r in results),
                     "cpu_s": statistics.median(r["cpu_s"] for r in results),
                     "max_s": max(r["seconds"] for r in results), "exit": results[0]["code"],
                     "imported": results[0]["imported"], "error": results[0]["stderr"].splitlines()[-1][:90]})
    print(f"machine: {label()}; {args.python}; load average {load:.1f} at the start; {args.runs} runs each\n")
    print("| typo | command | wall s (median) | CPU s (median) | max wall s | exit | torch / transformers imported | "
          "the error (start) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | `{r['command']}` | {r['median_s']:.2f} | {r['cpu_s']:.2f} | {r['max_s']:.2f} | "
              f"{r['exit']} | "
              f"{', '.join(r['imported']) or 'neither'} | {r['error']} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"label": label(), "load": load, "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
