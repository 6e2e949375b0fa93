"""``kinject push`` (issue #42): a malformed metrics.json is one line, NaN metrics stay out of the model-index with a
warning, a local base model publishes no path of this machine, the licence comes from the base model or --license,
every task with a metric gets a model-index, and the reproduce command can be pasted."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from helpers import run_kinject


def make_run(root: Path, model: str, model_path: str, metrics, task: dict | None = None, command=None) -> Path:
    """A finished run folder as kinject writes it (a model with whole weights, run.json, metrics.json)."""
    import torch
    from safetensors.torch import save_file

    run = root / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    save_file({"w": torch.zeros(2)}, str(run / "model" / "model.safetensors"))
    info = {"spec": {"model": {"name": model}, "task": task or {"name": "hpo-isa"}, "strategy": {"name": "finetune"},
                     "sources": [], "training": {}},
            "command": command or ["kinject", "run", "finetune", "--model", model], "seed": 42,
            "model_path": model_path}
    (run / "run.json").write_text(json.dumps(info))
    (run / "metrics.json").write_text(metrics if isinstance(metrics, str) else json.dumps(metrics))
    return run


def dry_run(capsys, run: Path, *extra: str) -> tuple[int, str, ModelCard | None]:
    capsys.readouterr()
    code = run_kinject("push", str(run), "--repo-id", "you/x", "--dry-run", *extra)
    err = capsys.readouterr().err
    card = ModelCard.load(run / "README.md") if (run / "README.md").is_file() else None
    return code, err, card


def test_a_metrics_file_that_is_a_list_is_one_line(tmp_path, capsys):
    run = make_run(tmp_path, "tiny", "/x/tiny", "[0.5, 0.7]")
    code, err, card = dry_run(capsys, run, "--license", "mit")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "metrics.json: a list where kinject writes an object" in err and card is None


def test_nan_metrics_are_left_out_of_the_model_index_with_a_warning(tmp_path, capsys):
    run = make_run(tmp_path, "tiny", "/x/tiny", '{"test": {"accuracy": NaN, "f1_macro": 0.5}, "dev": {"f1_macro": '
                                                  'Infinity}}')
    code, err, card = dry_run(capsys, run, "--license", "mit")
    assert code == 0, err
    assert "warning: test.accuracy, dev.f1_macro: not a number" in err
    metrics = card.data.to_dict()["model-index"][0]["results"]
    assert [(r["dataset"]["split"], r["metrics"][0]["name"]) for r in metrics] == [("test", "f1_macro")]


def test_a_local_base_model_publishes_no_path_and_gives_its_licence(tmp_path, capsys):
    folder = tmp_path / "my models" / "biobert-local"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("---\nlicense: cc-by-4.0\nlanguage: en\n---\n# my model\n")
    run = make_run(tmp_path, str(folder), str(folder), {"test": {"accuracy": 0.5}})
    code, err, card = dry_run(capsys, run)
    assert code == 0, err
    data = card.data.to_dict()
    assert "base_model" not in data and data["license"] == "cc-by-4.0"
    text = (run / "README.md").read_text()
    assert str(tmp_path) not in text and "huggingface.co/" + str(folder) not in text and "https://huggingface.co//" \
        not in text
    assert "a local model folder (biobert-local)" in text


def test_an_unknown_licence_needs_license_to_push(tmp_path, capsys, monkeypatch):
    import kinject.plugins.hub.push as push

    run = make_run(tmp_path, "tiny", "/x/tiny", {"test": {"accuracy": 0.5}})
    code, err, card = dry_run(capsys, run)  # a dry run shows the card and says what a push will need
    assert code == 0 and "warning: --license: the licence of the base model (tiny) is unknown" in err
    monkeypatch.setattr(push, "hub_api", lambda: None)
    assert run_kinject("push", str(run), "--repo-id", "you/x") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: --license:") and "nothing is pushed" in err


def test_your_own_data_gets_a_model_index_and_a_command_to_paste(tmp_path, capsys):
    data = tmp_path / "my data" / "adverse-events"
    data.mkdir(parents=True)
    command = ["kinject", "run", "finetune", "--task", "textcls", "--set", f"task.path={data}", "--data-dir",
               str(tmp_path / "d"), "--cache-dir", str(tmp_path / "cache"), "--set", "training.epochs=2", "-o",
               str(tmp_path / "runs" / "ft")]
    run = make_run(tmp_path, "tiny", "/x/tiny", {"dev": {"accuracy": 0.4}, "test": {"accuracy": 0.5}},
                   task={"name": "textcls", "path": str(data)}, command=command)
    code, err, card = dry_run(capsys, run, "--license", "apache-2.0")
    assert code == 0, err
    results = card.data.to_dict()["model-index"][0]["results"]
    assert {r["dataset"]["name"] for r in results} == {"adverse-events"}
    assert {r["dataset"]["type"] for r in results} == {"custom"} and len(results) == 2
    text = (run / "README.md").read_text()
    block = re.search(r"## Reproduce\n.*?```bash\n(.*?)```", text, re.S).group(1)
    assert str(tmp_path) not in block and "..." not in block.replace("=...", "")
    # pasted into a shell with the folders set, it runs exactly the run's command (the cache dir aside)
    script = re.sub(r"^(\w+)=\.\.\..*$", lambda m: f"{m.group(1)}={'/mine/' + m.group(1).lower()}", block,
                    flags=re.M)
    done = subprocess.run(["bash", "-c", "kinject() { printf '%s\\n' \"$@\"; }\n" + script], capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines() == ["run", "finetune", "--task", "textcls", "--set", "task.path=/mine/task_path",
                                        "--data-dir", "/mine/data_dir", "--set", "training.epochs=2", "-o", "ft"]


@pytest.mark.parametrize("name, hub", [("dmis-lab/biobert-v1.1", True), ("/abs/models/mine", False),
                                       ("./models/mine", False), ("a/b/c", False)])
def test_base_model_only_for_a_hub_id(name, hub):
    from kinject.plugins.hub.provenance import base_model

    assert base_model({"spec": {"model": {"name": name}}, "model_path": name}) == (name if hub else None)
