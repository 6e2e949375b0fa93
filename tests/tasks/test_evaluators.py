"""Every registered evaluator against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kinject.tasks.evaluators import UndefinedMetricWarning
from kinject.registry import registry


def evaluator(name: str, **options):
    cls = registry("evaluators").get(name)
    return cls(cls.Config(**options))


def test_entity_f1_counts_exact_entities_only():
    gold = [["B-D", "I-D", "O", "B-D"], ["O", "B-C"]]
    pred = [["B-D", "I-D", "O", "O"], ["O", "B-D"]]  # 1 of 3 gold entities found; 2 predicted
    out = evaluator("entity-f1").compute(gold, pred)
    assert out["entity_precision"] == pytest.approx(1 / 2)
    assert out["entity_recall"] == pytest.approx(1 / 3)
    assert out["entity_f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    # a boundary error is a miss: B-D I-D predicted as B-D B-D gives no match for that entity
    split = evaluator("entity-f1").compute([["B-D", "I-D"]], [["B-D", "B-D"]])
    assert split["entity_f1"] == 0.0
    with pytest.raises(ValueError, match="2 reference tags but 1"):
        evaluator("entity-f1").compute([["O", "O"]], [["O"]])


def test_pico_word_f1_per_element_and_macro():
    gold = [["participants", "participants", None, ("interventions", "participants")]]
    pred = [["participants", None, "interventions", "interventions"]]
    out = evaluator("pico-f1", elements=["participants", "interventions"]).compute(gold, pred)
    assert out["pico_f1_participants"] == pytest.approx(0.5)  # P=1, R=1/3
    assert out["pico_f1_interventions"] == pytest.approx(2 / 3)  # P=1/2, R=1
    assert out["pico_f1"] == pytest.approx((0.5 + 2 / 3) / 2)


def test_pearson_hand_value_and_constant_predictions():
    assert evaluator("pearson").compute([1, 2, 3, 4], [1, 3, 2, 4])["pearson"] == pytest.approx(0.8)
    with pytest.warns(UndefinedMetricWarning, match="constant predictions"):
        assert math.isnan(evaluator("pearson").compute([1, 2, 3], [2, 2, 2])["pearson"])


@pytest.mark.parametrize("name,options,refs,preds,kwargs,why", [
    ("auroc", {}, ["1", "1", "1"], ["1", "1", "1"], {"scores": [0.2, 0.5, 0.9], "labels": ["0", "1"]}, "one class"),
    ("auroc", {}, [["a"], ["a"]], [["a"], ["a"]], {"scores": [[0.9, 0.1], [0.8, 0.3]], "labels": ["a", "b"]},
     "no label has both classes"),
    ("auroc", {}, [], [], {"scores": np.zeros((0, 2)), "labels": ["0", "1"]}, "no references"),
    ("ece", {}, [], [], {"scores": np.zeros((0, 2)), "labels": ["0", "1"]}, "no examples"),
    ("pearson", {}, [1.0], [1.0], {}, "1 pair"),
    ("mrr", {}, [[0, 0]], [[0.1, 0.2]], {}, "no query with a relevant candidate"),
    ("recall-at-k", {"ks": [1]}, [[0, 0]], [[0.1, 0.2]], {}, "no query with a relevant candidate"),
    ("accuracy", {}, [], [], {}, "no examples"),
    ("f1", {}, [], [], {}, "no examples"),
    ("entity-f1", {}, [], [], {}, "no tagged words"),
    ("pico-f1", {}, [[]], [[]], {}, "no words"),
])
def test_undefined_metrics_are_nan_with_a_warning(name, options, refs, preds, kwargs, why):
    with pytest.warns(UndefinedMetricWarning, match=why):
        out = evaluator(name, **options).compute(refs, preds, **kwargs)
    values = {k: v for k, v in out.items() if not k.endswith(("_skipped",))}
    assert values and all(math.isnan(v) for v in values.values()), out  # never 0.0


def test_auroc_binary_from_one_or_two_score_columns():
    refs = ["0", "0", "1", "1"]
    one = np.array([0.1, 0.4, 0.35, 0.8])
    out = evaluator("auroc").compute(refs, refs, scores=one, labels=["0", "1"])
    assert out["auroc_macro"] == pytest.approx(0.75) and out["auroc_weighted"] == pytest.approx(0.75)
    two = np.stack([np.zeros(4), one], axis=1)
    assert evaluator("auroc").compute(refs, refs, scores=two, labels=["0", "1"])["auroc_macro"] == pytest.approx(0.75)


def test_auroc_multilabel_macro_weighted_and_skipped_labels():
    refs = [["a"], ["b"], ["a", "b"], ["a"]]
    scores = np.array([[0.9, 0.3, 0.5], [0.2, 0.8, 0.5], [0.6, 0.2, 0.5], [0.1, 0.4, 0.5]])
    out = evaluator("auroc").compute(refs, refs, scores=scores, labels=["a", "b", "c"])
    # a: positives .9 .6 .1 vs negative .2 -> 2/3; b: positives .8 .2 vs negatives .3 .4 -> 1/2; c: no positive
    assert out["auroc_macro"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert out["auroc_weighted"] == pytest.approx((3 * 2 / 3 + 2 * 1 / 2) / 5)
    assert out["auroc_skipped"] == 1.0


def test_recall_at_k_and_mrr_nested_and_flat_agree():
    flags = [[0, 1, 0], [1, 0, 0, 1], [0, 0]]
    scores = [[0.9, 0.5, 0.1], [0.2, 0.9, 0.1, 0.8], [0.3, 0.1]]
    recall = evaluator("recall-at-k", ks=[1, 2]).compute(flags, scores)
    # q1: relevant ranked 2nd; q2: relevant ranked 3rd and 2nd; q3 has no relevant candidate
    assert recall["recall@1"] == 0.0 and recall["recall@2"] == pytest.approx((1 + 0.5) / 2)
    assert recall["recall_queries_skipped"] == 1.0
    mrr = evaluator("mrr").compute(flags, scores)
    assert mrr["mrr"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    groups = [q for q, f in enumerate(flags) for _ in f]
    flat_flags = [str(x) for f in flags for x in f]
    flat_scores = np.array([[0.0, s] for row in scores for s in row])  # logits; last column = relevant
    assert evaluator("recall-at-k", ks=[1, 2]).compute(flat_flags, flat_scores, groups=groups) == recall
    assert evaluator("mrr").compute(flat_flags, flat_scores, groups=groups) == mrr


def test_retrieval_ties_are_pessimistic():
    out = evaluator("recall-at-k", ks=[1]).compute([[0, 1, 0]], [[0.5, 0.5, 0.5]])
    assert out["recall@1"] == 0.0
    assert evaluator("mrr").compute([[0, 1, 0]], [[0.5, 0.5, 0.5]])["mrr"] == pytest.approx(1 / 3)


def test_ece_ten_bins_by_hand_from_probabilities_and_logits():
    probs = np.array([[0.92, 0.08], [0.96, 0.04], [0.17, 0.83], [0.26, 0.74], [0.42, 0.58]])
    refs = ["a", "a", "a", "b", "a"]  # correct, correct, wrong (.83), correct (.74), wrong (.58)
    expected = 2 / 5 * abs(1 - 0.94) + 1 / 5 * 0.83 + 1 / 5 * abs(1 - 0.74) + 1 / 5 * 0.58
    out = evaluator("ece", inputs="probabilities").compute(refs, refs, scores=probs, labels=["a", "b"])
    assert out["ece"] == pytest.approx(expected)
    logits = np.log(probs) + 3.0  # softmax(logits) == probs
    assert evaluator("ece").compute(refs, refs, scores=logits, labels=["a", "b"])["ece"] == pytest.approx(expected)
    perfect = evaluator("ece", inputs="probabilities").compute(["a", "b"], ["a", "b"],
                                                               scores=np.array([[1.0, 0.0], [0.0, 1.0]]),
                                                               labels=["a", "b"])
    assert perfect["ece"] == 0.0
    assert not math.isnan(out["ece"])


# -- one implementation: compute is what the statistics give ------------------------------------------------------ #
TAGS = [["B-D", "I-D", "O", "B-D"], ["O", "B-C"]]
INPUTS = {  # every built-in evaluator: (options, references, predictions, keyword arguments)
    "accuracy": ({}, ["a", "b", "a"], ["a", "a", "a"], {}),
    "f1": ({"average": "macro"}, ["a", "b", "c", "a"], ["a", "b", "b", "c"], {"labels": ["a", "b", "c"]}),
    "entity-f1": ({}, TAGS, [["B-D", "I-D", "O", "O"], ["O", "B-D"]], {}),
    "pico-f1": ({}, [["participants", None, "outcomes"]], [["participants", "outcomes", "outcomes"]], {}),
    "pearson": ({}, [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0], {}),
    "auroc": ({}, ["a", "b", "a", "b"], ["a", "b", "b", "b"],
              {"scores": [[0.2, 0.1], [0.1, 0.7], [0.3, 0.4], [0.0, 0.9]], "labels": ["a", "b"]}),
    "recall-at-k": ({"ks": [1, 2]}, [[0, 1, 0], [1, 0, 1]], [[0.9, 0.5, 0.1], [0.2, 0.9, 0.8]], {}),
    "mrr": ({}, [[0, 1, 0], [0, 0]], [[0.9, 0.5, 0.1], [0.3, 0.1]], {}),
    "ece": ({}, ["a", "b", "b"], ["a", "b", "a"], {"scores": [[2.0, 0.1], [0.0, 1.0], [0.3, 0.2]], "labels": ["a", "b"]}),
}


def test_every_built_in_evaluator_declares_statistics_and_computes_from_them():
    from importlib.metadata import entry_points

    from kinject.api import Evaluator

    built_in = {ep.name for ep in entry_points(group="kinject.evaluators") if ep.dist.name == "kinject"}
    assert built_in == set(INPUTS)
    for name, (options, refs, preds, kwargs) in INPUTS.items():
        ev = evaluator(name, **options)
        assert type(ev).statistics is not Evaluator.statistics, name  # the comparisons' fast path
        computed = ev.compute(refs, preds, **kwargs)
        from_statistics = ev.metrics_of(ev.statistics(refs, preds, **kwargs))
        assert {k: computed[k] for k in ev.metric_names()} == {k: from_statistics[k] for k in ev.metric_names()}, name
