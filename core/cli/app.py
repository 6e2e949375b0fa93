"""The `kinject` program (the console script; ``python -m kinject`` runs it too): the typer app that every command
from the ``kinject.commands`` entry-point group joins (kinject's own as a third party's: `run`, `list`, `info` and
`doctor` come from this package, `eval`, `kg`, ... from their libraries), and one-line user errors (exit code 2; a
traceback only with --debug). A front end on the kernel's front door, not part of the kernel.

A command reads the command line as typed from its context (a ``typer.Context`` parameter):
``ctx.find_root().obj["argv"]``.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from kinject.cli.printing import safe
from kinject.api import registry


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Inject domain knowledge into transformer language models, and compare the ways.")
err_console = safe(Console(stderr=True))  # names and paths print as text, never as control sequences


def _add_command_plugins() -> None:
    """Commands from the ``kinject.commands`` plugins (a typer app: a command group; a function: one command), those
    with a ``rank`` first (lower first; `kinject --help` lists them so), then by name; one that fails to import stays
    visible and says why when used."""
    from kinject.api import KinjectError

    commands, loaded = registry("commands"), []
    for name in commands.names():
        try:
            loaded.append((name, commands.get(name), ""))
        except KinjectError as exc:  # shown when the command is used, and by `kinject list` / `doctor`
            loaded.append((name, None, str(exc)))
    for name, sub, error in sorted(loaded, key=lambda item: getattr(item[1], "rank", float("inf"))):
        if error:
            _add_broken_command(name, error)
        elif isinstance(sub, typer.Typer):
            app.add_typer(sub, name=name)  # a command group: kinject NAME SUBCOMMAND ...
        else:
            app.command(name)(sub)  # one command: kinject NAME ...


def _served_fast(argv: list[str]) -> bool:
    """Whether the command ``argv`` names served it with its own ``fast(args)``, before the other commands load
    (`kinject list`: about half the start-up time); False when it has none or declined (``--help``, say)."""
    from kinject.api import KinjectError

    commands = registry("commands")
    if not argv or argv[0] not in commands.names():
        return False
    try:
        fast = getattr(commands.get(argv[0]), "fast", None)
    except KinjectError:  # a broken command: the app says why
        return False
    return fast is not None and bool(fast(argv[1:]))


def _add_broken_command(name: str, message: str) -> None:
    from kinject.api import PluginLoadError

    @app.command(name, help=f"[broken] {message}", add_help_option=False,
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def fail(ctx: typer.Context):
        raise PluginLoadError(message)


_NOISY_WARNINGS = (  # third-party warnings that say nothing to a kinject user
    r"mtime may not be reliable",
    r".*`resume_download` is deprecated",
    r".*TRANSFORMERS_CACHE",
)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app; user errors -> one line on stderr, exit code 2."""
    import logging
    import os
    import warnings

    from kinject.api import KinjectError

    argv = list(sys.argv[1:] if argv is None else argv)
    # oneDNN (bf16 matmuls on a CPU) caches a primitive per batch shape, 1024 by default: with length-bucketed
    # batches that is ~200 MB held for the process's life, for no measurable speed (docs/benchmarks.md)
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")
    debug = "--debug" in argv
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kinject").setLevel(logging.INFO)
    for handler in logging.getLogger().handlers:  # metric dicts go to kinject.log; the console shows the table
        handler.addFilter(lambda record: not record.name.startswith("kinject.details"))
    logging.captureWarnings(True)  # warnings go to the log (console and kinject.log), each once
    if not debug:
        for pattern in _NOISY_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from kinject.api import Interrupted
    from kinject.cli.printing import safe_log

    safe_log(logging.getLogger("kinject"))  # names and paths in log lines print as text, never as control sequences
    Interrupted.install()  # Ctrl-C / SIGTERM raise Interrupted (click would make a KeyboardInterrupt "Aborted!", exit 1)
    try:
        try:
            if _served_fast(argv):
                sys.exit(0)  # as the app ends (click's standalone mode)
            from tqdm.contrib.logging import logging_redirect_tqdm

            _add_command_plugins()
            with logging_redirect_tqdm(loggers=[logging.getLogger()]):  # log lines above the progress bars
                app(args=argv, prog_name="kinject", obj={"argv": argv})  # usage errors: exit 2, one message
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
