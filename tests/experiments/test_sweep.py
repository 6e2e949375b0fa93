"""`kinject sweep`: space validation, storage errors, pruning from eval hooks, resume, best.yaml re-runs cached."""

from __future__ import annotations

import json

import optuna
import pytest

from helpers import one_line_error, run_kinject as kinject

STUDY = "kinject-finetune-textcls"


def sweep_args(data, out, space, trials: int, *extra: str) -> list[str]:
    return ["sweep", "finetune", "--task", "textcls", "--model", "tiny", "--space", str(space), "--trials",
            str(trials), "-o", str(out), "--set", f"task.path={data}", "--set", "training.max_steps=4",
            "--set", "training.batch_size=8", "--no-folds", *extra]  # 48 train examples: CV is tests/evidence/test_cv_sweep.py


@pytest.mark.parametrize("space, needles", [
    ("training.learnin_rate: {low: 1e-5, high: 1e-3}", ["training.learnin_rate", "unknown field", "learning_rate"]),
    ("strategy.variant: [hard, soft]", ["strategy.variant", "unknown field"]),
    ("task.max_eval_queries: [5]", ["task.max_eval_queries", "unknown field"]),
    ("training.learning_rate: {low: 1e-3, high: 1e-5}", ["low (0.001) must be below high (1e-05)"]),
    ("training.learning_rate: {low: 0, high: 1e-3, log: true}", ["log-scale range needs low > 0"]),
    ("training.learning_rate: {low: 0.0, high: 1e-3}", ["training.learning_rate = 0.0", "greater than 0"]),
    ("training.batch_size: []", ["empty list of choices"]),
    ("training.epochs: {low: 1}", ["expected {low, high[, log, step]}"]),
])
def test_bad_space_is_one_line_before_any_trial(tmp_path, textcls_dir, tiny_model, capsys, space, needles):
    path = tmp_path / "space.yaml"
    path.write_text(space + "\n")
    error = one_line_error(capsys, sweep_args(textcls_dir, tmp_path / "out", path, 2))
    assert str(path) in error
    for needle in needles:
        assert needle in error, error
    assert not (tmp_path / "out").exists()


def test_bad_storage_metric_and_split_are_one_line(tmp_path, textcls_dir, tiny_model, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("training.learning_rate: {low: 1e-4, high: 1e-2, log: true}\n")
    out = tmp_path / "out"
    for url in (f"sqlite:///{tmp_path}/missing/dir/study.db", "postgresql://nobody@127.0.0.1:9/none", "nonsense"):
        assert "cannot open the study storage" in one_line_error(
            capsys, sweep_args(textcls_dir, out, space, 2, "--storage", url))
    assert "--metric bleu: task 'textcls' reports accuracy, f1_macro" in one_line_error(
        capsys, sweep_args(textcls_dir, out, space, 2, "--metric", "bleu"))
    assert "--split dev" in one_line_error(capsys, sweep_args(textcls_dir, out, space, 2, "--set",
                                                              "training.eval_splits=[test]"))
    assert not out.exists()


def test_pruning_reporter_reports_eval_metrics_and_prunes(tmp_path):
    from kinject.experiments.sweep import PruningReporter
    from kinject.hooks import plugin_manager

    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    hook = plugin_manager().hook

    def trial_with(values: dict[tuple[str, int], float]):
        trial = study.ask()
        reporter = PruningReporter(trial, "mrr")
        plugin_manager().register(reporter)
        try:
            hook.kinject_metrics_logged(stage="finetune", metrics={"loss": 1.0}, step=1)  # no eval metric
            hook.kinject_metrics_logged(stage="evaluate", metrics={"eval/mrr": 0.0}, step=None)  # final scores
            for (stage, step), value in values.items():
                hook.kinject_metrics_logged(stage=stage, metrics={"eval/mrr": value, "eval/recall@1": 0.0}, step=step)
        finally:
            plugin_manager().unregister(reporter)
        return trial

    first = trial_with({("intermediate", 2): 0.5, ("intermediate", 4): 0.6, ("finetune", 2): 0.8})
    assert study.trials[0].intermediate_values == {2: 0.5, 4: 0.6, 6: 0.8}  # a later stage continues the steps
    study.tell(first, 0.8)
    with pytest.raises(optuna.TrialPruned, match="eval/mrr = 0.1 at step 2"):
        trial_with({("intermediate", 2): 0.1})
    assert trial_with({("intermediate", 2): 0.7}).number == 2  # at or above the median: goes on


def _has_eval_steps() -> bool:
    from kinject.spec import TrainingSpec

    return "eval_steps" in TrainingSpec.model_fields


@pytest.mark.slow
def test_sweep_resumes_an_interrupted_study_and_best_yaml_hits_the_cache(tmp_path, textcls_dir, tiny_model,
                                                                          monkeypatch, capsys):
    from kinject import api as engine  # what the sweep calls

    space = tmp_path / "space.yaml"
    space.write_text("training.learning_rate: {low: 1e-4, high: 1e-2, log: true}\ntraining.warmup_ratio: [0.0, 0.1]\n")
    out = tmp_path / "sweep"
    extra = ["--set", "training.eval_steps=2"] if _has_eval_steps() else []
    real, calls = engine.execute, []

    def interrupted(run, output):
        calls.append(output)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the machine is stopped in the middle of trial 1
        return real(run, output)

    monkeypatch.setattr(engine, "execute", interrupted)
    assert kinject(*sweep_args(textcls_dir, out, space, 2, *extra)) != 0
    monkeypatch.setattr(engine, "execute", real)
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{out / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]

    assert kinject(*sweep_args(textcls_dir, out, space, 2, *extra)) == 0  # continues: retries trial 1
    trials = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{out / 'study.db'}").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert trials[2].params == trials[1].params and trials[2].user_attrs["retry_of"] == 1

    assert kinject(*sweep_args(textcls_dir, out, space, 3, *extra)) == 0  # to the requested total
    trials = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{out / 'study.db'}").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert all((out / f"trial-{n}" / "predictions" / "dev.jsonl").exists() for n in (0, 2, 3))
    if extra:  # the training stage's dev scores reached optuna (what pruning decides on)
        assert sorted(trials[0].intermediate_values) == [2, 4]
    assert kinject(*sweep_args(textcls_dir, out, space, 3, *extra)) == 0  # nothing left to do
    assert len(optuna.load_study(study_name=STUDY, storage=f"sqlite:///{out / 'study.db'}").trials) == 4

    best = out / "best.yaml"
    assert best.exists()
    rerun = tmp_path / "best-run"
    assert kinject("run", "finetune", "--config", str(best), "-o", str(rerun)) == 0
    info = json.loads((rerun / "run.json").read_text())
    assert all(stage["cached"] for stage in info["stages"])
    best_trial = max((t for t in trials if t.value is not None), key=lambda t: t.value)
    assert info["spec"]["training"]["learning_rate"] == pytest.approx(best_trial.params["training.learning_rate"])
