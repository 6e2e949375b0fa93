"""What `kinject list`, `kinject info` and `kinject doctor` say of a plugin without importing it: its one-line
description and obvious breakage (a module that cannot be found, read or parsed, or imports a package that is not
installed), read from the plugin's source text - no plugin import, no torch - beside the registry's own refusals (two
distributions registering one name, a kinject requirement this kinject does not meet)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass

from kinject.api import KinjectError, registry

_IMPORT_RE = re.compile(r"^(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import|import[ \t]+([A-Za-z_][\w.]*))", re.M)


@dataclass(frozen=True)
class PluginInfo:
    """What listing knows about a plugin without importing it."""

    kind: str
    name: str
    value: str
    distribution: str
    version: str
    description: str
    health: str  # "ok" or "broken"
    error: str = ""


@functools.lru_cache(maxsize=None)
def _top_level_installed(name: str) -> bool:
    return name in sys.builtin_module_names or importlib.util.find_spec(name) is not None


@functools.lru_cache(maxsize=None)
def _source(origin: str) -> str:
    with open(origin, encoding="utf-8") as handle:
        return handle.read()


def _docstring_after(text: str, pattern: str) -> str | None:
    """First docstring line of the definition matching ``pattern``; None if there is no definition."""
    signature = r".*?[\w)\]][ \t]*(?:->[^\n]*)?:[ \t]*\n"  # to the colon ending the (multi-line) signature
    match = re.search(pattern + signature + r"(?:[ \t]*\n)*[ \t]+[rRuU]?(\"\"\"|\'\'\')\s*(.*?)\1", text, re.S | re.M)
    if match:
        return match.group(2).strip().splitlines()[0] if match.group(2).strip() else ""
    return "" if re.search(pattern, text, re.M) else None


@functools.lru_cache(maxsize=None)
def _syntax_error(origin: str, text: str) -> str:
    """'' when the module's source parses, else the error (file:line: message)."""
    import ast

    try:
        ast.parse(text, filename=origin)
    except SyntaxError as exc:
        return f"{origin}:{exc.lineno}: SyntaxError: {exc.msg}"
    return ""


def static_inspect(value: str, depth: int = 0) -> tuple[str, str]:
    """Find a plugin's docstring and obvious breakage from its source text, without executing it.

    Returns (description, error). Checks: the module is findable and readable, defines the attribute,
    and every top-level absolute import names an installed package. (Parsing with ``ast`` would be
    exact but costs most of a listing's time.)
    """
    module_name, _, attr = value.partition(":")
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        return "", f"module {module_name!r} not found ({exc})"
    if spec is None or spec.origin is None:
        return "", f"module {module_name!r} not found"
    try:
        text = _source(spec.origin)
    except (OSError, UnicodeDecodeError) as exc:
        return "", f"cannot read {spec.origin}: {exc}"
    problem = _syntax_error(spec.origin, text)
    if problem:
        return "", problem
    missing = sorted({(a or b).split(".")[0] for a, b in _IMPORT_RE.findall(text)}
                     - {"__future__"} - {n for n in {(a or b).split(".")[0] for a, b in _IMPORT_RE.findall(text)}
                                          if _top_level_installed(n)})
    if missing:
        return "", f"missing dependency: {', '.join(missing)}"
    if not attr:
        doc = re.match(r"\s*(?:#[^\n]*\n\s*)*[rRuU]?(\"\"\"|\'\'\')\s*(.*?)\1", text, re.S)
        return (doc.group(2).strip().splitlines()[0] if doc and doc.group(2).strip() else ""), ""
    first = re.escape(attr.split(".")[0])
    doc = _docstring_after(text, rf"^(?:class|def)[ \t]+{first}\b")
    if doc is not None:
        return doc, ""
    moved = re.search(rf"^from[ \t]+(\w[\w.]*)[ \t]+import[^\n]*\b{first}\b", text, re.M)
    if moved and depth < 3:  # a re-export (``from kinject.tasks.gad import GADTask``): the defining module's doc
        return static_inspect(f"{moved.group(1)}:{attr}", depth + 1)[0], ""
    if re.search(rf"^{first}[ \t]*[:=]|^(?:from|import)[^\n]*\b{first}\b", text, re.M):
        helped = re.search(rf"^{first}[ \t]*=[^\n]*\((?:[^()]|\n)*?\bhelp=([\"'])(.*?)\1", text, re.M)  # a typer app
        return (helped.group(2) if helped else ""), ""
    return "", f"{module_name} defines no {attr!r}"


_KINJECT_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(kinject[\w.]*)[ \t]+import|import[ \t]+(kinject[\w.]*))", re.M)


def internal_imports(value: str) -> str:
    """'' or 'imports kinject.training.loop, kinject.refs (internal: use the front doors)': the kinject modules outside
    the public ones (:data:`kinject.deprecation.PUBLIC`) that the package of an entry point's ``value`` imports (its
    source text, read; nothing imported). Such a plugin may break in any release; `kinject list` marks it."""
    from pathlib import Path

    from kinject.deprecation import PUBLIC

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
        used |= {a or b for a, b in _KINJECT_IMPORT.findall(text)} - set(PUBLIC)
    return f"imports {', '.join(sorted(used))} (internal: use the front doors, {', '.join(PUBLIC[1:])})" if used \
        else ""


def plugin_info(kind: str, name: str) -> PluginInfo:
    """What a listing knows about plugin ``name`` of ``kind`` (an unknown name: the registry's UnknownNameError)."""
    plugins = registry(kind)
    value, distribution, version = plugins.origin(name)
    if distribution == "(in-process)":  # registered by a test or a notebook: its object is at hand
        try:
            doc = (plugins.get(name).__doc__ or "").strip().splitlines()
        except KinjectError as exc:
            return PluginInfo(kind, name, value, distribution, version, "", "broken", str(exc))
        return PluginInfo(kind, name, value, distribution, version, doc[0] if doc else "", "ok")
    description, error = static_inspect(value)
    error = plugins.refusal(name) or error
    return PluginInfo(kind, name, value, distribution, version, description, "broken" if error else "ok", error)


def plugin_infos(kind: str) -> list[PluginInfo]:
    """:func:`plugin_info` of every plugin of ``kind``, by name."""
    return [plugin_info(kind, name) for name in registry(kind).names()]
