"""Lifecycle hooks (pluggy): third parties observe runs through the ``kinject.hooks`` entry-point group.

A hook plugin is a module or object with functions marked ``@hookimpl`` whose names match the specs
in :mod:`kinject.hooks.specs`. kinject's own run log is such a plugin (``kinject.hooks.default``).
"""

from __future__ import annotations

import pluggy

from kinject.hooks.specs import HookSpecs, hookimpl, hookspec

PROJECT = "kinject"
_MANAGER: pluggy.PluginManager | None = None


def plugin_manager(reload: bool = False) -> pluggy.PluginManager:
    """The process-wide plugin manager, with every ``kinject.hooks`` entry point loaded.

    A hook plugin that fails to load is skipped (and reported by ``kinject doctor``).
    """
    global _MANAGER
    if _MANAGER is None or reload:
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(HookSpecs)
        from importlib.metadata import entry_points

        for ep in entry_points(group="kinject.hooks"):
            try:
                plugin = ep.load()
            except Exception:  # reported by `kinject doctor`; never breaks a run
                continue
            if pm.get_plugin(ep.name) is None:
                pm.register(plugin, name=ep.name)
        _MANAGER = pm
    return _MANAGER


__all__ = ["HookSpecs", "hookimpl", "hookspec", "plugin_manager"]
