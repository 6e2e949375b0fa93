"""kinject-echo tests itself as any plugin package can: its strategy and hook plugin registered in-process (not
installed), run on the tiny model and a small textcls folder in a temporary cache (kinject.testing's fixtures)."""

import json
from pathlib import Path

import kinject
import kinject_echo.tracker as tracker
from kinject_echo.strategy import EchoStrategy


def test_echo_runs_leaves_its_note_and_its_tracker_sees_the_run(kinject_register, kinject_textcls, kinject_cache,
                                                                 tmp_path, monkeypatch):
    kinject_register("strategies", "echo", EchoStrategy)
    kinject_register("hooks", "echo-tracker", tracker)
    monkeypatch.setenv("ECHO_TRACKER_FILE", str(tmp_path / "events.jsonl"))
    result = kinject.run("echo", task="textcls", model="tiny", quick=True, output=tmp_path / "run",
                         overrides={"task.path": kinject_textcls, "strategy.note": "from-my-test",
                                    "hooks.knowledge-probe.enabled": False})
    assert 0 <= result["test"]["accuracy"] <= 1
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    finetune = next(stage for stage in info["stages"] if stage["name"] == "finetune")
    assert Path(finetune["dir"]).is_relative_to(kinject_cache)  # the session's cache, not the user's
    assert (Path(finetune["dir"]) / "note.txt").read_text() == "from-my-test"
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[0] == {"event": "run_start", "strategy": "echo"} and events[-1]["event"] == "run_end"


def test_the_tiny_model_is_a_bert_in_the_cache(kinject_tiny_model, kinject_cache):
    config = json.loads((Path(kinject_tiny_model) / "config.json").read_text())
    assert config["hidden_size"] == 32 and Path(kinject_tiny_model).is_relative_to(kinject_cache)
