"""`kinject compare` and compare_prediction_files: paired differences, intervals, seed tests, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from evidence_runs import accuracy, classification_records, make_run
from helpers import run_kinject as kinject


def repeats(folder, correct_by_seed: dict[int, int], n: int = 60):
    for seed, correct in correct_by_seed.items():
        records = classification_records(n, correct)
        make_run(folder / f"seed-{seed}", records, seed=seed, metrics={"test": {"accuracy": accuracy(records)}})
    return folder


def compare_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert kinject("compare", *args, "--json") == 0
    return json.loads(capsys.readouterr().out)


def test_repeats_pair_by_seed_with_interval_and_seed_tests(tmp_path, capsys):
    base = repeats(tmp_path / "base", {1: 30, 2: 32, 3: 29})
    other = repeats(tmp_path / "other", {3: 41, 1: 40, 2: 45})
    out = compare_json(capsys, str(base), str(other), "--metric", "accuracy")
    assert out["task"] == "textcls" and out["split"] == "test" and out["examples"] == 60 and not out["warnings"]
    first, second = out["metrics"][0]["rows"]
    assert first["run"] == "base" and first["path"] == str(base) and first["per_seed"] == {"1": 0.5, "2": 32 / 60, "3": 29 / 60}
    assert second["per_seed"] == {"1": 40 / 60, "2": 45 / 60, "3": 41 / 60}
    assert second["difference"] == pytest.approx((40 + 45 + 41 - 30 - 32 - 29) / 180)
    assert 0 < second["ci_low"] < second["difference"] < second["ci_high"]  # every example is right as often or more
    tests = second["seed_tests"]
    expected = stats.ttest_rel([40 / 60, 45 / 60, 41 / 60], [0.5, 32 / 60, 29 / 60])
    assert tests["seeds"] == [1, 2, 3] and tests["t_pvalue"] == pytest.approx(expected.pvalue)
    assert tests["wilcoxon_pvalue"] == pytest.approx(0.25)  # exact, 3 positive differences: 2 / 2**3



def test_interval_switch_chooses_the_interval_the_verdict_reads(tmp_path, capsys):
    """--interval picks the kind behind ci_low/ci_high and the verdict (default seeds-t+examples); an unknown kind is
    one line naming the kinds."""
    base = repeats(tmp_path / "base", {1: 30, 2: 32, 3: 29})
    other = repeats(tmp_path / "other", {3: 41, 1: 40, 2: 45})
    default = compare_json(capsys, str(base), str(other), "--metric", "accuracy")["metrics"][0]["rows"][1]
    examples = compare_json(capsys, str(base), str(other), "--metric", "accuracy", "--interval", "examples")
    row = examples["metrics"][0]["rows"][1]
    assert default["interval_kind"] == "seeds-t+examples" and row["interval_kind"] == "examples"
    assert [row["ci_low"], row["ci_high"]] == pytest.approx(row["intervals"]["examples"])
    assert [default["ci_low"], default["ci_high"]] == pytest.approx(default["intervals"]["seeds-t+examples"])
    assert [row["ci_low"], row["ci_high"]] != pytest.approx([default["ci_low"], default["ci_high"]])
    line = one_line_error(capsys, str(base), str(other), "--interval", "bayes")
    assert "--interval bayes: expected one of seeds-t+examples, two-way" in line

@pytest.mark.slow
def test_runs_with_more_seeds_pair_over_the_shared_ones(tmp_path, capsys):
    base = repeats(tmp_path / "base", {1: 30, 2: 32, 3: 29, 4: 50, 5: 50})  # seeds 4-5 have no partner
    other = repeats(tmp_path / "other", {1: 40, 2: 45, 3: 41})
    out = compare_json(capsys, str(base), str(other), "--metric", "accuracy")
    first, second = out["metrics"][0]["rows"]
    assert first["value"] == pytest.approx((30 + 32 + 29 + 50 + 50) / 300) and second["paired_seeds"] == [1, 2, 3]
    assert second["value"] == pytest.approx((40 + 45 + 41) / 180)
    assert second["difference"] == pytest.approx((40 + 45 + 41 - 30 - 32 - 29) / 180)  # not vs all 5 seeds
    assert second["seed_tests"]["seeds"] == [1, 2, 3]
    capsys.readouterr()
    assert kinject("compare", str(base), str(other)) == 0
    assert "3 (3 paired)" in capsys.readouterr().out
    apart = repeats(tmp_path / "apart", {8: 40, 9: 41})
    assert "no seed in common" in one_line_error(capsys, str(base), str(apart))


def test_table_default_metric_baseline_and_glob(tmp_path, capsys):
    repeats(tmp_path / "run-a", {1: 30})
    repeats(tmp_path / "run-b", {1: 40})
    capsys.readouterr()
    assert kinject("compare", str(tmp_path / "run-*"), "--baseline", str(tmp_path / "run-b")) == 0
    shown = capsys.readouterr().out
    assert "accuracy" in shown and "baseline" in shown and "-0.1667" in shown  # textcls' primary metric


def test_metrics_json_disagreeing_with_predictions_is_reported(tmp_path, capsys):
    make_run(tmp_path / "a", classification_records(20, 10), metrics={"test": {"accuracy": 0.9}})
    make_run(tmp_path / "b", classification_records(20, 12), metrics={"test": {"accuracy": 0.6}})
    out = compare_json(capsys, str(tmp_path / "a"), str(tmp_path / "b"))
    assert len(out["warnings"]) == 1 and "metrics.json says 0.9" in out["warnings"][0]


def one_line_error(capsys, *args) -> str:
    capsys.readouterr()
    assert kinject("compare", *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


@pytest.mark.slow
def test_refusals_are_one_line_errors(tmp_path, capsys):
    records = classification_records(20, 10)
    a = make_run(tmp_path / "a", records)
    capr = make_run(tmp_path / "capr", records, task={"name": "capr"})
    assert "different tasks" in one_line_error(capsys, str(a), str(capr))
    fewer = make_run(tmp_path / "fewer", records[:-1])
    error = one_line_error(capsys, str(a), str(fewer))
    assert "different examples" in error and "'test-19'" in error
    error = one_line_error(capsys, str(a), str(fewer), "--split", "dev")
    assert "no predictions for split 'dev' (it has test)" in error
    old = make_run(tmp_path / "old", records)
    (old / "predictions" / "test.jsonl").unlink()
    assert "re-run it" in one_line_error(capsys, str(a), str(old))
    assert "not a run directory" in one_line_error(capsys, str(a), str(tmp_path / "nothing"))
    assert "at least two runs" in one_line_error(capsys, str(a))
    same = make_run(tmp_path / "same", records)
    assert "cannot be recomputed" in one_line_error(capsys, str(a), str(same), "--metric", "bleu")


def test_compare_prediction_files_uses_the_tasks_metric_options(tmp_path):
    from sklearn.metrics import f1_score

    from kinject.evidence.comparison import compare_prediction_files
    from kinject.tasks.relation import ChemProtTask

    rng = np.random.default_rng(0)
    labels = ChemProtTask.label_set
    gold = rng.choice(labels, 80)
    preds = [np.where(rng.random(80) < q, gold, rng.choice(labels, 80)) for q in (0.4, 0.7)]
    files = []
    for name, pred in zip("ab", preds):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"id": str(i), "gold": g, "pred": p}) + "\n"
                                for i, (g, p) in enumerate(zip(gold, pred))))
        files.append(path)
    task = ChemProtTask()
    out = compare_prediction_files(files[0], files[1], "f1_micro", task_kind=task.kind, task=task)
    positive = [x for x in labels if x != task.negative]
    scores = [f1_score(gold, pred, labels=positive, average="micro") for pred in preds]
    assert out["baseline"] == pytest.approx(scores[0]) and out["other"] == pytest.approx(scores[1])
    assert out["difference"] == pytest.approx(scores[1] - scores[0]) and out["n"] == 80
    assert out["ci_low"] < out["difference"] < out["ci_high"] and out["confidence"] == 0.95
    plain = compare_prediction_files(files[0], files[1], "f1_micro")  # no task: every class, micro = accuracy
    assert plain["baseline"] == pytest.approx(float(np.mean(preds[0] == gold)))


@pytest.mark.slow
def test_end_to_end_runs_write_predictions_that_compare_pairs(tmp_path, textcls_dir, tiny_model, capsys):
    common = ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
              "--set", "training.batch_size=8", "--set", "training.max_steps=3", "--repeats", "2"]
    assert kinject(*common, "-o", str(tmp_path / "a")) == 0
    assert kinject(*common, "--set", "training.learning_rate=1e-3", "-o", str(tmp_path / "b")) == 0
    lines = (tmp_path / "a" / "seed-42" / "predictions" / "test.jsonl").read_text().splitlines()
    assert len(lines) == 16 and {"id", "gold", "pred", "scores"} <= set(json.loads(lines[0]))
    out = compare_json(capsys, str(tmp_path / "a"), str(tmp_path / "b"), "-m", "accuracy", "-m", "f1_macro")
    assert not out["warnings"]  # recomputed from predictions == metrics.json, for every seed
    row = out["metrics"][0]["rows"][1]
    assert row["seeds"] == [42, 43] and row["seed_tests"]["seeds"] == [42, 43]
    assert row["ci_low"] <= row["difference"] <= row["ci_high"]
