"""`kinject list`: plugin tables from entry-point metadata (no plugin import, no torch, no typer)."""

from __future__ import annotations

import difflib

from kinject.errors import KinjectError
from kinject.registry import GROUPS, registry


KINDS = list(GROUPS)
TASK_KINDS = {"sequence": "sequence (classification, pairs, retrieval)", "token": "token (NER, PICO)"}


def _task_kinds(value: str) -> str:
    """The task kinds a strategy supports, read from its source text (``task_kinds = frozenset({...})``; no import);
    the interface's default when it declares none."""
    import importlib.util
    import re

    module = value.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
        text = open(spec.origin, encoding="utf-8").read() if spec and spec.origin else ""
    except (ImportError, OSError, ValueError):
        text = ""
    found = re.search(r"task_kinds\b[^=\n]*=\s*frozenset\(\{([^}]*)\}\)", text)
    kinds = re.findall(r"[\"'](\w+)[\"']", found.group(1)) if found else ["sequence", "token"]
    return ", ".join(sorted(kinds))


_KINJECT_IMPORT = r"^[ \t]*(?:from[ \t]+(kinject[\w.]*)[ \t]+import|import[ \t]+(kinject[\w.]*))"


def deprecated_imports(value: str) -> str:
    """'' or 'imports kinject.stages (moved to kinject.plugins.training)': the moved kinject modules the plugin's
    package imports (its source text, read; nothing imported). Such a plugin runs, with a deprecation warning, for
    one release (:mod:`kinject.compat`)."""
    import importlib.util
    import re
    from pathlib import Path

    from kinject.compat import MOVED, replacement

    top = value.partition(":")[0].split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ""
    if spec is None or top == "kinject":
        return ""
    files = [Path(p) for p in spec.submodule_search_locations or []]
    files = [f for folder in files for f in sorted(folder.rglob("*.py"))[:200]] or (
        [Path(spec.origin)] if spec.origin and spec.origin.endswith(".py") else [])
    used = set()
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        used |= {a or b for a, b in re.findall(_KINJECT_IMPORT, text, re.M)} & set(MOVED)
    return "; ".join(f"imports {old} (moved to {replacement(old).split(' (')[0]})" for old in sorted(used))


def pipe_console(console=None):
    """``console`` (default: stdout's) when it writes to a terminal or ``COLUMNS`` is set; else (piped, redirected)
    a console wide enough that a table row never wraps: one line per row, whole descriptions, for grep and cut."""
    import os

    from rich.console import Console

    import sys

    console = console or Console()
    if console.is_terminal or "COLUMNS" in os.environ or console.file not in (sys.stdout, sys.stderr):
        return console  # a terminal, a width asked for, or a console writing elsewhere (a file, a recording)
    return Console(file=console.file, width=100_000)


def print_plugins(kind: str | None = None, check: bool = False, console=None) -> None:
    """Print name, description, distribution, version and health of every plugin (of one kind)."""
    from rich.markup import escape
    from rich.table import Table

    console = pipe_console(console)
    if kind is not None and kind not in KINDS:
        close = difflib.get_close_matches(kind, KINDS, n=1)
        raise KinjectError(f"unknown plugin kind {kind!r}." + (f" Did you mean {close[0]!r}?" if close else "")
                           + f" Kinds: {', '.join(KINDS)}")
    for k in [kind] if kind else KINDS:
        table = Table(title=k, title_justify="left")
        strategies = k == "strategies"
        for col in ("name", "description", *(["tasks"] if strategies else []), "distribution", "version", "health"):
            table.add_column(col, overflow="fold")
        for info in registry(k).infos():
            error = info.error or (registry(k).check(info.name) if check else "")
            health = "[green]ok[/]" if not error else f"[red]broken[/]: {escape(error)}"
            moved = "" if error or info.distribution == "kinject" else deprecated_imports(info.value)
            health += f"; [yellow]deprecated[/]: {escape(moved)}" if moved else ""
            tasks = [escape(_task_kinds(info.value))] if strategies else []
            table.add_row(escape(info.name), escape(info.description), *tasks, escape(info.distribution),
                          escape(info.version), health)
        console.print(table)


def fast_list(argv: list[str]) -> bool:
    """Serve ``kinject list [KIND] [--check]`` without loading the typer app (about half the start-up time).

    Returns False when argv is not a plain list call (then the full CLI handles it, e.g. --help).
    """
    if not argv or argv[0] != "list":
        return False
    rest = argv[1:]
    flags = [a for a in rest if a.startswith("-")]
    positional = [a for a in rest if not a.startswith("-")]
    if set(flags) - {"--check", "--debug"} or len(positional) > 1:
        return False
    print_plugins(positional[0] if positional else None, check="--check" in flags)
    return True
