"""Lifecycle events (pluggy): plugins observe runs, and contribute stages, through the ``kinject.hooks`` entry-point
group.

A hook plugin is a module or object with functions marked ``@hookimpl`` whose names match the specs below. Every
spec is a place where many plugins may contribute: five events a run announces, and ``kinject_extra_stages``.
kinject's own run log, trackers and knowledge probe are such plugins.

A hook plugin of kinject's own distribution that fails to load is a :class:`PluginLoadError` before any stage. An
outside observer that fails to load is skipped with one WARNING naming it; the run goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pluggy

from kinject.errors import PluginLoadError

PROJECT = "kinject"
GROUP = "kinject.hooks"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
log = logging.getLogger("kinject")


class HookSpecs:
    @hookspec
    def kinject_run_start(self, spec: dict, run_dir: Path) -> None:
        """A run begins. ``spec`` is the resolved spec (plain data); ``run_dir`` is being written."""

    @hookspec
    def kinject_run_end(self, spec: dict, run_dir: Path, metrics: dict[str, Any]) -> None:
        """A run finished; ``metrics`` is what metrics.json holds."""

    @hookspec
    def kinject_stage_start(self, stage: str, key: str, cached: bool) -> None:
        """A stage begins (``cached``: its output is reused, nothing will be computed)."""

    @hookspec
    def kinject_stage_end(self, stage: str, key: str, cached: bool, seconds: float) -> None:
        """A stage ended."""

    @hookspec
    def kinject_metrics_logged(self, stage: str, metrics: dict[str, float], step: int | None) -> None:
        """Training or evaluation metrics were logged."""

    @hookspec
    def kinject_extra_stages(self, run: Any) -> list | None:
        """Stages to add to every prepared run after the strategy's own (a measurement every method gets the same
        way, e.g. the knowledge probe); called in ``prepare`` with the prepared run (``run.stages`` holds the
        strategy's stages)."""


_MANAGER: pluggy.PluginManager | None = None
_WARNED: set[tuple[str, str]] = set()


def _load(pm: pluggy.PluginManager) -> None:
    """Register every ``kinject.hooks`` plugin. One of kinject's own that fails is a PluginLoadError; an outside one
    is blocked with a WARNING (once per process) naming it, its distribution and the error."""
    from kinject.registry import registry

    hooks = registry("hooks")
    for name in hooks.names():
        if pm.has_plugin(name) or pm.is_blocked(name):
            continue
        try:
            pm.register(hooks.get(name), name=name)
        except Exception as exc:
            _, distribution, version = hooks.origin(name)
            reason = str(exc) if isinstance(exc, PluginLoadError) else \
                f"hook plugin {name!r} from {distribution} {version}: {type(exc).__name__}: {exc}"
            if distribution == PROJECT:
                raise PluginLoadError(f"{reason} (a hook plugin of kinject's own: reinstall kinject)") from None
            pm.set_blocked(name)
            if (name, distribution) not in _WARNED:
                _WARNED.add((name, distribution))
                log.warning("%s; skipped, the run goes on", reason)


def plugin_manager(reload: bool = False) -> pluggy.PluginManager:
    """The process-wide plugin manager, with every ``kinject.hooks`` plugin registered."""
    global _MANAGER
    if _MANAGER is None or reload:
        if reload:
            from kinject.registry import registry

            registry("hooks").refresh()
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(HookSpecs)
        _load(pm)
        _MANAGER = pm
    return _MANAGER


__all__ = ["HookSpecs", "hookimpl", "hookspec", "plugin_manager"]
