"""`kinject run`: a strategy on a task, as cached stages (or, with --dry-run, the resolved spec and the stages it
would compute, hit or miss, with a time estimate)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from kinject.cli.printing import safe
from kinject.cli import python

console = safe(Console())  # names and paths print as text, never as control sequences


def _spec_from_cli(strategy, task, model, config, sets, output, seed, limit, data_dir, cache_dir):
    from kinject.api import build_spec
    from kinject.api import apply_overrides
    from kinject.spec_reading import load_spec_file

    data = load_spec_file(config) if config else {}
    if strategy:
        old = data.get("strategy") or {}
        data["strategy"] = old if old.get("name") == strategy else {"name": strategy}
    if task:
        old = data.get("task") or {}
        data["task"] = old if old.get("name") == task else {"name": task}
    if model:
        data.setdefault("model", {})["name"] = model
    if seed is not None:
        data["seed"] = seed
    if limit is not None:
        data.setdefault("training", {})["limit"] = limit
    for key, value in (("output", output), ("data_dir", data_dir), ("cache_dir", cache_dir)):
        if value is not None:
            data[key] = str(value)
    return build_spec(apply_overrides(data, sets or []))


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


def describe_data(run) -> str:
    """What data the run's task reads (or that it has no task)."""
    return run.task.describe_data(run.env) if run.task is not None else "(no task)"


def describe_training(run) -> list[str]:
    """What the run trains on: the task's training examples and every knowledge source a stage reads (the
    configured ones or a strategy's default), with its options."""
    from kinject.api import SourceRef

    out = []
    if run.task is not None and not run.members:
        examples = len(run.task.examples(run.task.train_split, run.env))
        out.append(f"task {run.task.name} {run.task.train_split} split: {examples} examples"
                   + (f" (--limit {run.env.limit})" if run.env.limit else ""))
    seen: set[str] = set()

    def sources(value):
        if isinstance(value, SourceRef):
            yield value
        elif hasattr(type(value), "model_fields"):
            for name in type(value).model_fields:
                yield from sources(getattr(value, name))
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from sources(item)

    for stage in run.stages:
        for ref in sources(stage.config):
            options = {k: v for k, v in ref.options.items() if v not in (None, [], {}, False)}
            text = f"knowledge source {ref.name} ({ref.kind}) {options}"
            if text not in seen:
                seen.add(text)
                out.append(f"{text}, first read by stage {stage.name}")
    return out


def _dry_run(run_ctx) -> None:
    import yaml

    from kinject.api import build_spec, plan, prepare
    from kinject.stage_runner import stage_flops
    from kinject.preparation import resolved_spec
    from kinject.cli.estimate import Estimator
    from kinject.cli.misses import explain_miss

    resolved = resolved_spec(run_ctx.spec, run_ctx.task, run_ctx.strategy, run_ctx.sources)
    console.print(yaml.safe_dump(resolved, sort_keys=False).rstrip(), markup=False, highlight=False)
    console.print(f"data: {describe_data(run_ctx)}", markup=False)
    runs = [(name, member) for name, member, _ in run_ctx.members if member is not None] or [("", run_ctx)]
    estimator = Estimator(run_ctx.env.cache_dir, bool(run_ctx.spec.training.bf16))
    total = 0.0
    for prefix, run in runs:
        for line in describe_training(run):
            console.print(f"trains on: {line}", markup=False, highlight=False, soft_wrap=True)
        for planned in plan(run):
            label = f"{prefix}/{planned.stage.name}" if prefix else planned.stage.name
            estimate = ""
            if not planned.cached:
                guess = estimator(planned.stage.name, stage_flops(planned.stage.config, run))
                total += guess.seconds
                estimate = f" (~{duration(guess.seconds)}: {guess.how})"
            state = "[green]cache hit[/]" if planned.cached else \
                f"miss{escape(estimate)}: {escape(explain_miss(planned, run.env.cache_dir))}"
            console.print(f"stage {escape(label):<24} {planned.key[:12]}  {state}", soft_wrap=True)
    planned = run_ctx.chosen or {}
    if planned.get("planned"):  # the choice's fold runs come first: plain fine-tunes
        fold = prepare(build_spec(planned["fold_spec"]))
        each = sum(estimator(stage.name, stage_flops(stage.config, fold)).seconds for stage in fold.stages)
        total += each * planned["fold_runs"]
        console.print(f"choice: {planned['fold_runs']} fold runs of the choice first (~{duration(each)} each)",
                      markup=False, highlight=False, soft_wrap=True)
    console.print(f"estimated time: ~{duration(total)} for the stages to compute; {estimator.accuracy()}",
                  markup=False, highlight=False, soft_wrap=True)


def _typed(ctx: typer.Context) -> list[str]:
    """The command line as typed (the kernel's entry point hands it to every command), else this process's."""
    obj = ctx.find_root().obj
    return list(obj["argv"]) if isinstance(obj, dict) and "argv" in obj else sys.argv[1:]


def run(ctx: typer.Context,
        strategy: str = typer.Argument(..., help="Strategy name (see `kinject list strategies`)"),
        task: Optional[str] = typer.Option(None, "--task", "-t", help="Task name"),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="HF id, directory, minilm or tiny"),
        config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run spec"),
        sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a spec field: a.b=c"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Run directory"),
        seed: Optional[int] = typer.Option(None, help="Random seed"),
        repeats: int = typer.Option(1, min=1, help="Run N seeds (seed, seed+1, ...) and report mean ± std"),
        limit: Optional[int] = typer.Option(None, min=1, help="Cap every split of the task at N examples"),
        quick: bool = typer.Option(False, "--quick", help="A quick try: the strategy's `quick` protocol (small "
                                   "budgets, a small knowledge graph or corpus) and --limit 64 unless given"),
        data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Datasets folder"),
        cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Stage cache folder"),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted stage from its checkpoint"),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved spec and stages (hit or miss, and "
                                     "why a miss), run nothing"),
        debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Run a strategy on a task: cached stages, run.json, metrics.json, predictions/, model/ (safetensors)."""
    from kinject.api import is_main_process
    from kinject.cli.tables import print_metrics
    from kinject.cli.python import execute_runs, prepared

    if quick:
        sets = [*(sets or []), "protocol=quick"]
        limit = limit or 64
    spec = _spec_from_cli(strategy, task, model, config, sets, output, seed, limit, data_dir, cache_dir)
    runs, out = prepared(spec, repeats, resume=resume, command=["kinject", *_typed(ctx)], dry_run=dry_run,
                         announce=lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
    seeds = [run.spec.seed for run in runs]
    if dry_run:
        _dry_run(runs[0])
        return
    first = runs[0]
    console.print(f"[bold]{escape(spec.strategy.name)}[/] on [bold]{escape(spec.task.name if spec.task else '(no task)')}"
                  f"[/] (data: {escape(describe_data(first))}, model: {escape(spec.model.name)}"
                  f"{f', seeds {seeds[0]}..{seeds[-1]}' if repeats > 1 else ''}) -> {escape(str(out))}", highlight=False)
    metrics = execute_runs(runs, out, announce=lambda line: console.print(line, markup=False, highlight=False,
                                                                          soft_wrap=True))
    if not is_main_process():
        return
    if first.members:
        console.print_json(data=metrics)
    else:
        title = f"metrics ({out})" if repeats == 1 else f"mean ± std over {repeats} seeds ({out})"
        print_metrics(console, title, metrics, _splits(first))


def _splits(run) -> list[str] | None:
    """The evaluation splits a run's metrics table shows (the task's, or the ones training.eval_splits names)."""
    if run.task is None:
        return None
    return list(run.spec.training.eval_splits or run.task.eval_splits)


run.rank = 3  # `kinject --help` lists kinject's own commands first
run.python = python  # this command from Python: kinject.run, kinject.load, kinject.RunResult
