"""The interval that carries seed-to-seed variance (kinject.evidence.bootstrap), the verdict it gives, the
metric's direction, and `kinject compare --json`'s fields."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evidence_runs import classification_records, make_run
from helpers import run_kinject as kinject


def _accuracy_def():
    from kinject.evidence.metrics import define

    return define("accuracy")


def _sets(per_seed_correct: list[int], n: int = 40) -> dict[int, list[dict]]:
    """seed -> records: the first ``correct`` of ``n`` examples right."""
    return {42 + i: classification_records(n, c) for i, c in enumerate(per_seed_correct)}


def test_seeds_that_disagree_put_zero_in_the_interval_the_example_interval_excludes():
    """The arm's seeds score 1, 0, 1 (every example right, none, every) against 0, 0, 0: the examples alone say
    'gain', the seeds do not."""
    from kinject.evidence.comparison import pair

    base, arm = _sets([0, 0, 0]), _sets([40, 0, 40])
    _, row = pair(_accuracy_def(), base, [arm], n_resamples=2000, learned=False)  # the intervals, not the flags
    assert abs(row["difference"] - 2 / 3) < 1e-9
    assert row["ci_low"] <= 0 <= row["ci_high"] and row["verdict"] == "no evidence"
    assert row["ci_low_examples"] > 0.5  # conditional on these models: every resample gives 2/3
    assert row["interval"] == "seeds (t) × examples" and row["seeds_paired"] == 3
    assert all(low <= 0 <= high for kind, (low, high) in row["intervals"].items() if kind != "examples")


def test_seeds_that_agree_exactly_give_the_example_interval_and_disagreeing_seeds_widen_it():
    from kinject.evidence.comparison import pair

    same_base, same_arm = _sets([20, 20, 20]), _sets([26, 26, 26])
    _, row = pair(_accuracy_def(), same_base, [same_arm], n_resamples=1000, seed=3)
    assert (row["ci_low"], row["ci_high"]) == (row["ci_low_examples"], row["ci_high_examples"])
    # the same mean difference (+0.15), but the seeds disagree: the two-way interval is wider
    _, spread = pair(_accuracy_def(), same_base, [_sets([20, 32, 26])], n_resamples=1000, seed=3)
    assert abs(spread["difference"] - row["difference"]) < 1e-9
    assert spread["ci_high"] - spread["ci_low"] > row["ci_high"] - row["ci_low"]
    assert spread["ci_high_examples"] - spread["ci_low_examples"] < spread["ci_high"] - spread["ci_low"]


def test_one_seed_gives_the_example_interval_and_groups_are_resampled_as_units():
    from kinject.evidence.comparison import pair

    base = {42: classification_records(40, 10)}
    arm = {42: classification_records(40, 30)}
    _, row = pair(_accuracy_def(), base, [arm], n_resamples=500, learned=False)
    assert row["interval"] == "examples only" and (row["ci_low"], row["ci_high"]) == (row["ci_low_examples"],
                                                                                      row["ci_high_examples"])
    assert row["ci_low"] > 0 and row["verdict"] == "1 seed: no verdict"  # one seed never gives a gain
    for side in (base, arm):  # the two pairs of one unit (e.g. an hpo-isa child term) go together
        for i, record in enumerate(side[42]):
            record["group"] = f"child-{i // 2}"
    _, grouped = pair(_accuracy_def(), base, [arm], n_resamples=500, learned=False)
    assert grouped["units"] == 20 and row["units"] == 40


def test_the_verdict_follows_the_metric_direction():
    from kinject.evidence.bootstrap import verdict
    from kinject.api import MetricRef

    assert verdict(0.01, 0.05) == "gain" and verdict(-0.05, -0.01) == "loss" and verdict(-0.01, 0.02) == "no evidence"
    assert verdict(-0.05, -0.01, greater_is_better=False) == "gain"  # a lower error
    assert not MetricRef(name="ece").build().greater_is_better("ece")
    assert MetricRef(name="accuracy").build().greater_is_better("accuracy")


def test_dev_selection_keeps_the_lowest_score_of_a_lower_is_better_metric(tmp_path):
    from kinject.training.selection import DevSelection

    scores = iter([0.30, 0.10, 0.20])

    class Model:
        def state_dict(self):
            import torch

            return {"w": torch.zeros(1)}

    callback = DevSelection(lambda model: {"ece": next(scores)}, "ece", tmp_path, greater_is_better=False)

    class State:
        global_step, is_world_process_zero = 0, True

    state = State()
    for step in (1, 2, 3):
        state.global_step = step
        callback.on_epoch_end(None, state, type("C", (), {"should_training_stop": False})(), model=Model())
    summary = callback.summary()
    assert summary["best_step"] == 2 and summary["best_score"] == 0.10 and summary["greater_is_better"] is False


@pytest.mark.slow
def test_compare_json_has_the_seed_inclusive_interval_by_default_and_the_example_one_labelled(tmp_path, capsys):
    for seed, correct in zip((42, 43, 44), (30, 32, 31)):  # a baseline that beats the majority class
        make_run(tmp_path / "base" / f"seed-{seed}", classification_records(40, correct), seed=seed)
    for seed, correct in zip((42, 43, 44), (39, 31, 37)):
        make_run(tmp_path / "arm" / f"seed-{seed}", classification_records(40, correct), seed=seed)
    capsys.readouterr()
    assert kinject("compare", "--json", str(tmp_path / "base"), str(tmp_path / "arm")) == 0
    row = json.loads(capsys.readouterr().out)["metrics"][0]["rows"][1]
    assert row["interval"] == "seeds (t) × examples" and row["verdict"] in ("gain", "no evidence")
    assert row["interval_kind"] == "seeds-t+examples" and set(row["intervals"]) >= {"two-way", "seeds-t", "examples"}
    assert row["ci_high"] - row["ci_low"] > row["ci_high_examples"] - row["ci_low_examples"]
    assert kinject("compare", str(tmp_path / "base"), str(tmp_path / "arm")) == 0
    out = capsys.readouterr().out
    assert "| arm" not in out and "arm" in out and "3 †" in out  # short names; fewer than 5 seeds flagged
    assert "CI (seeds (t) × examples)" in out and "conditional on these trained models" in out


def test_identical_predictions_say_so(tmp_path, capsys):
    make_run(tmp_path / "a", classification_records(20, 18))
    make_run(tmp_path / "b", classification_records(20, 18))
    capsys.readouterr()
    assert kinject("compare", str(tmp_path / "a"), str(tmp_path / "b")) == 0
    assert "identical predictions" in capsys.readouterr().out


def test_two_way_bootstrap_recomputes_non_additive_metrics_per_replicate():
    """AUROC (ranks) is recomputed on the resampled examples of every seed, not summed."""
    from kinject.evidence.bootstrap import two_way_bootstrap
    from kinject.evidence.metrics import MetricDef
    from kinject.evidence.scorers import scorer_for
    from kinject.api import MetricRef

    rng = np.random.default_rng(0)
    gold = ["yes" if i % 2 else "no" for i in range(60)]

    def records(signal: float) -> list[dict]:
        out = []
        for i, g in enumerate(gold):
            s = float(rng.normal(signal * (g == "yes"), 1.0))
            out.append({"id": str(i), "gold": g, "pred": "yes" if s > 0 else "no", "scores": [-s, s]})
        return out

    definition = MetricDef("auroc_macro", "auroc", MetricRef(name="auroc", options={
        "averages": ["macro"], "positive": "yes"}).build().config.model_dump(), ("no", "yes"))
    a_sets, b_sets = [records(0.2) for _ in range(3)], [records(1.5) for _ in range(3)]
    scorer = scorer_for(definition, a_sets + b_sets)
    a = np.stack([scorer.stats(r) for r in a_sets], axis=-1)
    b = np.stack([scorer.stats(r) for r in b_sets], axis=-1)
    result = two_way_bootstrap(scorer, a, b, n_resamples=300)
    assert 0.2 < result.difference < 0.8 and result.low > 0 and result.kind == "two-way"
    assert result.resampled == "seeds × examples, two-way bootstrap"
