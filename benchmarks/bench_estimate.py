"""``--dry-run``'s estimate against the real time: every stage of a run estimated as ``kinject run --dry-run`` estimates
it (the same functions, in this process), then the run computed by ``kinject run`` in a child process and each stage's
seconds read from its stage.json. Goal (issue #52): within 2x for every stage. Figures in docs/benchmarks.md.

Cases (each on its own fresh cache):

  headline     ``kinject run kimera --task capr`` (the README's line 1), then another seed on the same cache (the
               estimate corrected by the first run)
  quick-after  a tiny ``--quick`` finetune on a text-classification task first (an unrelated run), then the tiny
               ``--quick`` headline: its estimate must not be skewed by the unrelated stage
  grid-cell    one cell of benchmarks/grids/tiny.yaml (finetune on textcls, the choice's fold runs first), estimated as
               ``kinject grid run --dry-run`` estimates it, then run by ``kinject grid run --only``

Usage: KINJECT_DATA_DIR=../shared/data .venv/bin/python -m benchmarks.bench_estimate [quick-after grid-cell headline]
       [--json out.json]
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI sets it before torch loads (the dry run measures here)
ROOT = Path(__file__).resolve().parents[1]


def estimates(data: dict) -> dict[str, tuple[str, float, str]]:
    """Stage folder -> (stage name, estimated seconds, how) of the run ``data`` (a spec dict), as --dry-run has them."""
    from kinject.api import build_spec, prepare_runs
    from kinject.cli.estimate import Estimator, stage_estimates

    run, = prepare_runs(build_spec(data), dry_run=True, announce=lambda line: None)
    estimator = Estimator(run.env.cache_dir, bool(run.spec.training.bf16))
    runs = [member for _, member, _ in run.members if member is not None] or [run]
    return {str(p.folder): (p.stage.name, guess.seconds, guess.how) for r in runs
            for p, guess in stage_estimates(r, estimator) if guess is not None}


def kinject(*args: str) -> float:
    """Run the kinject CLI in a child process; its wall seconds (a failure stops the benchmark)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kinject", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def actual(folder: Path) -> float | None:
    """A computed stage's seconds, from the stage.json in its cache folder."""
    record = folder / "stage.json"
    return float(json.loads(record.read_text())["seconds"]) if record.is_file() else None


def compare(case: str, guessed: dict, wall: float) -> list[dict]:
    rows = []
    for folder, (name, seconds, how) in guessed.items():
        real = actual(Path(folder))
        rows.append({"case": case, "stage": name, "estimate_s": seconds, "actual_s": real, "how": how,
                     "ratio": real / seconds if real else None})
    rows.append({"case": case, "stage": "(all stages)", "estimate_s": sum(r["estimate_s"] for r in rows),
                 "actual_s": sum(r["actual_s"] or 0 for r in rows), "how": f"wall {wall:.0f} s", "ratio": None})
    rows[-1]["ratio"] = rows[-1]["actual_s"] / rows[-1]["estimate_s"]
    return rows


def run_case(spec: dict, args: list[str], case: str) -> list[dict]:
    guessed = estimates(spec)
    wall = kinject("run", *args)
    return compare(case, guessed, wall)


def spec_of(strategy: str, task: str, model: str | None, cache: Path, out: Path, seed: int = 42,
            quick: bool = False, **task_options) -> tuple[dict, list[str]]:
    """(spec dict, the kinject run arguments) of one run, the same run both ways."""
    data: dict = {"strategy": {"name": strategy}, "task": {"name": task, **task_options}, "cache_dir": str(cache),
                  "output": str(out), "seed": seed}
    args = [strategy, "--task", task, "--cache-dir", str(cache), "-o", str(out), "--seed", str(seed)]
    if model:
        data["model"] = {"name": model}
        args += ["--model", model]
    if quick:
        data["protocol"], data["training"] = "quick", {"limit": 64}
        args.append("--quick")
    for key, value in task_options.items():
        args += ["--set", f"task.{key}={value}"]
    return data, args


def quick_after(work: Path) -> list[dict]:
    from benchmarks.common import write_textcls

    cache = work / "cache-quick"
    textcls = write_textcls(work / "textcls", n_train=200, n_eval=64)
    unrelated, args = spec_of("finetune", "textcls", "tiny", cache, work / "unrelated", quick=True, path=str(textcls))
    rows = run_case(unrelated, args, "quick-after: the unrelated run first")
    headline, args = spec_of("kimera", "capr", "tiny", cache, work / "quick", quick=True)
    return rows + run_case(headline, args, "quick-after: tiny --quick headline")


def headline(work: Path) -> list[dict]:
    cache = work / "cache-headline"
    rows = []
    for seed, case in ((42, "headline, fresh cache"), (43, "headline, another seed on the same cache")):
        spec, args = spec_of("kimera", "capr", None, cache, work / f"headline-{seed}", seed=seed)
        rows += run_case(spec, args, case)
    return rows


def grid_cell(work: Path) -> list[dict]:
    from benchmarks.common import write_textcls
    from kinject.experiments.grid_exec import plan_cell
    from kinject.experiments.grid import load_grid

    textcls = write_textcls(work / "grid-textcls", n_train=200, n_eval=64)
    cache, out, grid = work / "cache-grid", work / "grid", ROOT / "benchmarks" / "grids" / "tiny.yaml"
    sets = [f"task.path={textcls}", f"cache_dir={cache}", "training.max_steps=30"]
    cell = next(c for c in load_grid(grid, out, sets).cells if c.id == "textcls/finetune/seed-42")
    plan = plan_cell(cell, {})
    guessed = sum(plan.seconds.values()) + (plan.choice["fold_runs"] * plan.choice["seconds"] if plan.choice else 0)
    wall = kinject("grid", "run", str(grid), "-o", str(out), "--only", cell.id, "--executor", "debug",
                   *[x for s in sets for x in ("--set", s)])
    status = json.loads((out / "_grid" / "status" / f"{cell.id}.json").read_text())
    how = f"{len(plan.seconds)} stages" + (f" after {plan.choice['fold_runs']} fold runs" if plan.choice else "")
    return [{"case": "grid-cell textcls/finetune/seed-42", "stage": "(the cell)", "estimate_s": guessed,
             "actual_s": float(status["seconds"]), "how": f"{how}; wall {wall:.0f} s",
             "ratio": float(status["seconds"]) / guessed}]


CASES = {"quick-after": quick_after, "grid-cell": grid_cell, "headline": headline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), help=", ".join(CASES))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="work here (kept) instead of a temporary folder")
    args = parser.parse_args()
    from benchmarks.machine_class import label

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-estimate-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {label()}; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    rows = []
    for name in args.cases:
        rows += CASES[name](work)
        print(table([r for r in rows if r["case"].startswith(name.split("-")[0])]), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"label": label(), "rows": rows}, indent=2))
    print(f"\nall cases (load average {os.getloadavg()[0]:.1f} at the end):\n{table(rows)}")


def table(rows: list[dict]) -> str:
    lines = ["| case | stage | estimate s | actual s | actual / estimate | within 2x | how estimated |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio, real = r["ratio"], r["actual_s"]
        ok = "" if ratio is None else "yes" if 0.5 <= ratio <= 2 else "**no**"
        lines.append(f"| {r['case']} | {r['stage']} | {r['estimate_s']:.1f} | {'' if real is None else f'{real:.1f}'} "
                     f"| {'' if ratio is None else f'{ratio:.2f}'} | {ok} | {r['how']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
