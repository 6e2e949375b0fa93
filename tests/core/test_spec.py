"""Run specs: whole-spec validation with field paths, plugin configs checked into them (reading a spec from YAML and
--set: tests/training/test_spec_files.py)."""

from __future__ import annotations

import pytest

from kinject.errors import SpecError
from kinject.spec_reading import build_spec


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


