"""``kinject compare``, ``kinject report`` and ``kinject sweep``: commands of the evidence plugin, registered through
the ``kinject.commands`` entry points as a third party registers its own.
The work is done in :mod:`kinject.plugins.evidence`; user errors are KinjectErrors (one line, exit code 2).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

__kinject_fingerprint__ = False  # the command line: no stage output depends on this module

# redirected to a file (or captured), rich would fold run paths into an 80-column table: keep rows whole
console = Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=200)
err_console = Console(stderr=True)


def compare(runs: List[str] = typer.Argument(..., help="Run directories, --repeats parents (seed-*/) or globs"),
            baseline: Optional[str] = typer.Option(None, "--baseline", "-b", help="The reference run "
                                                   "(default: the first one given)"),
            split: str = typer.Option("test", "--split", help="Evaluation split whose predictions are paired"),
            metric: Optional[List[str]] = typer.Option(None, "--metric", "-m", help="Metric (repeatable; "
                                                       "default: the task's primary metric)"),
            as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables"),
            resamples: int = typer.Option(2000, "--resamples", min=100, help="Bootstrap resamples"),
            confidence: float = typer.Option(0.95, "--confidence", min=0.5, max=0.999, help="Interval level"),
            method: str = typer.Option("percentile", "--method", help="percentile | basic | BCa"),
            seed: int = typer.Option(0, "--seed", help="Seed of the resampling"),
            debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Compare runs on the same examples: metric, difference to the baseline, bootstrap CI, per-seed tests."""
    from kinject.api import KinjectError
    from kinject.plugins.evidence.compare import compare_runs, print_comparison
    from kinject.plugins.evidence.runs import find_runs

    if method.lower() not in ("percentile", "basic", "bca"):
        raise KinjectError(f"--method {method}: expected percentile, basic or BCa")
    sets = find_runs(runs)
    if baseline is not None:
        base = find_runs([baseline])
        if len(base) != 1:
            raise KinjectError(f"--baseline {baseline}: names {len(base)} runs; name one")
        sets = base + [s for s in sets if s.path.resolve() != base[0].path.resolve()]
    if len(sets) < 2:
        raise KinjectError("compare needs at least two runs (or a --baseline and one run)")
    result = compare_runs(sets, split, metric, n_resamples=resamples, confidence=confidence, seed=seed,
                          method=method)
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        print_comparison(result, console)
    for warning in result["warnings"]:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)


def report(runs: List[str] = typer.Argument(..., help="Run directories, --repeats parents, task-group outputs "
                                            "or globs"),
           output: Path = typer.Option(..., "--output", "-o", help="Folder for report.md, report.html, images/"),
           split: str = typer.Option("test", "--split", help="Split reported and compared"),
           metric: Optional[List[str]] = typer.Option(None, "--metric", "-m", help="Compared metric (repeatable)"),
           resamples: int = typer.Option(2000, "--resamples", min=100, help="Bootstrap resamples"),
           seed: int = typer.Option(0, "--seed", help="Seed of the resampling"),
           debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """One page (Markdown + self-contained HTML): runs, metrics, comparisons, paper figures, plots, commands."""
    from kinject.plugins.evidence.report import build_report

    done = build_report(runs, output, split, metric, n_resamples=resamples, seed=seed)
    console.print(f"report of {done['runs']} run(s), {done['comparisons']} comparison(s), {done['plots']} plot(s): "
                  f"{done['markdown']}, {done['html']}", highlight=False)


def sweep(strategy: str = typer.Argument(..., help="Strategy name"),
          task: Optional[str] = typer.Option(None, "--task", "-t", help="Task name"),
          space: Path = typer.Option(..., "--space", help="YAML: spec field -> {low, high[, log, step]} or choices"),
          trials: int = typer.Option(..., "--trials", min=1, help="Finished trials the study should have"),
          output: Optional[Path] = typer.Option(None, "--output", "-o", help="Sweep folder (default "
                                                "sweeps/<strategy>-<task>)"),
          storage: Optional[str] = typer.Option(None, "--storage", help="Optuna RDB URL shared by machines "
                                                "(default: sqlite file in the output folder)"),
          study: Optional[str] = typer.Option(None, "--study", help="Study name (default kinject-<strategy>-<task>)"),
          metric: Optional[str] = typer.Option(None, "--metric", help="Objective (default: the task's selection "
                                               "metric)"),
          direction: str = typer.Option("maximize", "--direction", help="maximize | minimize"),
          split: str = typer.Option("dev", "--split", help="Split the objective is read from"),
          config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run spec (the fixed part)"),
          sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a spec field: a.b=c"),
          model: Optional[str] = typer.Option(None, "--model", "-m", help="HF id, directory, minilm or tiny"),
          data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Datasets folder"),
          cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Stage cache folder"),
          seed: Optional[int] = typer.Option(None, "--seed", help="Run seed (also seeds the sampler)"),
          folds: Optional[int] = typer.Option(None, "--folds", min=2, help="Score each trial by K-fold cross-"
                                              "validation on the train split (default: 5 folds when it has under "
                                              "1,000 examples)"),
          no_folds: bool = typer.Option(False, "--no-folds", help="Score --split of each trial's run, whatever the "
                                        "train split's size"),
          debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Search hyper-parameters with optuna; every trial is a cached run; writes <output>/best.yaml."""
    from rich.table import Table

    from kinject.api import SpecError
    from kinject.plugins.evidence.study import run_sweep

    if folds is not None and no_folds:
        raise SpecError("--folds and --no-folds: choose one")
    fields = {"model.name": model, "seed": seed, "data_dir": data_dir and str(data_dir),
              "cache_dir": cache_dir and str(cache_dir)}
    out = output or Path("sweeps") / f"{strategy}-{task or 'task'}"
    result = run_sweep(strategy, task, space, trials, out, storage=storage, metric=metric, direction=direction,
                       split=split, study_name=study, config=config, sets=sets, fields=fields, seed=seed or 0,
                       folds=0 if no_folds else folds, announce=lambda line: console.print(line, highlight=False))
    scored = f"mean {result['split']} {result['metric']} of {result['folds']} train folds" if result["folds"] else \
        f"{result['split']} {result['metric']}"
    table = Table(title=f"study {result['study']} ({result['direction']} {scored})", title_justify="left")
    for column in ("trial", "state", "value", *(("folds",) if result["folds"] else ()), "params"):
        table.add_column(column)
    for t in result["trials"]:
        per_fold = (" ".join(f"{v:.3f}" for v in t["fold_scores"] or []),) if result["folds"] else ()
        table.add_row(str(t["number"]), t["state"], "-" if t["value"] is None else f"{t['value']:.4f}", *per_fold,
                      ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t["params"].items()))
    console.print(table)
    best = result["best"]
    retrain = " (trains on the whole train split)" if result["folds"] else ""
    console.print(f"best: trial {best['trial']} ({best['value']:.4f}) -> {best['path']}; run it{retrain} with "
                  f"kinject run {strategy} --config {best['path']}" if best else "no trial completed: no best.yaml",
                  highlight=False)
