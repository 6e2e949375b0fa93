"""kinject.testing, the helpers a plugin package's tests use: in-process registration that is undone (and restores
what it replaced), a hook plugin joining the running hook manager, the offline environment, the textcls data folder.
Its fixtures in a package's own pytest session: tests/third_party/test_third_party.py."""

from __future__ import annotations

import pytest

from kinject.api import Strategy, UnknownNameError, hookimpl, plugin_manager, registry
from kinject.testing import offline_environment, registered, write_textcls


class First(Strategy):
    """One."""


class Second(Strategy):
    """Two."""


def test_a_registration_lasts_for_the_block_and_restores_what_it_replaced():
    strategies = registry("strategies")
    with registered("strategies", "testing-mine", First):
        assert strategies.get("testing-mine") is First and "testing-mine" in strategies.names()
        assert First.name == "testing-mine"  # a class without a name gets the registered one
        with registered("strategies", "testing-mine", Second):
            assert strategies.get("testing-mine") is Second
        assert strategies.get("testing-mine") is First
    assert "testing-mine" not in strategies.names()
    with pytest.raises(UnknownNameError, match="testing-mine"):
        strategies.get("testing-mine")
    with registered("strategies", "finetune", First):  # an in-process object shadows an entry point, then it is back
        assert strategies.get("finetune") is First
    assert strategies.get("finetune").__module__ == "kinject.plugins.finetune.strategy"
    with pytest.raises(ValueError, match="unknown plugin kind 'strategy'"):
        with registered("strategy", "x", First):
            pass


def test_a_hook_plugin_joins_the_running_hook_manager_for_the_block():
    seen = []

    class Tracker:
        @hookimpl
        def kinject_stage_start(self, stage, key, cached):
            seen.append(stage)

    manager = plugin_manager()
    with registered("hooks", "testing-tracker", Tracker()):
        assert manager.has_plugin("testing-tracker") and "testing-tracker" in registry("hooks").names()
        manager.hook.kinject_stage_start(stage="s1", key="k", cached=False)
    manager.hook.kinject_stage_start(stage="s2", key="k", cached=False)
    assert seen == ["s1"] and not manager.has_plugin("testing-tracker")


def test_the_offline_environment_and_the_data_folder(tmp_path):
    from kinject.api import Environment
    from kinject.tasks.textcls import TextClassificationTask

    env = offline_environment(tmp_path / "cache")
    assert env["KINJECT_CACHE_DIR"] == str(tmp_path / "cache") and env["HF_HUB_OFFLINE"] == "1"
    folder = write_textcls(tmp_path / "data", n_train=6, n_eval=4)
    task = TextClassificationTask(path=folder)
    run_env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    task.prepare_data(run_env)
    assert [len(task.examples(s, run_env)) for s in ("train", "dev", "test")] == [6, 4, 4]
    assert task.labels(run_env) == ["bio", "other"]
