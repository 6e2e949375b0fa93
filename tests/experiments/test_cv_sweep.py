"""`kinject sweep --folds K`: settings chosen by K-fold cross-validation on the train split (automatic on small
train splits); folds partition train, test is never scored, best.yaml is the plain spec, repeated trials are cached."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from helpers import one_line_error, run_kinject as kinject

STUDY = "kinject-finetune-textcls"


def sweep_args(data, out, space, trials: int, *extra: str) -> list[str]:
    return ["sweep", "finetune", "--task", "textcls", "--model", "tiny", "--space", str(space), "--trials",
            str(trials), "-o", str(out), "--set", f"task.path={data}", "--set", "training.max_steps=2",
            "--set", "training.batch_size=8", *extra]


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("training.learning_rate: [1.0e-3, 1.0e-2]\n")
    return path


def test_fold_spec_scores_only_the_fold_and_trains_the_whole_budget():
    from kinject.experiments.sweep import fold_spec

    base = {"task": {"name": "textcls"}, "training": {"selection": "best", "patience": 2, "eval_splits": ["test"]}}
    data = fold_spec(base, 1, 4)
    assert data["fold"] == "1/4" and data["hooks"]["knowledge-probe"]["enabled"] is False
    assert data["training"] == {"selection": "last", "patience": None, "eval_splits": ["dev"], "select_every": None}
    assert base["training"]["selection"] == "best" and "fold" not in base  # the plain spec is left alone


def test_bad_folds_are_one_line_errors(tmp_path, textcls_dir, tiny_model, capsys, space):
    out = tmp_path / "out"
    assert "choose one" in one_line_error(capsys, sweep_args(textcls_dir, out, space, 1, "--folds", "3",
                                                             "--no-folds"))
    assert "--split test: with cross-validation" in one_line_error(
        capsys, sweep_args(textcls_dir, out, space, 1, "--folds", "3", "--split", "test"))
    assert "--folds 60: the train split cannot be shared out: 48 example(s) in 48 unit(s)" in one_line_error(
        capsys, sweep_args(textcls_dir, out, space, 1, "--folds", "60"))
    assert "the spec already sets fold=0/2" in one_line_error(
        capsys, sweep_args(textcls_dir, out, space, 1, "--folds", "3", "--set", "fold=0/2"))
    assert not out.exists()


def test_small_train_splits_choose_folds_automatically(tmp_path, textcls_dir, tiny_model, monkeypatch):
    from kinject import api
    from kinject.experiments import study

    run = api.prepare(api.build_spec({"task": {"name": "textcls", "path": str(textcls_dir)}, "model": {"name": "tiny"}}))
    said: list[str] = []
    assert study.choose_folds(run, None, "dev", said.append) == 5
    assert "48 examples (< 1000): each trial is scored by 5-fold cross-validation" in said[0]
    assert "test is never scored" in said[0]
    assert study.choose_folds(run, 0, "dev", said.append) == 0  # --no-folds
    assert study.choose_folds(run, None, "test", said.append) == 0  # automatic only in place of scoring dev
    monkeypatch.setattr(study, "AUTO_FOLDS_BELOW", 48)
    said.clear()
    assert study.choose_folds(run, None, "dev", said.append) == 0 and not said  # large enough: the dev split


@pytest.mark.slow
def test_cv_sweep_partitions_train_never_scores_test_and_repeats_from_the_cache(tmp_path, textcls_dir, tiny_model,
                                                                                 space, capsys):
    out = tmp_path / "sweep"
    assert kinject(*sweep_args(textcls_dir, out, space, 2, "--folds", "3")) == 0
    shown = capsys.readouterr().out
    assert "mean dev accuracy of 3 train folds" in shown and "trains on the whole train split" in shown
    trials = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{out / 'study.db'}").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    train_ids = {f"train-{n}" for n in range(1, 49)}
    for trial in trials:
        folds = [out / f"trial-{trial.number}" / f"fold-{i}" for i in range(3)]
        held_out = [{json.loads(line)["id"] for line in open(f / "predictions" / "dev.jsonl")} for f in folds]
        assert set().union(*held_out) == train_ids and sum(map(len, held_out)) == 48  # the folds partition train
        assert not any((f / "predictions" / "test.jsonl").exists() for f in folds)  # test never scored
        scores = [json.loads((f / "metrics.json").read_text())["dev"]["accuracy"] for f in folds]
        assert trial.user_attrs["fold_scores"] == pytest.approx(scores)
        assert trial.value == pytest.approx(sum(scores) / 3)
        records = [json.loads((f / "run.json").read_text()) for f in folds]
        assert [r["spec"]["fold"] for r in records] == ["0/3", "1/3", "2/3"]
        keys = {r["stages"][0]["key"] for r in records}
        assert len(keys) == 3  # no training stage shared between folds
        assert not (out / f"trial-{trial.number}" / "predictions").exists()

    best = yaml.safe_load((out / "best.yaml").read_text())
    assert "fold" not in best and "eval_splits" not in best.get("training", {})  # the plain spec: all of train
    assert "the mean of 3 folds" in (out / "best.yaml").read_text().splitlines()[0]

    again = tmp_path / "again"  # a new study proposing the same settings: every fold run comes from the cache
    assert kinject(*sweep_args(textcls_dir, again, space, 1, "--folds", "3")) == 0
    for i in range(3):
        stages = json.loads((again / "trial-0" / f"fold-{i}" / "run.json").read_text())["stages"]
        assert all(stage["cached"] for stage in stages), stages

    capsys.readouterr()
    assert kinject(*sweep_args(textcls_dir, out, space, 3, "--no-folds")) == 2  # one study, one way of scoring
    assert "scores its trials by 3-fold cross-validation" in capsys.readouterr().err
