"""Model selection on dev while fine-tuning (kinject.training.selection) and budgets that belong to each
stage."""

from __future__ import annotations

import json

import pytest

from helpers import run_kinject as kinject


def tiny_classifier(tiny_model):
    from kinject.api import Head
    from kinject.training import build_task_model

    return build_task_model(tiny_model, Head(kind="sequence", num_labels=2, labels=("bio", "other")), seed=0)


def features(tiny_model, n=32):
    from kinject.api import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    texts = ["gene expression in tumor cells", "the cat sat on the mat"] * (n // 2)
    encoded = tokenizer(texts, truncation=True, max_length=16)
    rows = [{k: encoded[k][i] for k in encoded.keys()} | {"labels": i % 2} for i in range(n)]
    from transformers import DataCollatorWithPadding

    return rows, DataCollatorWithPadding(tokenizer)


def scripted(scores):
    """A scorer returning the next score of ``scores`` and remembering the model's weights at each call."""
    seen = []

    def scorer(model):
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return {"accuracy": scores[len(seen) - 1]}

    return scorer, seen


def test_best_on_dev_is_kept_and_the_curve_recorded(tmp_path, tiny_model):
    import torch

    from kinject.api import TrainingSpec
    from kinject.training import train

    rows, collator = features(tiny_model)
    scorer, seen = scripted([0.5, 0.9, 0.7])
    model = tiny_classifier(tiny_model)
    training = TrainingSpec(epochs=3, batch_size=8, learning_rate=1e-2, warmup_ratio=0, save_steps=100)
    stats = train(model, rows, collator, training, tmp_path / "work", 0, scorer=scorer, selection_metric="accuracy")
    selection = stats["selection"]
    assert [s for _, s in selection["curve"]] == [0.5, 0.9, 0.7] and selection["evaluations"] == 3
    assert selection["best_step"] == 8 and selection["best_score"] == 0.9 and not selection["stopped_early"]
    assert stats["global_step"] == 12  # the whole budget was trained ...
    final = model.state_dict()
    assert all(torch.equal(final[k], seen[1][k]) for k in final)  # ... and the epoch-2 weights came back
    assert not any(torch.equal(final[k], seen[2][k]) for k in final if "classifier" in k)
    assert not list((tmp_path / "work").glob("best-step-*"))[1:]  # one best file at most


def test_patience_stops_training_and_last_keeps_the_final_weights(tmp_path, tiny_model):
    from kinject.api import TrainingSpec
    from kinject.training import train

    rows, collator = features(tiny_model)
    scorer, _ = scripted([0.8, 0.6, 0.5, 0.4, 0.3])
    training = TrainingSpec(epochs=5, batch_size=8, learning_rate=1e-2, patience=2, save_steps=100)
    stats = train(tiny_classifier(tiny_model), rows, collator, training, tmp_path / "a", 0, scorer=scorer,
                  selection_metric="accuracy")
    assert stats["selection"]["stopped_early"] and stats["global_step"] == 12  # 3 of 5 epochs
    scorer, seen = scripted([0.8, 0.6])
    last = training.model_copy(update={"selection": "last", "epochs": 2})
    stats = train(tiny_classifier(tiny_model), rows, collator, last, tmp_path / "b", 0, scorer=scorer,
                  selection_metric="accuracy")
    assert "selection" not in stats and not seen  # no dev pass at all


@pytest.mark.slow
def test_a_run_records_its_selection_and_last_differs_in_key(tmp_path, textcls_dir, tiny_model):
    args = ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "training.epochs=2", "--set", "training.batch_size=8"]  # (16 dev examples: best only when asked)
    assert kinject(*args, "--set", "training.selection=best", "-o", str(tmp_path / "best")) == 0
    selection = json.loads((tmp_path / "best" / "metrics.json").read_text())["train"]["selection"]
    assert selection["metric"] == "accuracy" and selection["evaluations"] == 2 and selection["every"] == "epoch"
    assert kinject(*args, "--set", "training.selection=last", "-o", str(tmp_path / "last")) == 0
    keys = [{s["name"]: s["key"] for s in json.loads((tmp_path / d / "run.json").read_text())["stages"]}
            for d in ("best", "last")]
    assert keys[0]["finetune"] != keys[1]["finetune"]


@pytest.mark.parametrize("strategy, stage", [("doktra", "doktra-distill"), ("mop", "mop-adapter-0"),
                                             ("pretrain", "pretrain-mlm")])
def test_a_method_s_own_stages_do_not_inherit_fine_tuning_settings(tmp_path, textcls_dir, tiny_model, monkeypatch,
                                                                  strategy, stage):
    """A task's recommended head learning rate (and dev selection, minimum steps) belongs to fine-tuning the task
    model; distillation, adapters and masked-LM keep their own budget."""
    from helpers import write_kg

    from kinject.api import build_spec, plan, prepare, registry

    monkeypatch.setattr(registry("tasks").get("textcls"), "recommended",
                        {"training": {"head_learning_rate": 2e-2, "min_steps": 50}})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("gene expression in tumor cells rose after the drug dose.\n" * 40)
    extra = {"doktra": {"strategy": {"name": "doktra", "teacher": "tiny"}, "training": {"epochs": 2}},
             "mop": {"strategy": {"name": "mop", "partitions": 2},
                     "sources": [{"name": "triples", "path": str(write_kg(tmp_path / "kg.tsv"))}]},
             "pretrain": {"sources": [{"name": "corpus", "paths": [str(corpus)]}]}}[strategy]
    run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls",
                              "path": str(textcls_dir)}, "strategy": {"name": strategy},
                              "cache_dir": str(tmp_path / "cache"), **extra}))
    stages = {p.stage.name: p.stage for p in plan(run)}
    training = stages[stage].config.training
    assert training.head_learning_rate is None and training.min_steps is None and training.selection == "last"
    if "finetune" in stages:  # the task's own fine-tune does get them
        assert stages["finetune"].config.training.head_learning_rate == 2e-2


def test_doktra_switches_at_gamma_of_the_distillation_steps():
    from kinject.plugins.doktra.trainers import switch_step

    assert switch_step(0.9, 2, -1, 10) == 18  # was int(0.9 x 2) = 1 epoch = 10 steps: half the budget refining
    assert switch_step(0.9, 10, -1, 10) == 90  # the reference's 10 epochs: the same as int(10 x 0.9) epochs
    assert switch_step(0.5, 1, 7, 10) == 3


def test_the_paper_protocol_fills_what_the_run_does_not_set(tmp_path, textcls_dir, tiny_model, capsys):
    from kinject.api import build_spec, prepare

    def run(**extra):
        return prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(textcls_dir)},
                                   "strategy": {"name": "doktra", "teacher": "tiny", **extra.pop("strategy", {})},
                                   "cache_dir": str(tmp_path / "cache"), **extra}))

    kinject_defaults = run()
    paper = run(protocol="paper", training={"batch_size": 8}, strategy={"gamma": 0.8})
    assert kinject_defaults.spec.training.epochs == 3 and paper.spec.training.epochs == 10
    assert paper.spec.training.batch_size == 8 and paper.strategy.config.gamma == 0.8  # the run's own values win
    assert paper.strategy.config.distill_training.epochs == 10 and paper.protocol["training.learning_rate"] == 1e-5
    assert "strategy.gamma" not in paper.protocol
    stages = {s.name: s for s in paper.stages}
    assert stages["doktra-distill"].config.training.epochs == 10
    assert stages["doktra-teacher"].config.training.learning_rate == 2e-5
    capsys.readouterr()
    assert kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", "protocol=tutorial", "--dry-run") == 2
    err = capsys.readouterr().err
    assert "protocol: strategy 'finetune' has no 'tutorial' protocol (has: kinject, paper, quick)" in err


@pytest.mark.slow
def test_the_evaluation_reuses_the_selected_model_s_dev_logits_and_they_equal_a_fresh_prediction(
        tmp_path, textcls_dir, tiny_model):
    """Dev selection already scored the model it keeps; its evaluation reads those logits instead of scoring dev a
    second time, and they are what predicting with the saved model gives."""
    import numpy as np

    from kinject.training import evaluate_model
    from kinject.training.stages import load_scored

    out, cache = tmp_path / "run", tmp_path / "cache"
    assert kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", "training.epochs=2", "--set", "training.batch_size=8", "--cache-dir", str(cache),
                   "--set", "training.selection=best", "-o", str(out)) == 0
    finetune = next((cache / "stages" / "finetune").glob("*/stage.json")).parent
    evaluate = next((cache / "stages" / "evaluate").glob("*/stage.json"))
    from kinject.training import EvaluateConfig

    cfg = EvaluateConfig.model_validate(json.loads(evaluate.read_text())["config"])
    scored = load_scored(finetune, cfg)
    assert set(scored) == {"dev"}
    task = cfg.task.build()
    env = cfg.task.environment(type("Ctx", (), {"cache_dir": cache, "offline": True})())
    fresh, _ = evaluate_model(finetune / "model", task, env, 16, cfg.max_length, tmp_path / "w", ("dev",),
                              bf16=cfg.bf16)
    recorded = json.loads((out / "metrics.json").read_text())["dev"]
    assert recorded == pytest.approx(fresh["dev"], abs=1e-6)
    assert np.isfinite(scored["dev"]).all()
    # evaluated with other settings than the fine-tune scored with: predicted again
    assert load_scored(finetune, cfg.model_copy(update={"max_length": cfg.max_length // 2})) == {}


def test_a_fine_tune_that_saves_another_model_than_it_trained_leaves_no_dev_logits(tmp_path, textcls_dir, tiny_model):
    """A subclass whose model/ is not the model in memory (its own save_model, a model transform, peft merged) must
    be scored from what it saved."""
    from kinject.training import FinetuneConfig
    from kinject.training.stages import _saves_what_it_trains

    class Saving(FinetuneConfig):
        def save_model(self, model, tokenizer, folder, ctx):
            super().save_model(model, tokenizer, folder, ctx)

    from kinject.api import TrainingSpec

    base = dict(training=TrainingSpec(), seed=0)  # model_construct: nothing else is read here
    plain_cfg, saving = FinetuneConfig.model_construct(**base), Saving.model_construct(**base)
    assert _saves_what_it_trains(plain_cfg) and not _saves_what_it_trains(saving)
    peft = plain_cfg.model_copy(update={"training": TrainingSpec(peft={"method": "lora"})})
    assert not _saves_what_it_trains(peft)


def test_only_the_current_best_weights_are_kept_while_training(tmp_path, tiny_model):
    """A rising dev curve must not leave one weights file per improvement on the disk (a K=20 MoP model: ~100 MB
    each) until the next checkpoint."""
    from kinject.api import TrainingSpec
    from kinject.training import train

    rows, collator = features(tiny_model)
    work = tmp_path / "work"
    files = []

    def scorer(model):
        files.append(sorted(p.name for p in work.glob("best-step-*")))
        return {"accuracy": 0.1 * len(files)}  # better every time

    training = TrainingSpec(epochs=4, batch_size=8, learning_rate=1e-2, warmup_ratio=0, save_steps=100)
    train(tiny_classifier(tiny_model), rows, collator, training, work, 0, scorer=scorer, selection_metric="accuracy")
    assert files == [[], ["best-step-4.safetensors"], ["best-step-8.safetensors"], ["best-step-12.safetensors"]]


def test_only_process_zero_writes_the_best_weights(tmp_path, tiny_model):
    """Under DDP every process scores dev and holds the same weights; two writers of one file on a shared disk
    can tear it, so only process 0 writes (the others read it after a barrier at the end of training)."""
    from types import SimpleNamespace

    from kinject.training.selection import DevSelection

    model = tiny_classifier(tiny_model)
    for zero, work in ((False, tmp_path / "rank1"), (True, tmp_path / "rank0")):
        work.mkdir()
        callback = DevSelection(lambda m: {"accuracy": 0.5}, "accuracy", work)
        state = SimpleNamespace(global_step=3, epoch=1.0, is_world_process_zero=zero)
        callback.on_epoch_end(None, state, SimpleNamespace(should_training_stop=False), model=model)
        assert callback.summary()["best_step"] == 3
        assert sorted(p.name for p in work.iterdir()) == ([] if not zero else ["best-step-3.safetensors"])
