"""`kinject list` (plugin tables from entry-point metadata: no plugin import, no torch) and `kinject info` (a
plugin's config schema)."""

from __future__ import annotations

import difflib
from typing import Optional

import typer

from kinject.api import KinjectError, UnknownNameError, registry
from kinject.registry import GROUPS
from kinject.cli.describe import plugin_info, plugin_infos

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


def pipe_console(console=None):
    """``console`` (default: stdout's) when it writes to a terminal or ``COLUMNS`` is set; else (piped, redirected)
    a console wide enough that a table row never wraps: one line per row, whole descriptions, for grep and cut."""
    import os
    import sys

    from rich.console import Console

    from kinject.cli.printing import safe

    console = console or Console()
    if console.is_terminal or "COLUMNS" in os.environ or console.file not in (sys.stdout, sys.stderr):
        return safe(console)  # a terminal, a width asked for, or a console writing elsewhere (a file, a recording)
    return safe(Console(file=console.file, width=100_000))


def print_plugins(kind: str | None = None, check: bool = False, console=None) -> None:
    """Print name, description, distribution, version and health of every plugin (of one kind)."""
    from rich.markup import escape
    from rich.table import Table

    from kinject.cli.describe import internal_imports

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
        for info in plugin_infos(k):
            error = info.error or (registry(k).check(info.name) if check else "")
            health = "[green]ok[/]" if not error else f"[red]broken[/]: {escape(error)}"
            internal = "" if error or info.distribution == "kinject" else internal_imports(info.value)
            health += f"; [yellow]internal imports[/]: {escape(internal)}" if internal else ""
            tasks = [escape(_task_kinds(info.value))] if strategies else []
            table.add_row(escape(info.name), escape(info.description), *tasks, escape(info.distribution),
                          escape(info.version), health)
        console.print(table)


def fast_list(args: list[str]) -> bool:
    """Serve ``kinject list [KIND] [--check]`` (``args``: what follows ``list``) without the typer app; False when
    it is not a plain list call (then the app handles it, e.g. --help)."""
    flags = [a for a in args if a.startswith("-")]
    positional = [a for a in args if not a.startswith("-")]
    if set(flags) - {"--check", "--debug"} or len(positional) > 1:
        return False
    print_plugins(positional[0] if positional else None, check="--check" in flags)
    return True


def list_plugins(kind: Optional[str] = typer.Argument(None, help=" | ".join(GROUPS)),
                 check: bool = typer.Option(False, "--check", help="Import every plugin to check it loads.")):
    """List plugins: name, description, distribution, version, health (no plugin is imported)."""
    print_plugins(kind, check)


def info(name: str = typer.Argument(..., help="Plugin name"),
         kind: Optional[str] = typer.Option(None, help=" | ".join(GROUPS))):
    """Show a plugin's config schema: fields, types, defaults, descriptions."""
    from rich.markup import escape
    from rich.table import Table

    from kinject.registry import BASE_CLASSES
    from kinject.registry import SINGULAR

    out = pipe_console()  # piped: each field one line
    kinds = [kind] if kind else KINDS
    matches = [k for k in kinds if name in registry(k).names()]
    if not kind and any(BASE_CLASSES[k] for k in matches):  # a strategy and a command of one name: the strategy
        matches = [k for k in matches if BASE_CLASSES[k]]
    if not matches:
        every = sorted({n for k in kinds for n in registry(k).names()})
        close = difflib.get_close_matches(name, every, n=3, cutoff=0.5)
        raise UnknownNameError(f"unknown plugin {name!r}." + (f" Did you mean {' or '.join(map(repr, close))}?"
                                                               if close else ""))
    for k in matches:
        meta = plugin_info(k, name)
        if BASE_CLASSES[k] is None:  # a command or hook plugin: no config (not imported: its description is read)
            out.print(f"[bold]{escape(name)}[/] ({SINGULAR[k]}, {escape(meta.distribution)} "
                      f"{escape(meta.version)}): {escape(meta.description)}", highlight=False)  # text, not markup
            continue
        cls = registry(k).get(name)
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
        _print_extras(out, k, cls)


def _print_extras(out, kind: str, cls) -> None:
    """A strategy's task kinds and sources, a plugin's recommended settings and protocols."""
    if kind == "strategies":
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


list_plugins.rank, info.rank = 1, 2  # `kinject --help` lists kinject's own commands first
list_plugins.fast = fast_list
