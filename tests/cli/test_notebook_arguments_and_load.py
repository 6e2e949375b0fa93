"""From Python: ``kinject.run``'s own arguments checked in one line, and ``kinject.load`` of a run made on the command
line (issue #42)."""

from __future__ import annotations

import json

import pytest

import kinject
from helpers import run_kinject
from kinject.errors import DataError, DataMissingError, KinjectError, SpecError


@pytest.mark.parametrize("kwargs, words", [
    ({"overrides": ["training.epochs=1"]}, "overrides: expected a dict"),
    ({"overrides": {"": 1}}, "overrides: '' is not a dotted field name"),
    ({"repeats": 0}, "repeats: expected a whole number of seeds, 1 or more; got 0"),
    ({"repeats": 2.5}, "repeats:")])
def test_a_wrong_argument_is_one_line_naming_it(tmp_path, kwargs, words):
    with pytest.raises(SpecError) as caught:
        kinject.run("finetune", task="textcls", model="tiny", output=tmp_path / "out", **kwargs)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_load_gives_a_cli_run_as_run_returns_it(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "run"
    assert run_kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                       "--set", "training.max_steps=2", "--set", "hooks.knowledge-probe.enabled=false",
                       "--cache-dir", str(tmp_path / "cache"), "-o", str(out)) == 0
    result = kinject.load(out)
    assert isinstance(result, kinject.RunResult) and result.output == out
    assert result == json.loads((out / "metrics.json").read_text())
    frame = result.frame()
    assert set(frame["split"]) == {"dev", "test"} and "accuracy" in set(frame["metric"])


def test_load_of_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    with pytest.raises(DataMissingError, match="no metrics.json"):
        kinject.load(tmp_path / "nowhere")
    (tmp_path / "metrics.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="metrics.json: expected a mapping of split -> metrics, got a list"):
        kinject.load(tmp_path)
    (tmp_path / "metrics.json").write_text("{")
    with pytest.raises(KinjectError, match="not readable JSON"):
        kinject.load(tmp_path)
