"""Run specs: YAML, overrides, whole-spec validation with field paths."""

from __future__ import annotations

import pytest

from kinject.errors import SpecError
from kinject.spec_input import apply_overrides, build_spec, load_yaml


def test_defaults_and_overrides_are_typed():
    data = apply_overrides({"task": {"name": "textcls"}},
                           ["training.epochs=2", "strategy.name=stilt", "strategy.intermediate=[a, b]", "seed=7", "sources.0.name=hpo",
                            "model.name=tiny"])
    spec = build_spec(data)
    assert spec.training.epochs == 2.0 and spec.seed == 7
    assert spec.strategy.options() == {"intermediate": ["a", "b"]}
    assert spec.sources[0].name == "hpo"
    assert spec.model.name == "tiny" and spec.model.max_length == 128


def test_unknown_field_names_path_and_allowed_fields():
    with pytest.raises(SpecError) as err:
        build_spec({"task": {"name": "x"}, "training": {"epoch": 1}})
    msg = str(err.value)
    assert msg.startswith("training.epoch: unknown field. Did you mean 'epochs'? (allowed:") and "max_steps" in msg


def test_bad_value_names_field_and_constraint():
    with pytest.raises(SpecError, match=r"training.learning_rate: Input should be greater than 0"):
        build_spec({"task": {"name": "x"}, "training": {"learning_rate": -1}})
    with pytest.raises(SpecError, match=r"model.attn_implementation: Input should be 'sdpa' or 'eager'"):
        build_spec({"task": {"name": "x"}, "model": {"attn_implementation": "flash"}})


def test_plugin_config_errors_carry_the_spec_path(cache_dir):
    from kinject.preparation import resolve_components

    spec = build_spec({"task": {"name": "textcls", "multi_labl": True}})
    with pytest.raises(SpecError, match=r"^task.multi_labl: unknown field. Did you mean 'multi_label'\? \(allowed: "):
        resolve_components(spec)


def test_unknown_plugin_name_suggests(cache_dir):
    from kinject.preparation import resolve_components
    from kinject.errors import UnknownNameError

    spec = build_spec({"task": {"name": "textcl"}, "strategy": {"name": "finetun"}})
    with pytest.raises(UnknownNameError, match=r"task.name: unknown task 'textcl'. Did you mean 'textcls'"):
        resolve_components(spec)


def test_yaml_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text("task:\n  name: textcls\ntraining: [unclosed\n")
    with pytest.raises(SpecError, match=rf"^{bad}:\d+: invalid YAML"):
        load_yaml(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match=r"list.yaml:1: a run spec must be a mapping"):
        load_yaml(listy)


def test_override_syntax_errors():
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        apply_overrides({}, ["training.epochs"])
    with pytest.raises(SpecError, match="empty field name"):
        apply_overrides({}, ["training..epochs=1"])


def test_training_overrides_replace_only_the_fields_they_set():
    """A strategy's per-stage budget (STILT intermediates, DoKTra teacher/distillation): set fields win, the rest
    is the run's, and the result is held as a training stage holds it (no limit, no eval splits)."""
    import pydantic

    from kinject.spec import TrainingOverrides, TrainingSpec

    base = TrainingSpec(epochs=1, learning_rate=1e-4, head_learning_rate=2e-2, limit=10, eval_splits=["test"])
    stage = TrainingOverrides(epochs=2, head_learning_rate=1e-3).apply(base)
    assert (stage.epochs, stage.learning_rate, stage.head_learning_rate) == (2, 1e-4, 1e-3)
    assert stage.limit is None and stage.eval_splits is None
    assert TrainingOverrides().apply(base) == base.for_training()
    with pytest.raises(pydantic.ValidationError):
        TrainingOverrides(learning_rate=-1)
    with pytest.raises(pydantic.ValidationError):
        TrainingOverrides(lr=1e-4)  # unknown field
