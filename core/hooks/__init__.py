"""Lifecycle hooks (pluggy): third parties observe runs through the ``kinject.hooks`` entry-point group.

A hook plugin is a module or object with functions marked ``@hookimpl`` whose names match the specs in
:mod:`kinject.hooks.specs`. kinject's own run log is such a plugin (``runlog``:
:mod:`kinject.plugins.trackers.runlog`).
"""

from __future__ import annotations

import logging

import pluggy

from kinject.errors import PluginLoadError

from kinject.hooks.specs import HookSpecs, hookimpl, hookspec


PROJECT = "kinject"
GROUP = "kinject.hooks"
_MANAGER: pluggy.PluginManager | None = None
_WARNED: set[tuple[str, str]] = set()
log = logging.getLogger("kinject")


def _load(pm: pluggy.PluginManager) -> None:
    """Register every ``kinject.hooks`` plugin (from the one plugin registry, :mod:`kinject.registry`): one that
    fails to import or register is blocked with a WARNING (once per process) naming it, its distribution and the
    error; the others load."""
    from kinject.registry import registry

    hooks = registry("hooks")
    for name in hooks.names():
        if pm.has_plugin(name) or pm.is_blocked(name):
            continue
        try:
            pm.register(hooks.get(name), name=name)
        except Exception as exc:
            pm.set_blocked(name)
            _, distribution, version = hooks.origin(name)
            if (name, distribution) not in _WARNED:
                _WARNED.add((name, distribution))
                reason = str(exc) if isinstance(exc, PluginLoadError) else \
                    f"hook plugin {name!r} from {distribution} {version}: {type(exc).__name__}: {exc}"
                log.warning("%s; skipped, the run goes on", reason)


def plugin_manager(reload: bool = False) -> pluggy.PluginManager:
    """The process-wide plugin manager, with every ``kinject.hooks`` plugin registered. A hook plugin that fails to
    load is skipped with a WARNING on the ``kinject`` logger; the run goes on."""
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
