"""A setting a hook plugin decides for the user (an entry its ``kinject_extra_stages`` adds to ``run.defaults``) is
announced and recorded in run.json crediting that plugin (``decided_by[field]``), not kinject's default rules."""

from __future__ import annotations

import json
import logging

import kinject
from kinject.api import hookimpl
from kinject.testing import registered


class Chooser:
    """Decides a setting of its own for every run and says why."""

    @hookimpl
    def kinject_extra_stages(self, run):
        run.defaults["hooks.chooser.window"] = "4: the train split is small"
        return []


def test_a_hook_plugins_decision_is_credited_to_it(tmp_path, textcls_dir, tiny_model, caplog):
    out = tmp_path / "run"
    with registered("hooks", "chooser", Chooser()), caplog.at_level(logging.INFO, logger="kinject"):
        kinject.run("finetune", task="textcls", model="tiny", output=out,
                    overrides={"task.path": textcls_dir, "training.max_steps": 1,
                               "hooks.knowledge-probe.enabled": False})
    info = json.loads((out / "run.json").read_text())
    assert info["defaults"]["hooks.chooser.window"] == "4: the train split is small"
    assert info["decided_by"]["hooks.chooser.window"] == \
        f"hook plugin chooser: {__name__}.Chooser.kinject_extra_stages"
    assert info["decided_by"]["defaults"] == "kinject.defaults.default_rules"  # its own rules stay credited to it
    assert "training.selection" in info["defaults"] and "training.selection" not in info["decided_by"]
    said = [r.getMessage() for r in caplog.records]
    assert "hooks.chooser.window=4: the train split is small (hook plugin chooser; set it to override)" in said, said
