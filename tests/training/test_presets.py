"""The settings a run starts from (a strategy's protocol, a task's recommended values, the precision): applied in
``prepare`` by kinject.defaults.start_settings to the fields the spec leaves, announced, and recorded in run.json
(``decided_by`` names the function)."""

from __future__ import annotations


def test_the_protocol_is_applied_to_the_fields_the_user_left_and_recorded(tmp_path, textcls_dir, tiny_model):
    from kinject.api import build_spec, prepare

    data = {"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(textcls_dir)}, "protocol": "quick",
            "training": {"learning_rate": 1e-4}, "cache_dir": str(tmp_path)}
    run = prepare(build_spec(data))
    assert run.protocol == {"training.max_steps": 30, "training.selection": "last"}  # quick: the last weights
    assert run.spec.training.max_steps == 30
    assert "max_steps" in run.spec.training.model_fields_set  # a protocol's fields count as set: no recommended value
    assert run.spec.training.learning_rate == 1e-4  # the user's own setting is kept
    assert run.decided_by["presets"] == "kinject.defaults.start_settings"


def test_protocol_kinject_and_recommended_false_apply_nothing(tmp_path, textcls_dir, tiny_model):
    from kinject.api import build_spec, prepare

    run = prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(textcls_dir)},
                              "recommended": False, "training": {"bf16": False}, "cache_dir": str(tmp_path)}))
    assert run.protocol == {} and run.recommended == {} and "presets" not in run.decided_by


def test_a_task_groups_members_apply_their_own_recommended_values():
    from kinject.api import build_spec
    from kinject.defaults import start_settings

    spec, settled = start_settings(build_spec({"task": {"name": "blurb"}}))
    assert settled["protocol"] == {} and settled["recommended"] == {}
    spec, settled = start_settings(build_spec({"task": {"name": "hoc"}}))
    recommended = settled["recommended"]
    assert recommended["training.head_learning_rate"] == 2e-2 and spec.training.head_learning_rate == 2e-2
    assert "head_learning_rate" not in spec.training.model_fields_set  # a protocol or the user still overrides it


def test_the_settings_a_run_starts_from_are_announced_in_every_entry_point(tmp_path, textcls_dir, tiny_model, capsys,
                                                                           caplog, monkeypatch):
    """The protocol's and the task's recommended values are said by prepare_runs, which `kinject run`, `kinject.run`,
    grid cells and sweep trials all take: the console of `kinject run`, the ``kinject`` log from Python."""
    import logging

    from helpers import run_kinject
    from kinject.api import build_spec, prepare_runs, registry

    args = ["run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny", "--quick",
            "--dry-run", "--cache-dir", str(tmp_path)]
    assert run_kinject(*args) == 0
    assert "protocol quick: training.max_steps=30, training.selection=last" in capsys.readouterr().out.splitlines()
    monkeypatch.setattr(registry("tasks").get("textcls"), "recommended", {"training": {"head_learning_rate": 2e-2}})
    with caplog.at_level(logging.INFO, logger="kinject"):
        prepare_runs(build_spec({"task": {"name": "textcls", "path": str(textcls_dir)}, "model": {"name": "tiny"},
                                 "choose": False, "cache_dir": str(tmp_path)}), dry_run=True)
    said = [r.message for r in caplog.records if r.message.startswith("task textcls: recommended settings ")]
    assert len(said) == 1 and "training.head_learning_rate=0.02" in said[0] and "recommended=false" in said[0], said


def test_bfloat16_where_the_device_computes_it_natively_is_a_decision_announced_and_recorded(monkeypatch):
    """training.bf16 unset: on where the device computes bfloat16 natively - a departure from float32 that changes the
    numbers, so it is said and recorded (run.json ``defaults``); off elsewhere; a value the user sets is kept."""
    from kinject.api import build_spec
    from kinject import defaults as presets

    monkeypatch.setattr(presets, "native_bf16", lambda: True)
    spec, settled = presets.start_settings(build_spec({}))
    assert spec.training.bf16 is True and "bf16" not in spec.training.model_fields_set
    assert settled["defaults"]["training.bf16"].startswith("true: ") and "autocast" in settled["defaults"]["training.bf16"]
    spec, settled = presets.start_settings(build_spec({"training": {"bf16": False}}))
    assert spec.training.bf16 is False and settled["defaults"] == {}
    monkeypatch.setattr(presets, "native_bf16", lambda: False)
    spec, settled = presets.start_settings(build_spec({}))
    assert spec.training.bf16 is False and settled["defaults"] == {}
