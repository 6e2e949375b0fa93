"""Defaults that learn on a new task (kinject.defaults): a small train split chooses the task's alternatives by
cross-validation on it; a dev split too small to rank keeps the last weights; a classifier gets a head rate."""

from __future__ import annotations

import json

import pytest

from helpers import run_kinject as kinject


@pytest.mark.slow
def test_a_small_pair_set_chooses_its_encoder_by_cross_validation_on_train(tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    args = ["run", "finetune", "--task", "biosses", "--set", "task.dataset=hpo", "--model", "tiny", "--set",
            "choose=true", "--set", "training.min_steps=6", "--set", "hooks.knowledge-probe.enabled=false",
            "--cache-dir", str(tmp_path / "cache")]
    capsys.readouterr()
    assert kinject(*args, "-o", str(out)) == 0
    printed = capsys.readouterr().out
    assert "64 examples (< 1000): choosing task.encoder among 2 alternatives by 5-fold" in " ".join(printed.split())
    assert " ".join(printed.split()).count("choice: fold") == 10  # one progress line per fold run
    info = json.loads((out / "run.json").read_text())
    chosen = info["chosen"]
    assert set(chosen["chosen"]) == {"task.encoder"} and len(chosen["scores"]) == 2
    assert chosen["fold_runs"] == 10 and chosen["seconds"] > 0
    assert info["decided_by"]["chosen"] == "kinject.defaults.choose"
    best = max(chosen["scores"], key=lambda s: s["pearson"])["settings"]
    assert chosen["chosen"] == best and info["spec"]["task"]["encoder"] == best["task.encoder"]
    assert info["defaults"]["training.selection"].startswith("last: the dev split has 16 examples, fewer than 32 units")
    # cached: a second run chooses at once, the same way; an explicit setting is never overridden
    assert kinject(*args, "-o", str(tmp_path / "again")) == 0
    assert "cross-validation" in capsys.readouterr().out
    assert json.loads((tmp_path / "again" / "run.json").read_text())["chosen"] == {**chosen, "cached": True}
    assert kinject(*args, "--set", "task.encoder=cross", "-o", str(tmp_path / "mine")) == 0
    assert json.loads((tmp_path / "mine" / "run.json").read_text())["chosen"] is None


def test_rules_fill_what_nobody_set_and_say_why(tmp_path, textcls_dir, tiny_model):
    from kinject.api import build_spec, prepare

    base = {"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "cache_dir": str(tmp_path / "cache")}
    run = prepare(build_spec(base))  # 16 dev examples, a classifier without a recommended head rate
    assert run.spec.training.selection == "last" and "16 examples" in run.defaults["training.selection"]
    assert run.spec.training.head_learning_rate is None  # the head-rate rule is off until checked beyond its tasks
    assert "training.head_learning_rate" not in run.defaults
    ruled = prepare(build_spec({**base, "defaults": {"head_rate": True}}))
    assert ruled.spec.training.head_learning_rate == pytest.approx(1e-2)
    assert "found on ChemProt, DDI and HoC" in ruled.defaults["training.head_learning_rate"]
    mine = prepare(build_spec({**base, "training": {"selection": "best", "head_learning_rate": 1e-3}}))
    assert set(mine.defaults) <= {"training.bf16"} and mine.spec.training.selection == "best"  # bf16: the device's
    assert mine.spec.training.head_learning_rate == 1e-3


def test_an_all_categorical_sweep_space_is_a_grid(tmp_path):
    from kinject.experiments.study import sampler_for
    from kinject.experiments.sweep import load_space

    space_file = tmp_path / "space.yaml"
    space_file.write_text("task.encoder: [cross, bi, bi-frozen]\ntraining.learning_rate: [1.0e-5, 5.0e-5]\n")
    space = load_space(space_file)
    said = []
    import optuna

    sampler = sampler_for(space, 0, said.append)
    assert isinstance(sampler, optuna.samplers.GridSampler) and "a grid of 6 combination(s)" in said[0]
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(len(t.suggest_categorical("task.encoder", ["cross", "bi", "bi-frozen"]))
                                   + t.suggest_categorical("training.learning_rate", [1e-5, 5e-5])), n_trials=6)
    assert len({tuple(sorted(t.params.items())) for t in study.trials}) == 6  # every combination, none twice


def test_folds_are_grouped_stratified_and_key_every_fold_run(tmp_path, textcls_dir, tiny_model):
    """The kernel applies a fold to every task's examples (kinject.splits.fold_of): disjoint, every label in the
    held-out fold; the module that draws folds is in a fold run's key, and in no other run's."""
    from kinject.api import build_spec, plan, prepare

    spec = {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "cache_dir": str(tmp_path / "cache"), "recommended": False, "choose": False}
    folded = prepare(build_spec({**spec, "fold": "1/4/3"}))
    whole = prepare(build_spec(spec))
    train = whole.task.examples("train", whole.env)
    dev, rest = folded.task.examples("dev", folded.env), folded.task.examples("train", folded.env)
    assert len(dev) + len(rest) == len(train) and not {e["id"] for e in dev} & {e["id"] for e in rest}
    assert {e["label"] for e in dev} == {e["label"] for e in train}  # stratified: every label in the held-out fold
    assert "fold_of" in str(plan(folded)[0].record["code"])
    assert "fold_of" not in str(plan(whole)[0].record["code"])
