"""peft through the shared fine-tune body (any strategy that fine-tunes), and trackers (training.report_to)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_kinject as kinject


def args(data, out, *extra):
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.epochs=2", "--set", "training.batch_size=8", "--set", "training.learning_rate=1e-3",
            "-o", str(out), *extra]


@pytest.mark.parametrize("method", ["lora", "ia3"])
@pytest.mark.slow
def test_peft_trains_adapters_and_the_head_and_saves_a_plain_merged_model(tmp_path, textcls_dir, tiny_model, method):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoModelForSequenceClassification

    full, adapted = tmp_path / "full", tmp_path / "peft"
    assert kinject(*args(textcls_dir, full)) == 0
    assert kinject(*args(textcls_dir, adapted, "--set", f"training.peft.method={method}")) == 0
    info = {s["name"]: s for s in json.loads((adapted / "run.json").read_text())["stages"]}
    keys = {s["name"]: s["key"] for s in json.loads((full / "run.json").read_text())["stages"]}
    assert info["finetune"]["key"] != keys["finetune"]  # peft settings are in the key
    metrics = json.loads((adapted / "metrics.json").read_text())
    trained = json.loads((full / "metrics.json").read_text())["train"]["trainable_parameters"]
    assert 0 < metrics["train"]["trainable_parameters"] < trained / 4  # adapters + head only
    encoder = AutoModel.from_pretrained(adapted / "model")  # a plain, merged model
    assert not any("lora" in n or "ia3" in n for n, _ in encoder.named_parameters())
    stage = Path(info["finetune"]["dir"])
    assert (stage / "peft-adapter" / "adapter_config.json").exists()
    assert (adapted / "peft-adapter" / "adapter_config.json").exists()  # beside the merged model in the run
    run_info = json.loads((adapted / "run.json").read_text())
    assert run_info["published"] == ["peft-adapter"]  # the stage publishes it: `kinject push` shares it
    from kinject.api import Strategy

    assert Strategy.shared_files(adapted, run_info)["peft-adapter"] == adapted / "peft-adapter"
    assert "peft-adapter" not in Strategy.shared_files(full, json.loads((full / "run.json").read_text()))
    base = AutoModel.from_pretrained(tiny_model).state_dict()
    merged = encoder.state_dict()
    changed = [k for k in merged if k in base and not torch.equal(merged[k], base[k])]
    assert changed and all(("query" in k or "value" in k or "key" in k or "output.dense" in k) for k in changed)
    head = AutoModelForSequenceClassification.from_pretrained(adapted / "model").classifier.weight
    assert head.abs().sum() > 0 and "test" in metrics
    saved = load_file(adapted / "model" / "model.safetensors")
    assert "classifier.weight" in saved


@pytest.mark.slow
def test_peft_reaches_a_method_s_final_fine_tune(tmp_path, textcls_dir, tiny_model):
    other = tmp_path / "inter"
    from conftest import write_textcls

    write_textcls(other, n_train=24, n_eval=8, seed=4)
    out = tmp_path / "stilt"
    assert kinject("run", "stilt", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", f"strategy.intermediate=[{{name: textcls, path: {other}}}]", "--set", "training.epochs=1",
                   "--set", "training.peft.method=lora", "-o", str(out)) == 0
    stages = {s["name"]: Path(s["dir"]) for s in json.loads((out / "run.json").read_text())["stages"]}
    for name in ("stilt-intermediate-1-textcls", "stilt-finetune"):
        assert (stages[name] / "peft-adapter").is_dir(), name


@pytest.mark.slow
def test_tensorboard_gets_training_curves_and_kinject_s_metrics(tmp_path, textcls_dir, tiny_model):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    best = ["--set", "training.selection=best"]  # dev scores each epoch (16 dev examples: only when asked)
    assert kinject(*args(textcls_dir, out, "--set", "training.report_to=[tensorboard]",
                         "--set", "training.logging_steps=1", *best)) == 0
    plain = tmp_path / "plain"
    assert kinject(*args(textcls_dir, plain, *best)) == 0
    keys = [{s["name"]: s["key"] for s in json.loads((d / "run.json").read_text())["stages"]} for d in (out, plain)]
    assert keys[0] == keys[1]  # trackers are not keyed
    tags = {}
    for folder in (out / "logs").iterdir():
        events = EventAccumulator(str(folder))
        events.Reload()
        tags[folder.name] = set(events.Tags()["scalars"])
    assert any(t.startswith("train/loss") for t in tags["finetune"])  # the Trainer's curve
    assert "kinject/eval/accuracy" in tags["finetune"]  # dev selection's scores
    assert "kinject/test/accuracy" in tags["evaluate"]  # the evaluate stage's metrics


# -- a quick try ------------------------------------------------------------------------------------------------ #
def test_every_built_in_strategy_has_a_quick_protocol():
    from kinject.registry import registry

    for name in ("finetune", "kimera", "mop", "doktra", "stilt", "pretrain"):
        quick = registry("strategies").get(name).protocols.get("quick")
        assert quick and (quick.get("training") or {}).get("max_steps"), name  # a bounded fine-tune at least


def test_quick_applies_the_strategy_s_quick_protocol_and_a_task_limit(tmp_path, textcls_dir, tiny_model, capsys):
    capsys.readouterr()
    assert kinject("run", "mop", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--quick", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "protocol: quick" in out and "limit: 64" in out
    assert "partitions: 2" in out and "kg_max_triples: 2000" in out and "max_steps: 30" in out
    assert "trains on: task textcls train split" in out
