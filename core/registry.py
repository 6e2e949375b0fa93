"""One lazy registry per kind of plugin, read from entry points: strategies, tasks, sources, evaluators,
commands (typer apps or functions: ``kinject NAME``), models (model names: :class:`kinject.models.ModelProvider`)
and hooks (pluggy plugins). Built-ins are declared in
kinject's pyproject.toml exactly as a third party declares its own.

Discovery reads entry-point metadata only (what a listing says of a plugin without importing it is the command
plugin's, :mod:`kinject.cli.describe`). A plugin is imported on first ``get``. A plugin that fails to load is
reported with its name, distribution and error, and breaks nothing else.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from kinject.errors import PluginLoadError, UnknownNameError


GROUPS: dict[str, str] = {
    "strategies": "kinject.strategies",
    "tasks": "kinject.tasks",
    "sources": "kinject.sources",
    "evaluators": "kinject.evaluators",
    "commands": "kinject.commands",
    "models": "kinject.models",
    "hooks": "kinject.hooks",
}
SINGULAR = {"strategies": "strategy", "tasks": "task", "sources": "source", "evaluators": "evaluator",
            "commands": "command", "models": "model", "hooks": "hook plugin"}
BASE_CLASSES = {  # what a plugin of the kind must be (None: anything pluggy or typer accepts)
    "strategies": "kinject.interfaces:Strategy",
    "tasks": "kinject.interfaces:Task",
    "sources": "kinject.interfaces:KnowledgeSource",
    "evaluators": "kinject.interfaces:Evaluator",
    "commands": None,
    "models": "kinject.models:ModelProvider",
    "hooks": None,
}


_DIST_CACHE: dict = {}  # distribution path -> (name, version); ("api", path) -> (its kinject mismatch, "")


def _dist_of(ep: EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "?", "?"
    key = str(getattr(dist, "_path", id(dist)))
    if key not in _DIST_CACHE:  # parsing METADATA is the slow part of listing
        _DIST_CACHE[key] = (dist.metadata["Name"], dist.version)
    return _DIST_CACHE[key]


class Registry:
    """Plugins of one kind (strategies, tasks, sources or evaluators), discovered from entry points."""

    def __init__(self, kind: str):
        if kind not in GROUPS:
            raise ValueError(f"unknown registry kind {kind!r}")
        self.kind = kind
        self.group = GROUPS[kind]
        self._lock = threading.Lock()
        self._loaded: dict[str, Any] = {}
        self._extra: dict[str, Any] = {}
        self._eps: dict[str, EntryPoint] | None = None
        self._duplicates: dict[str, list[EntryPoint]] = {}

    # -- discovery -------------------------------------------------------------------------------
    def _entry_points(self) -> dict[str, EntryPoint]:
        if self._eps is None:
            found: dict[str, EntryPoint] = {}
            others: dict[str, list[EntryPoint]] = {}
            for ep in entry_points(group=self.group):
                if ep.name not in found:
                    found[ep.name] = ep
                elif _dist_of(ep)[0] != _dist_of(found[ep.name])[0]:  # the same name from another distribution
                    others.setdefault(ep.name, []).append(ep)
            self._eps, self._duplicates = found, others
        return self._eps

    def duplicates(self, name: str) -> str:
        """'' when one distribution registers ``name``; else 'registered by 2 distributions: a 1.0 (mod:Cls) and
        b 2.0 (mod:Cls); uninstall one'."""
        self._entry_points()
        others = self._duplicates.get(name)
        if not others:
            return ""
        every = sorted([self._eps[name], *others], key=_dist_of)
        named = " and ".join(f"{' '.join(_dist_of(ep))} ({ep.value})" for ep in every)
        return f"registered by {len(every)} distributions: {named}; uninstall one (pip uninstall)"

    def refresh(self) -> None:
        """Forget discovered entry points (after installing a plugin in a running process)."""
        with self._lock:
            self._eps = None
            self._loaded.clear()
            _NAMES.clear()

    def names(self) -> list[str]:
        return sorted(set(self._entry_points()) | set(self._extra))

    def register(self, name: str, obj: Any) -> Any:
        """Register an object in-process (tests, notebooks); returns the in-process object it replaces (None: none).
        Entry points are the normal path."""
        with self._lock:
            replaced = self._extra.get(name)
            self._extra[name] = obj
            self._loaded.pop(name, None)
            _NAMES.clear()
        return replaced

    def unregister(self, name: str) -> None:
        """Forget an in-process registration of ``name`` (an entry point of that name serves it again)."""
        with self._lock:
            self._extra.pop(name, None)
            self._loaded.pop(name, None)
            _NAMES.clear()

    def origin(self, name: str) -> tuple[str, str, str]:
        """(``module:attr``, distribution, version) of a plugin, from its entry point without importing it; a plugin
        registered in-process is ``(in-process)``."""
        if name in self._extra:
            obj = self._extra[name]
            return f"{obj.__module__}:{obj.__qualname__}", "(in-process)", ""
        ep = self._entry_points().get(name)
        if ep is None:
            raise self.unknown(name)
        return (ep.value, *_dist_of(ep))

    def refusal(self, name: str) -> str:
        """'' unless the plugin may not load whatever its code: two distributions register its name, or its
        distribution declares a kinject this is not."""
        ep = self._entry_points().get(name)
        return "" if ep is None else self.duplicates(name) or _api_mismatch(ep)

    def unknown(self, name: str) -> UnknownNameError:
        names = self.names()
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        known = f" Known: {', '.join(names)}." if names else ""
        return UnknownNameError(f"unknown {SINGULAR[self.kind]} {name!r}.{hint}{known}")

    # -- loading -------------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        """Import and return the plugin class; checks it is a subclass of the kind's base class."""
        with self._lock:
            if name in self._loaded:
                return self._loaded[name]
            if name in self._extra:
                obj = self._extra[name]
            else:
                ep = self._entry_points().get(name)
                if ep is None:
                    raise self.unknown(name)
                dist, version = _dist_of(ep)
                refused = self.refusal(name)
                if refused:
                    raise PluginLoadError(f"{SINGULAR[self.kind]} {name!r}: {refused}" if refused.startswith(
                        "registered") else f"{SINGULAR[self.kind]} {name!r} from {dist} {version} {refused}")
                try:
                    obj = ep.load()
                except Exception as exc:  # a broken plugin must not break anything else
                    from kinject.deprecation import explain_import_error

                    why = (dist != "kinject" and explain_import_error(exc)) or \
                        f"failed to import: {type(exc).__name__}: {exc}"
                    raise PluginLoadError(f"{SINGULAR[self.kind]} {name!r} from {dist} {version} {why}") from exc
            if BASE_CLASSES[self.kind] is not None:
                base = _load_ref(BASE_CLASSES[self.kind])
                if not (isinstance(obj, type) and issubclass(obj, base)):
                    raise PluginLoadError(f"{SINGULAR[self.kind]} {name!r} ({obj!r}) is not a {base.__name__}")
            elif self.kind == "commands" and not callable(obj):
                raise PluginLoadError(f"command {name!r} ({obj!r}) is neither a typer app nor a function")
            self._loaded[name] = obj
            return obj

    def name_of(self, cls: type) -> str:
        """The name ``cls`` is registered under ('' for none): from the entry points' values, loading nothing."""
        for name, obj in self._extra.items():
            if obj is cls:
                return name
        ref = f"{cls.__module__}:{cls.__qualname__}"
        return next((name for name, ep in sorted(self._entry_points().items()) if ep.value.strip() == ref), "")

    def check(self, name: str) -> str:
        """Import the plugin for real; return '' if it loads, else the error text."""
        try:
            self.get(name)
        except (PluginLoadError, UnknownNameError) as exc:
            return str(exc)
        return ""


def _api_mismatch(ep: EntryPoint) -> str:
    """'' unless the plugin's distribution declares a kinject requirement (Requires-Dist) this kinject does not meet."""
    from kinject.deprecation import api_mismatch

    dist = getattr(ep, "dist", None)
    if dist is None or _dist_of(ep)[0] == "kinject":
        return ""
    key = ("api", str(getattr(dist, "_path", id(dist))))
    if key not in _DIST_CACHE:
        _DIST_CACHE[key] = (api_mismatch(dist), "")
    return _DIST_CACHE[key][0]


def _load_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


_REGISTRIES: dict[str, Registry] = {}


def registered_name(cls: type) -> str:
    """``cls.name`` of a plugin class that sets none: the name it (or the nearest registered class it derives from)
    is registered under, '' when none is. The registry never writes to the classes it returns."""
    if cls in _NAMES:
        return _NAMES[cls]
    _NAMES[cls] = _find_name(cls)
    return _NAMES[cls]


_NAMES: dict[type, str] = {}  # class -> registered name; cleared when a registry changes


def _find_name(cls: type) -> str:
    for klass in cls.__mro__:
        for kind, base in BASE_CLASSES.items():
            if base is not None and issubclass(klass, _load_ref(base)):
                name = registry(kind).name_of(klass)
                if name:
                    return name
    return ""


def registry(kind: str) -> Registry:
    """The process-wide registry of one kind."""
    if kind not in _REGISTRIES:
        _REGISTRIES[kind] = Registry(kind)
    return _REGISTRIES[kind]
