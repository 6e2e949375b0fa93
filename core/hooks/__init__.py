"""Lifecycle hooks (pluggy): third parties observe runs through the ``kinject.hooks`` entry-point group.

A hook plugin is a module or object with functions marked ``@hookimpl`` whose names match the specs
in :mod:`kinject.hooks.specs`. kinject's own run log is such a plugin (``kinject.hooks.default``).
"""

from __future__ import annotations

import logging

import pluggy

from kinject.hooks.specs import HookSpecs, hookimpl, hookspec

__kinject_fingerprint__ = False  # observers: computes nothing a stage writes

PROJECT = "kinject"
GROUP = "kinject.hooks"
_MANAGER: pluggy.PluginManager | None = None
_WARNED: set[tuple[str, str, str]] = set()
log = logging.getLogger("kinject")


def _load(pm: pluggy.PluginManager) -> None:
    """Load every ``kinject.hooks`` entry point with pluggy's ``load_setuptools_entrypoints``, one name at a
    time: one that fails to import or register is blocked with a WARNING (once per process) naming it, its
    distribution and the error; the others load."""
    from importlib.metadata import distributions

    for dist in list(distributions()):
        for ep in dist.entry_points:
            if ep.group != GROUP or pm.has_plugin(ep.name) or pm.is_blocked(ep.name):
                continue
            try:
                pm.load_setuptools_entrypoints(GROUP, name=ep.name)
            except Exception as exc:
                pm.set_blocked(ep.name)
                name = dist.metadata["Name"] or "?"
                if (ep.name, ep.value, name) not in _WARNED:
                    _WARNED.add((ep.name, ep.value, name))
                    log.warning("hook plugin %r (%s, from %s %s) failed to load and is skipped: %s: %s", ep.name,
                                ep.value, name, dist.version, type(exc).__name__, exc)


def plugin_manager(reload: bool = False) -> pluggy.PluginManager:
    """The process-wide plugin manager, with every ``kinject.hooks`` entry point loaded (pluggy's
    ``load_setuptools_entrypoints``). A hook plugin that fails to load is skipped with a WARNING on the
    ``kinject`` logger; the run goes on."""
    global _MANAGER
    if _MANAGER is None or reload:
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(HookSpecs)
        _load(pm)
        _MANAGER = pm
    return _MANAGER


__all__ = ["HookSpecs", "hookimpl", "hookspec", "plugin_manager"]
