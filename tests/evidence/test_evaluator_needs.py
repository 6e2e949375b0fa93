"""An evaluator gets in a comparison what it got in the run: the evaluate stage keeps the scores an evaluator
declares it needs (``Evaluator.needs``), the paired scorer hands them back with the labels, and an evaluator that
fails - or needs what the predictions lack - is one line (a KinjectError), not a traceback."""

from __future__ import annotations

import numpy as np
import pytest

from kinject.api import Evaluator, KinjectError, MetricRef, PluginConfig, registry
from kinject.evidence.metrics import MetricDef
from kinject.evidence.scorers import scorer_for
from kinject.training.prediction import keep_scores

LABELS = ("no", "yes")


class Brier(Evaluator):
    """Macro Brier score of softmax probabilities (lower is better)."""

    needs = ("scores",)

    class Config(PluginConfig):
        pass

    def metric_names(self):
        return ["brier_macro"]

    def compute(self, references, predictions, scores=None, labels=None, **kwargs):
        if scores is None:
            raise ValueError(f"brier needs the logits; got {sorted(kwargs)}")
        s = np.asarray(scores, dtype=float)
        p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
        y = np.array([[r == label for label in labels] for r in references], dtype=float)
        return {"brier_macro": float(((p - y) ** 2).mean())}


class Broken(Brier):
    """Fails on any input."""

    needs = ()

    def metric_names(self):
        return ["broken"]

    def compute(self, references, predictions, **kwargs):
        raise ZeroDivisionError("division by zero\nsecond line")


@pytest.fixture
def evaluators():
    reg = registry("evaluators")
    reg.register("ev-brier", Brier)
    reg.register("ev-broken", Broken)
    yield
    for name in ("ev-brier", "ev-broken"):
        reg._extra.pop(name, None)
        reg._loaded.pop(name, None)


def records(n: int = 40, seed: int = 0, scores: bool = True) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        logits = rng.normal(size=2)
        out.append({"id": str(i), "gold": LABELS[i % 2], "pred": LABELS[int(logits.argmax())],
                    **({"scores": logits.tolist()} if scores else {})})
    return out


def test_the_paired_scorer_hands_the_scores_and_labels_to_a_third_party_metric(evaluators):
    rows = records()
    metric = MetricDef("brier_macro", "ev-brier", {}, LABELS)
    scorer = scorer_for(metric, [rows])
    value = scorer.value(scorer.stats(rows).T[:, None, :])  # (d, seeds, n)
    expected = Brier(Brier.Config()).compute([r["gold"] for r in rows], [r["pred"] for r in rows],
                                             scores=[r["scores"] for r in rows], labels=list(LABELS))
    assert value[0] == pytest.approx(expected["brier_macro"])


def test_predictions_without_the_needed_scores_are_one_line_naming_what_is_missing(evaluators):
    with pytest.raises(KinjectError, match=r"^metric 'brier_macro': evaluator 'ev-brier' needs the records' scores, "
                                           r"which these predictions lack"):
        scorer_for(MetricDef("brier_macro", "ev-brier", {}, LABELS), [records(scores=False)])


def test_an_evaluator_failing_in_a_comparison_is_one_line(evaluators):
    rows = records()
    scorer = scorer_for(MetricDef("broken", "ev-broken", {}, LABELS), [rows])
    with pytest.raises(KinjectError) as failed:
        scorer.value(scorer.stats(rows).T[:, None, :])
    assert str(failed.value) == ("metric 'broken': evaluator 'ev-broken' failed on the predictions: ZeroDivisionError: "
                                 "division by zero")


class _Task:
    def __init__(self, *names: str):
        self.names = names

    def metric_refs(self):
        return [MetricRef(name=name) for name in self.names]


def test_the_evaluate_stage_keeps_the_scores_an_evaluator_needs(evaluators):
    logits = np.array([[0.5], [1.5], [-2.0]])  # e.g. a regression head: its records carry no scores
    plain = [{"id": str(i), "gold": 1.0, "pred": float(v)} for i, v in enumerate(logits[:, 0])]
    kept = keep_scores(_Task("ev-brier"), plain, logits)
    assert [r["scores"] for r in kept] == [[0.5], [1.5], [-2.0]]
    assert keep_scores(_Task("ev-broken"), plain, logits) == plain  # nothing needs them: records as they were
    tokens = np.zeros((3, 7, 5))  # per-token logits are not one row per record: left alone
    assert keep_scores(_Task("ev-brier"), plain, tokens) == plain
