"""``kinject sweep`` and ``kinject grid``: many runs launched as cached runs (entry points ``kinject.commands``).
The work is done in :mod:`.study` and :mod:`.grid`; user errors are KinjectErrors (one line, exit code 2).
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


def sweep(strategy: str = typer.Argument(..., help="Strategy name"),
          task: Optional[str] = typer.Option(None, "--task", "-t", help="Task name"),
          space: Path = typer.Option(..., "--space", help="YAML: spec field -> {low, high[, log, step]} or choices"),
          trials: int = typer.Option(..., "--trials", min=1, help="Finished trials the study should have"),
          output: Optional[Path] = typer.Option(None, "--output", "-o", help="Sweep folder (default "
                                                "sweeps/<strategy>-<task>)"),
          storage: Optional[str] = typer.Option(None, "--storage", help="Optuna RDB URL, or journal:PATH (a journal "
                                                "file on a shared filesystem), shared by machines (default: sqlite "
                                                "file in the output folder)"),
          study: Optional[str] = typer.Option(None, "--study", help="Study name (default kinject-<strategy>-<task>)"),
          metric: Optional[str] = typer.Option(None, "--metric", help="Objective (default: the task's selection "
                                               "metric)"),
          direction: str = typer.Option(None, "--direction", help="maximize | minimize (default: the metric's "
                                        "direction: minimize for an error such as ECE)"),
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
    from kinject.experiments.study import run_sweep

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


# -- kinject grid ------------------------------------------------------------------------------------------ #
class _RunByDefault(TyperGroup):
    """``kinject grid FILE ...`` is ``kinject grid run FILE ...``; ``status`` and ``report`` are sub-commands."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


grid = typer.Typer(cls=_RunByDefault, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                   help="Run a grid of strategies x tasks x seeds (x settings) as cached runs; status; leaderboard.")

_GRID_FILE = typer.Argument(..., help="Grid file (YAML; docs/evidence.md, \"Grids\")")
_GRID_OUT = typer.Option(None, "--output", "-o", help="Grid folder (default: the file's output)")
_GRID_SETS = typer.Option(None, "--set", help="Override a spec field of every cell: a.b=c (strategy.*/task.*: the "
                          "cells whose plugin has the field)")
_GRID_ONLY = typer.Option(None, "--only", help="Only the cells whose id (TASK/SYSTEM/seed-S) matches this glob "
                          "(repeatable)")
_GRID_DATA = typer.Option(None, "--data-dir", help="Datasets folder of every cell (default: the file's data_dir, else "
                          "$KINJECT_DATA_DIR)")
_GRID_CACHE = typer.Option(None, "--cache-dir", help="Stage cache of every cell (default: the file's cache_dir, else "
                           "$KINJECT_CACHE_DIR)")


def _load(file: Path, output: Optional[Path], sets: Optional[List[str]], only: Optional[List[str]] = None,
          data_dir: Optional[Path] = None, cache_dir: Optional[Path] = None):
    from kinject.experiments.grid import load_grid, select

    sets = [*(sets or []), *(f"{key}={Path(folder).expanduser().absolute()}" for key, folder in
                             (("data_dir", data_dir), ("cache_dir", cache_dir)) if folder)]
    loaded = load_grid(file, output, sets)
    return loaded, select(loaded.cells, only)


def _quiet_runs(debug: bool) -> None:
    """Runs in this process log to their kinject.log; the console keeps one line per cell (warnings still show)."""
    import logging

    if not debug:
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:
                handler.setLevel(logging.WARNING)


def _dry_run(cells) -> None:
    from kinject.cli.estimate import Estimator
    from kinject.cli.run import duration
    from kinject.evidence import plural
    from kinject.experiments.grid_state import cell_state
    from kinject.experiments.grid_exec import plan_cell

    width = max(len(c.id) for c in cells)
    seconds: dict[str, float] = {}  # stage key -> estimate (a stage cells share is computed once)
    keys: list[str] = []
    choices: dict[str, dict] = {}  # key -> the choice cells make first (cells sharing one run it once)
    estimators: dict[tuple[str, bool], Estimator] = {}  # by cache and precision
    todo = done = 0
    for cell in cells:
        state = cell_state(cell)
        if state.state in ("done", "running"):
            done += state.state == "done"
            text = state.state + (f" ({state.detail})" if state.detail and state.state == "running" else "")
        else:
            plan = plan_cell(cell, estimators)
            keys += list(plan.seconds)
            seconds.update(plan.seconds)
            todo += 1
            what = "to compute" if not plan.cached else "to run"
            text = f"{what}: {plan.cached} of {plan.total} stages cached" + (
                f" ({state.state}: {state.detail})" if state.state == "failed" or state.detail else "")
            if plan.choice is not None:
                choices[plan.choice.get("key") or cell.id] = plan.choice
                text += f", after {plan.choice['fold_runs']} fold runs of the choice"
            own = sum(plan.seconds.values()) + (plan.choice["fold_runs"] * plan.choice["seconds"]
                                                if plan.choice else 0.0)
            text += f" (~{duration(own)})"
        console.print(f"{cell.id:<{width}}  {text:<40}  {cell.run_dir}", markup=False, highlight=False)
    console.print(f"{plural(len(cells), 'cell')}: {done} done, {todo} to run; {len(keys)} stage(s) to compute, "
                  f"{len(set(keys))} distinct (a stage that cells share is computed once)", highlight=False)
    if choices:  # the automatic choice's cost, said before the grid runs (as `kinject run --dry-run` says it)
        console.print(f"the automatic choice first: {plural(sum(c['fold_runs'] for c in choices.values()), 'fold run')}"
                      f" of a plain fine-tune ({plural(len(choices), 'choice')}: cells that share one run it once; "
                      "--set choose=false skips it)", highlight=False)
    total = sum(seconds.values()) + sum(c["fold_runs"] * c["seconds"] for c in choices.values())
    console.print(f"estimated time: ~{duration(total)} for the distinct stages to compute, one after another "
                  f"(local workers run cells at once); "
                  + "; ".join(sorted({e.accuracy() for e in estimators.values()})), highlight=False, soft_wrap=True)


@grid.command("run")
def grid_run(file: Path = _GRID_FILE,
             executor: Optional[str] = typer.Option(None, "--executor", "-e", help="debug (in this process) | "
                                                    "local (worker processes) | slurm (one array job); default: "
                                                    "the file's executor, else local"),
             workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="local: cells at once "
                                                   "(default: the file's local.workers, else 1)"),
             dry_run: bool = typer.Option(False, "--dry-run", help="List the cells, their folders and cache state; "
                                          "run nothing"),
             output: Optional[Path] = _GRID_OUT, sets: Optional[List[str]] = _GRID_SETS,
             only: Optional[List[str]] = _GRID_ONLY, data_dir: Optional[Path] = _GRID_DATA,
             cache_dir: Optional[Path] = _GRID_CACHE,
             partition: Optional[str] = typer.Option(None, "--partition", help="slurm: partition"),
             gpus: Optional[int] = typer.Option(None, "--gpus", min=0, help="slurm: GPUs per cell (--gres=gpu:N)"),
             time_limit: Optional[str] = typer.Option(None, "--time", help="slurm: time per cell (minutes or "
                                                      "[D-]HH:MM[:SS])"),
             cpus: Optional[int] = typer.Option(None, "--cpus", min=1, help="slurm: CPUs per cell"),
             mem: Optional[str] = typer.Option(None, "--mem", help="slurm: memory per cell (GB or e.g. 32G)"),
             parallelism: Optional[int] = typer.Option(None, "--parallelism", min=1, help="slurm: cells running at "
                                                       "once"),
             debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Run the cells not done yet (each an ordinary cached `kinject run`), then write the leaderboard."""
    from kinject.api import SpecError
    from kinject.evidence import plural
    from kinject.experiments import grid_exec
    from kinject.experiments.grid_state import counts, states
    from kinject.experiments.grid_board import build_leaderboard, print_leaderboard

    loaded, cells = _load(file, output, sets, only, data_dir, cache_dir)
    how = executor or loaded.file.executor
    if how not in ("debug", "local", "slurm"):
        raise SpecError(f"--executor {how}: expected debug, local or slurm")
    slurm = {"partition": partition, "gpus": gpus, "time": time_limit, "cpus": cpus, "mem": mem,
             "parallelism": parallelism}
    if dry_run:
        console.print(f"grid {loaded.name} ({file}) -> {loaded.output}", highlight=False)
        _dry_run(cells)
        if how == "slurm":  # the array job as it would be submitted: the script and one spec per cell
            found = states(cells)
            grid_exec.submit_slurm(loaded, [c for c in cells if found[c.id].state in ("pending", "failed")] or cells,
                                   slurm, lambda line: console.print(line, markup=False, highlight=False),
                                   dry_run=True)
        return
    found = states(cells)
    todo = [c for c in cells if found[c.id].state in ("pending", "failed")]
    running = [c.id for c in cells if found[c.id].state == "running"]
    console.print(f"grid {loaded.name}: {plural(len(cells), 'cell')}, {len(cells) - len(todo) - len(running)} done, "
                  f"{len(running)} running elsewhere, {len(todo)} to run ({how}) -> {loaded.output}", highlight=False)
    if todo:
        from kinject import api

        for system in {(c.task, c.system): c for c in reversed(todo)}.values():  # each system checked first
            try:
                api.prepare(api.build_spec({**system.data, "output": str(system.run_dir)}))
            except SpecError as exc:
                raise type(exc)(f"{file}: cell {system.id}: {exc}") from None
            except api.KinjectError as exc:
                raise api.KinjectError(f"{file}: cell {system.id}: {exc}") from None
        say = lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
        if how == "slurm":
            grid_exec.submit_slurm(loaded, todo, slurm, say)
            return
        _quiet_runs(debug)
        if how == "debug":
            grid_exec.run_debug(loaded, todo, say)
        else:
            grid_exec.run_local(loaded, todo, workers or loaded.file.local.workers, say)
    found = states(loaded.cells)
    board = build_leaderboard(loaded, loaded.cells, found)
    print_leaderboard(board, loaded.file.baseline, console)
    console.print(f"{counts(found)}; leaderboard: {board['markdown']}, {board['html']}", highlight=False)
    if any(found[c.id].state == "failed" for c in cells):
        raise typer.Exit(1)


@grid.command("status")
def grid_status(file: Path = _GRID_FILE, output: Optional[Path] = _GRID_OUT, sets: Optional[List[str]] = _GRID_SETS,
                only: Optional[List[str]] = _GRID_ONLY, data_dir: Optional[Path] = _GRID_DATA,
                cache_dir: Optional[Path] = _GRID_CACHE,
                debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Each cell: done / running / failed (with its error line) / pending, and its folder."""
    from kinject.experiments.grid_state import counts, states

    loaded, cells = _load(file, output, sets, only, data_dir, cache_dir)
    found = states(cells)
    width = max(len(c.id) for c in cells)
    for cell in cells:
        state = found[cell.id]
        detail = f"  {state.detail}" if state.detail else ""
        console.print(f"{cell.id:<{width}}  {state.state:<8}{detail}", markup=False, highlight=False)
    console.print(f"{counts(found)} ({loaded.output})", highlight=False)


def leaderboard_metric(name: str | None, cells: list) -> str | None:
    """``--metric`` of a leaderboard as a metric key: an evaluator's entry-point name becomes the one metric it reports
    on the grid's tasks (:func:`kinject.evidence.metrics.metric_keys`); one that reports several is refused."""
    from kinject.api import KinjectError
    from kinject.evidence.metrics import metric_keys

    if not name:
        return None
    keys = metric_keys([name], [cell.data.get("task") for cell in cells])
    if len(keys) > 1:
        raise KinjectError(f"--metric {name}: evaluator {name!r} reports {', '.join(keys)} here; a leaderboard ranks "
                           "one: name it")
    return keys[0]


@grid.command("report")
def grid_report(file: Path = _GRID_FILE, output: Optional[Path] = _GRID_OUT, sets: Optional[List[str]] = _GRID_SETS,
                split: Optional[str] = typer.Option(None, "--split", help="Split compared (default: the file's, "
                                                    "else test)"),
                metric: Optional[str] = typer.Option(None, "--metric", "-m", help="Metric (default: the file's, else "
                                                     "the task's primary metric)"),
                resamples: int = typer.Option(2000, "--resamples", min=100, help="Bootstrap resamples"),
                seed: int = typer.Option(0, "--seed", help="Seed of the resampling"),
                data_dir: Optional[Path] = _GRID_DATA, cache_dir: Optional[Path] = _GRID_CACHE,
                debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Write the leaderboard (Markdown, HTML, JSON) of the finished cells: every system against the baseline."""
    from kinject.experiments.grid_state import counts, states
    from kinject.experiments.grid_board import build_leaderboard, print_leaderboard

    loaded, cells = _load(file, output, sets, data_dir=data_dir, cache_dir=cache_dir)
    found = states(cells)
    board = build_leaderboard(loaded, cells, found, split, leaderboard_metric(metric, cells), n_resamples=resamples,
                              seed=seed)
    print_leaderboard(board, loaded.file.baseline, console)
    console.print(f"{counts(found)}; leaderboard: {board['markdown']}, {board['html']}", highlight=False)
