"""A grid cell takes the automatic decisions exactly as the command it records (`kinject run STRATEGY --config
<cell>.yaml -o <cell>`) does: the same choice, the same stages, identical predictions (#40)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import write_textcls
from helpers import run_kinject


@pytest.mark.slow
def test_a_grid_cell_and_its_recorded_command_are_the_same_experiment(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv("KINJECT_CHOOSE", "1")  # on, as for a user: the cell chooses as its command would
    monkeypatch.setenv("KINJECT_CACHE_DIR", str(tmp_path / "cache"))
    data = write_textcls(tmp_path / "textcls", n_train=24, n_eval=8)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "output": str(tmp_path / "out"), "model": "tiny", "seeds": [42], "tasks": ["textcls"],
        "strategies": {"finetune": {}},
        "settings": {"task.path": str(data), "training.epochs": 1, "training.batch_size": 8, "model.max_length": 32,
                     "hooks": {"knowledge-probe": {"enabled": False}}, "defaults": {"folds": 2}}}))
    assert run_kinject("grid", str(grid), "--executor", "debug") == 0
    cell = tmp_path / "out" / "textcls" / "finetune" / "seed-42"
    info = json.loads((cell / "run.json").read_text())
    assert info["chosen"]["fold_runs"] == 4 and not info["chosen"].get("cached")  # the cell chose
    command = info["command"]
    assert command[:3] == ["kinject", "run", "finetune"] and command[-2] == "-o"
    again = tmp_path / "again"
    monkeypatch.setenv("KINJECT_CACHE_DIR", str(tmp_path / "fresh"))  # recomputed: nothing reused from the cell
    assert run_kinject(*command[1:-1], str(again)) == 0
    rerun = json.loads((again / "run.json").read_text())
    assert {k: v for k, v in rerun["chosen"].items() if k != "seconds"} == \
        {k: v for k, v in info["chosen"].items() if k != "seconds"}
    assert [s["key"] for s in rerun["stages"]] == [s["key"] for s in info["stages"]]
    assert (again / "predictions" / "test.jsonl").read_text() == (cell / "predictions" / "test.jsonl").read_text()
