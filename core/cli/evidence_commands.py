"""``kinject compare`` and ``kinject report``: the paired comparison of finished runs and the page that shows it
(entry points ``kinject.commands``). The work is done in :mod:`kinject.evidence`; user errors are KinjectErrors
(one line, exit code 2).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from kinject.cli.printing import safe


# redirected to a file (or captured), rich would fold run paths into an 80-column table: keep rows whole
console = safe(Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=200))
err_console = safe(Console(stderr=True))


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
            interval: Optional[str] = typer.Option(None, "--interval", help="The interval the verdict reads: "
                                                   "seeds-t+examples (default; chosen by measured coverage: "
                                                   "docs/evidence.md) | two-way | two-way-corrected | seeds-t | "
                                                   "wider | examples; --json lists every kind"),
            debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Compare runs on the same examples: metric, difference to the baseline, bootstrap CI, per-seed tests."""
    from kinject.api import KinjectError
    from kinject.evidence.bootstrap import INTERVALS
    from kinject.evidence.comparison import compare_runs, print_comparison
    from kinject.evidence.metrics import metric_keys
    from kinject.evidence.runs import find_runs

    if method.lower() not in ("percentile", "basic", "bca"):
        raise KinjectError(f"--method {method}: expected percentile, basic or BCa")
    if interval is not None and interval not in INTERVALS:
        raise KinjectError(f"--interval {interval}: expected one of {', '.join(INTERVALS)}")
    sets = find_runs(runs)
    if baseline is not None:
        base = find_runs([baseline])
        if len(base) != 1:
            raise KinjectError(f"--baseline {baseline}: names {len(base)} runs; name one")
        sets = base + [s for s in sets if s.path.resolve() != base[0].path.resolve()]
    if len(sets) < 2:
        raise KinjectError("compare needs at least two runs (or a --baseline and one run)")
    from kinject.evidence.runs import short_names

    short_names(sets)
    keys = metric_keys(metric, [s.first.task_spec for s in sets]) if metric else None  # an evaluator: its metrics
    result = compare_runs(sets, split, keys, n_resamples=resamples, confidence=confidence, seed=seed, method=method,
                          interval=interval)
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
           headline: Optional[str] = typer.Option(None, "--headline", help="The comparison declared before the "
                                                  "runs (a run, or TASK/RUN): not adjusted; every other is "
                                                  "Holm-adjusted"),
           debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """One page (Markdown + self-contained HTML): runs, metrics, comparisons, paper figures, plots, commands."""
    from kinject.evidence.metrics import metric_keys
    from kinject.evidence.report import build_report
    from kinject.evidence.runs import find_runs

    keys = metric_keys(metric, [s.first.task_spec for s in find_runs(runs, groups=True)]) if metric else None
    done = build_report(runs, output, split, keys, n_resamples=resamples, seed=seed,
                        headline=headline)
    console.print(f"report of {done['runs']} run(s), {done['comparisons']} comparison(s), {done['plots']} plot(s): "
                  f"{done['markdown']}, {done['html']}", highlight=False)
