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


def print_plugins(kind: str | None = None, check: bool = False, console=None) -> None:
    """Print name, description, distribution, version and health of every plugin (of one kind)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
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
