""""Not learned" against the best input-free predictor for the metric, with a margin from its interval: the
all-positive predictor for positive-class F1 with minority positives, a constant score for a score metric (never the
model's own scores), a random ranking for retrieval; a method arm's collapsed seeds counted as harm, a baseline's
voiding the comparison."""

from __future__ import annotations

import numpy as np
import pytest

from evidence_runs import classification_records


def _binary(n: int = 500, positives: int = 200) -> list[dict]:
    """``positives`` of ``n`` examples are '1' (a minority), the rest '0'."""
    return [{"id": str(i), "gold": "1" if i < positives else "0"} for i in range(n)]


def _f1_binary():
    from kinject.evidence.metrics import MetricDef

    return MetricDef("f1_binary", "f1", {"average": "binary", "positive": ["1"], "name": None}, ("0", "1"))


def test_a_near_constant_positive_class_predictor_with_minority_positives_is_flagged():
    """All '1' but one true negative: F1 0.5722 against the all-positive predictor's 0.5714 (the majority class
    '0' scores 0, so a majority-class baseline would pass it)."""
    from kinject.evidence.learned import check

    records = [{**r, "pred": "1" if i != 499 else "0"} for i, r in enumerate(_binary())]
    found = check(records, _f1_binary())
    assert found is not None and not found["constant"]
    assert found["baseline_name"] == "the constant prediction '1'" and abs(found["baseline"] - 400 / 700) < 1e-12
    assert found["score"] > found["baseline"] and found["margin"][0] <= 0 < found["margin"][1]
    assert "does not beat the best input-free predictor" in found["reason"]
    learned = [{**r, "pred": r["gold"] if i % 10 else ("0" if r["gold"] == "1" else "1")}
               for i, r in enumerate(_binary())]  # 90% right
    assert check(learned, _f1_binary()) is None


def test_micro_f1_over_minority_positive_classes_is_checked_against_the_best_constant():
    from kinject.evidence.learned import check
    from kinject.evidence.metrics import MetricDef

    metric = MetricDef("f1_micro", "f1", {"average": "micro", "positive": ["a", "b"], "name": None}, ())
    gold = ["a"] * 60 + ["b"] * 40 + ["false"] * 150
    records = [{"id": str(i), "gold": g, "pred": "a" if i % 50 else "b"} for i, g in enumerate(gold)]
    found = check(records, metric)
    assert found["baseline_name"] == "the constant prediction 'a'" and found["baseline"] > 0.3


def _brier_evaluator():
    """A third party's Brier score (lower is better), registered in-process: the mean squared error of the softmax
    of ``scores`` against the one-hot gold, from per-example sums."""
    from kinject.api import Evaluator, PluginConfig

    class BrierScore(Evaluator):
        class Config(PluginConfig):
            pass

        def metric_names(self):
            return ["brier"]

        def greater_is_better(self, metric):
            return False

        def statistics(self, references, predictions, scores=None, labels=None, **kwargs):
            scores = np.asarray(scores, dtype=float)
            p = np.exp(scores - scores.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            onehot = np.array([[str(r) == str(label) for label in labels] for r in references], dtype=float)
            return {"squared": ((p - onehot) ** 2).sum(1), "examples": np.ones(len(references))}

        def from_statistics(self, sums, n):
            return {"brier": sums["squared"] / np.maximum(sums["examples"], 1)}

    return BrierScore


@pytest.fixture
def brier():
    from kinject.api import registry
    from kinject.evidence.metrics import MetricDef

    evaluators = registry("evaluators")
    evaluators.register("brier-test", _brier_evaluator())
    yield MetricDef("brier", "brier-test", {}, ("bio", "other"))
    evaluators._extra.pop("brier-test", None)
    evaluators.refresh()


def test_a_0958_accuracy_run_under_a_brier_score_is_not_flagged_and_a_constant_score_is(brier):
    """The baseline is a constant score (the gold frequencies), never the run's own scores, so a run that ranks
    and calibrates well passes; one whose scores are the base rate everywhere does not."""
    from kinject.evidence.learned import check

    records = classification_records(500, 479)  # 0.958 accuracy
    for r in records:  # confident where right, unsure where wrong
        right = r["gold"] == r["pred"]
        first = (2.5 if right else 0.3) * (1 if r["pred"] == "bio" else -1)
        r["scores"] = [first, 0.0]
    assert check(records, brier, greater_is_better=False) is None
    flat = [{**r, "scores": [0.0, 0.0]} for r in records]  # the base rate (1/2) everywhere: Brier 0.5
    found = check(flat, brier, greater_is_better=False)
    assert found is not None and abs(found["baseline"] - 0.5) < 1e-6 and abs(found["score"] - 0.5) < 1e-6
    skewed = [{**r, "gold": "bio" if i % 4 else "other"} for i, r in enumerate(flat)]  # 3/4 bio: 0.5 is worse
    found = check(skewed, brier, greater_is_better=False)
    assert found["baseline_name"] == "the constant prediction 'bio' with the gold frequencies as logits"
    assert abs(found["baseline"] - 2 * 0.75 * 0.25) < 1e-6 and found["score"] > found["baseline"]


def test_ece_is_not_checked_against_a_constant_that_calibrates_perfectly():
    """A constant at the base rate has ECE 0, as good as any model: ECE says nothing about learning."""
    from kinject.evidence.learned import check
    from kinject.evidence.metrics import MetricDef

    records = [{**r, "scores": [0.3 + 0.01 * (i % 7), 0.0]} for i, r in enumerate(classification_records(200, 150))]
    assert check(records, MetricDef("ece", "ece", {"bins": 10, "inputs": "logits", "name": "ece"},
                                    ("bio", "other")), greater_is_better=False) is None


def _retrieval(queries: int, candidates: int, rng, good: bool) -> list[dict]:
    out = []
    for q in range(queries):
        ids = [f"q{q}-c{j}" for j in range(candidates)]
        scores = rng.random(candidates)
        if good:
            scores[0] += 1.0  # the relevant one first
        order = np.argsort(-scores)
        out.append({"id": f"q{q}", "gold": [ids[0]], "pred": ids[order[0]], "ranking": [ids[j] for j in order],
                    "scores": scores[order].tolist()})
    return out


def test_a_chance_level_retrieval_run_is_flagged_against_a_random_ranking():
    """20 candidates, one relevant, scores at random: MRR about 0.18, flagged; a ranker that puts the relevant
    one first is not."""
    from kinject.evidence.learned import check
    from kinject.evidence.metrics import define

    rng = np.random.default_rng(3)
    mrr = define("mrr")
    chance = _retrieval(200, 20, rng, good=False)
    found = check(chance, mrr)
    assert found is not None and not found["constant"] and 0.1 < found["score"] < 0.26
    assert found["baseline_name"] == "a random ranking of each query's candidates"
    assert abs(found["baseline"] - sum(1 / r for r in range(1, 21)) / 20) < 0.02  # the expected MRR of a random order
    assert check(_retrieval(200, 20, rng, good=True), mrr) is None
    assert check(_retrieval(200, 20, rng, good=True), define("recall@1")) is None


def test_a_collapsed_method_seed_counts_against_the_method_and_a_collapsed_baseline_voids_it():
    from kinject.evidence.comparison import pair
    from kinject.evidence.metrics import define

    constant = [{**r, "pred": "other", "scores": [0.1, 0.2]} for r in classification_records(200, 0)]
    base = {s: classification_records(200, 150 + s % 3, offset=s % 5) for s in range(42, 47)}
    arm = {s: classification_records(200, 160 + s % 3, offset=s % 5) for s in range(42, 47)}
    arm[43] = arm[45] = constant
    _, row = pair(define("accuracy"), base, [arm], n_resamples=500)
    assert row["collapsed"] == "2 of 5 seeds collapsed" and row["not_learned"]["seeds"] == [43, 45]
    assert row["difference"] < 0 and row["verdict"] in ("loss", "no evidence")  # the collapses are harm
    assert not row["verdict"].startswith("not learned")

    from kinject.evidence.tables import shown_verdict

    assert shown_verdict(row) == f"{row['verdict']}; 2 of 5 seeds collapsed"
    _, void = pair(define("accuracy"), arm, [base], n_resamples=500)
    assert void["verdict"] == "not learned" and "collapsed" not in void


def test_auroc_is_checked_against_a_constant_score_not_the_runs_own():
    """Random scores sit at AUROC 0.5, the constant score's, and are flagged; scores that rank are not."""
    from kinject.evidence.learned import check
    from kinject.evidence.metrics import define

    metric, rng = define("auroc_macro", (), ("bio", "other")), np.random.default_rng(0)
    records = classification_records(400, 300)
    ranking = [{**r, "scores": [(1.0 if r["pred"] == "bio" else -1.0) + rng.normal(0, 0.3), 0.0]} for r in records]
    assert check(ranking, metric) is None
    found = check([{**r, "scores": [rng.normal(), 0.0]} for r in records], metric)
    assert found is not None and found["baseline"] == pytest.approx(0.5) and found["margin"][0] < 0 < found["margin"][1]
