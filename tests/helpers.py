"""Helpers shared by tests (imported as ``from helpers import ...``; tests/ is on sys.path under pytest)."""

from __future__ import annotations


def run_kinject(*args: str) -> int:
    """Run the kinject CLI in-process; return its exit code."""
    from kinject.cli.main import main

    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
