"""The `kinject` command line's kernel: the typer app every command joins, the commands of the ``kinject.commands``
plugins (kinject's own, `run`, `list`, `info`, `doctor`, are one: :mod:`kinject.plugins.cli`) and the console
entry point :func:`main` (:mod:`kinject.cli.main`), which renders user errors as one line."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """Console entry point (:func:`kinject.cli.main.main`)."""
    from kinject.cli.main import main as run_app

    run_app(argv)
