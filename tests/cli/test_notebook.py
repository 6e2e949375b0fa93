"""From Python: `kinject.run(...)` is `kinject run` in one call; `kinject.evidence.comparison` is `kinject compare`;
every name the docs import exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_run_from_python_returns_the_metrics_by_split_and_a_table(tmp_path, textcls_dir, tiny_model, caplog):
    import logging

    import kinject

    caplog.set_level(logging.INFO, logger="kinject")
    result = kinject.run("finetune", task="textcls", model="tiny", output=tmp_path / "nb",
                         overrides={"task.path": textcls_dir, "training.max_steps": 4, "hooks": {"knowledge-probe": {"enabled": False}}})
    assert set(result["test"]) == {"accuracy", "f1_macro"} and result.output == tmp_path / "nb"
    assert (tmp_path / "nb" / "run.json").is_file()
    assert "stage finetune" in caplog.text  # the stage lines, through the standard logger
    frame = result.frame()
    assert list(frame.columns) == ["split", "metric", "value"] and len(frame) == 4
    again = kinject.run("finetune", task="textcls", model="tiny", output=tmp_path / "nb2", repeats=2,
                        overrides={"task.path": textcls_dir, "training.max_steps": 4, "hooks": {"knowledge-probe": {"enabled": False}}})
    assert again["test"]["accuracy"]["n"] == 2 and set(again.frame()["seeds"]) == {2}
    from kinject.evidence import compare

    found = compare(result, again)  # a run result or a folder
    assert found["metrics"][0]["rows"][1]["run"] == "nb2"


def test_run_from_python_raises_one_line_errors(tmp_path, tiny_model):
    import kinject
    from kinject.errors import KinjectError

    with pytest.raises(KinjectError, match="training.epochs"):
        kinject.run("finetune", task="hpo-isa", model="tiny", overrides={"training.epochs": -1},
                    output=tmp_path / "x")


def _doc_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) of every `from kinject... import ...` in the README and docs/."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for module, names in re.findall(r"from (kinject[\w.]*) import \(?([\w, \n]+?)\)?(?:\n|$|  #)", text):
            for name in (n.strip() for n in names.replace("\n", " ").split(",")):
                if name and name.isidentifier():
                    found.append((path.name, module, name))
    return found


@pytest.mark.parametrize("where, module, name", _doc_imports())
def test_every_name_the_docs_import_exists(where, module, name):
    imported = importlib.import_module(module)
    assert hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}") is not None, (where, module, name)


def test_a_plain_run_that_learned_nothing_is_warned_and_flagged(tmp_path, textcls_dir, tiny_model, caplog):
    """A run without a comparison stage is checked when it ends (the evidence library's check on test): a warning line
    per run folder that learned nothing, and ``not_learned`` maps each such folder (each seed) to why; a folder whose
    test predictions are the gold labels learned something."""
    import json
    import logging

    import kinject

    caplog.set_level(logging.INFO, logger="kinject")
    settings = {"task.path": textcls_dir, "training.max_steps": 1, "hooks": {"knowledge-probe": {"enabled": False}}}
    result = kinject.run("finetune", task="textcls", model="tiny", output=tmp_path / "one", repeats=2,
                         overrides=settings)
    seeds = {str(tmp_path / "one" / "seed-42"), str(tmp_path / "one" / "seed-43")}
    assert set(result.not_learned) == seeds and all("constant predictor" in why for why in result.not_learned.values())
    assert sum("learned nothing on test: constant predictor" in r.message for r in caplog.records
               if r.levelno == logging.WARNING) == 2
    predictions = tmp_path / "one" / "seed-42" / "predictions" / "test.jsonl"
    records = [json.loads(line) for line in predictions.read_text().splitlines()]
    predictions.write_text("".join(json.dumps({**r, "pred": r["gold"]}) + "\n" for r in records))
    assert set(kinject.load(tmp_path / "one").not_learned) == {str(tmp_path / "one" / "seed-43")}
    assert kinject.load(tmp_path / "one" / "seed-42").not_learned == {}
