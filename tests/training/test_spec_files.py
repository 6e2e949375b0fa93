"""What the front ends share to build a spec (the training library's spec_files): YAML read with file:line errors,
``a.b=c`` overrides typed as YAML, both feeding the kernel's ``build_spec``."""

from __future__ import annotations

import pytest

from kinject.errors import SpecError
from kinject.api import apply_overrides
from kinject.spec_reading import load_yaml
from kinject.spec_reading import build_spec


def test_defaults_and_overrides_are_typed():
    data = apply_overrides({"task": {"name": "textcls"}},
                           ["training.epochs=2", "strategy.name=stilt", "strategy.intermediate=[a, b]", "seed=7", "sources.0.name=hpo",
                            "model.name=tiny"])
    spec = build_spec(data)
    assert spec.training.epochs == 2.0 and spec.seed == 7
    assert spec.strategy.options() == {"intermediate": ["a", "b"]}
    assert spec.sources[0].name == "hpo"
    assert spec.model.name == "tiny" and spec.model.max_length == 128


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
