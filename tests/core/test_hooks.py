"""Hook plugins: loaded through pluggy; a broken one is skipped with a WARNING naming it, once per process."""

from __future__ import annotations

import logging

import pytest

from helpers import fake_distribution


@pytest.fixture
def hook_dist(tmp_path, monkeypatch):
    root = fake_distribution(tmp_path / "site", "kinject-hook-plugins", """
        [kinject.hooks]
        watcher = hook_ok
        broken = hook_broken
        """, {
        "hook_ok": 'from kinject.hooks import hookimpl\nSEEN = []\n@hookimpl\n'
                   'def kinject_stage_end(stage, key, cached, seconds):\n    SEEN.append(stage)\n',
        "hook_broken": 'raise RuntimeError("hook boom")\n',
    })
    monkeypatch.syspath_prepend(str(root))
    import kinject.hooks as hooks

    monkeypatch.setattr(hooks, "_WARNED", set())
    yield hooks
    hooks.plugin_manager(reload=True)


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_broken_hook_plugin_warns_once_and_the_others_load(hook_dist):
    records = Records()
    logging.getLogger("kinject").addHandler(records)  # on the kinject logger itself (the CLI may not propagate)
    try:
        pm = hook_dist.plugin_manager(reload=True)
        hook_dist.plugin_manager(reload=True)  # a second load in the same process warns no more
    finally:
        logging.getLogger("kinject").removeHandler(records)
    warnings = [m for m in records.messages if "hook plugin" in m]
    assert len(set(warnings)) == 1 and len(warnings) == 1, warnings
    assert "'broken'" in warnings[0] and "kinject-hook-plugins 1.2.3" in warnings[0]
    assert "RuntimeError: hook boom" in warnings[0]
    assert pm.has_plugin("runlog") and pm.has_plugin("watcher") and pm.is_blocked("broken")
    pm.hook.kinject_stage_end(stage="s", key="k", cached=False, seconds=0.0)
    import hook_ok

    assert hook_ok.SEEN == ["s"]
    from kinject.registry import registry

    assert registry("hooks").origin("watcher")[1] == "kinject-hook-plugins"  # one table, as every kind
