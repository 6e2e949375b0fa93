"""kinject.evidence statistics: per-seed tests, and metrics recomputed on resamples."""

from __future__ import annotations

import numpy as np
import pytest

from kinject.evidence.comparison import pair
from kinject.evidence.metrics import define
from kinject.evidence.scorers import StatisticsScorer, scorer_for
from kinject.evidence.stats import seed_tests


# -- per-seed tests --------------------------------------------------------------------------------------- #
def test_seed_tests_match_scipys_known_cases():
    # scipy/stats/tests/test_stats.py::test_ttest_rel ("regression test": t, p of rvs1 vs rvs2)
    rvs1, rvs2 = np.linspace(1, 100, 100), np.linspace(1.01, 99.989, 100)
    out = seed_tests(dict(enumerate(rvs2)), dict(enumerate(rvs1)))
    assert out["t_statistic"] == pytest.approx(0.81248591389165692)
    assert out["t_pvalue"] == pytest.approx(0.41846234511362157)
    # scipy/stats/tests/test_morestats.py::TestWilcoxon::test_exact_pval (R 4.0.3, exact, two-sided)
    x = [1.81, 0.82, 1.56, -0.48, 0.81, 1.28, -1.04, 0.23, -0.75, 0.14]
    y = [0.71, 0.65, -0.2, 0.85, -1.1, -0.45, -0.84, -0.24, -0.68, -0.76]
    out = seed_tests(dict(enumerate(y)), dict(enumerate(x)))
    assert out["wilcoxon_pvalue"] == pytest.approx(0.10546875)
    assert out["differences"] == pytest.approx(np.subtract(x, y).tolist())


def test_seed_tests_pair_by_seed_and_need_two():
    assert seed_tests({1: 0.5}, {1: 0.7}) is None
    assert seed_tests({1: 0.5, 2: 0.6}, {3: 0.7, 4: 0.8}) is None  # no common seeds
    out = seed_tests({1: 0.5, 2: 0.6, 3: 0.55}, {3: 0.65, 2: 0.7, 1: 0.62, 9: 0.1})
    assert out["seeds"] == [1, 2, 3] and out["differences"] == pytest.approx([0.12, 0.1, 0.1])
    same = seed_tests({1: 0.5, 2: 0.6}, {1: 0.5, 2: 0.6})
    assert same["t_pvalue"] is None and same["wilcoxon_pvalue"] is None and same["mean_difference"] == 0


# -- metrics recomputed on resamples equal the evaluators on the resampled examples ----------------------- #
def _classification(rng, n=40, labels=("a", "b", "c")):
    gold = rng.choice(labels, n)
    return [{"id": str(i), "gold": str(g), "pred": str(g if rng.random() < 0.6 else rng.choice(labels)),
             "scores": rng.normal(size=len(labels)).tolist()} for i, g in enumerate(gold)]


def _tags(rng, n):
    tags = ["O"] * n
    for _ in range(rng.integers(0, 3)):
        start = rng.integers(0, n)
        tags[start] = f"B-{rng.choice(['X', 'Y'])}"
        if start + 1 < n:
            tags[start + 1] = rng.choice(["I-X", "I-Y", "O"])
    return tags


def _cases(rng):
    labels = ("a", "b", "c")
    single = _classification(rng)
    multi = [{"id": str(i), "gold": sorted(set(rng.choice(labels, rng.integers(0, 3)))),
              "pred": sorted(set(rng.choice(labels, rng.integers(0, 3)))), "scores": rng.normal(size=3).tolist()}
             for i in range(40)]
    binary = [{**r, "scores": r["scores"][:2], "gold": "ab"[i % 2], "pred": "ab"[rng.integers(0, 2)]}
              for i, r in enumerate(single)]
    ner = [{"id": str(i), "gold": (g := _tags(rng, 8)), "pred": g if rng.random() < 0.5 else _tags(rng, 8)}
           for i in range(40)]
    pico = [{"id": str(i), "gold": [list(rng.choice(["participants", "outcomes"], rng.integers(0, 2)))
                                    for _ in range(6)],
             "pred": [[str(rng.choice(["participants", "outcomes"]))] if rng.random() < .4 else [] for _ in range(6)]}
            for i in range(40)]
    reg = [{"id": str(i), "gold": float(g), "pred": float(g + rng.normal())} for i, g in enumerate(rng.normal(size=40))]
    retrieval = []
    for q in range(40):
        pids = [f"p{j}" for j in range(6)]
        scores = np.round(rng.normal(size=6), 1)  # rounding makes ties: the evaluators' tie rule is exercised
        order = np.argsort(-scores, kind="stable")
        retrieval.append({"id": f"q{q}", "gold": list(rng.choice(pids, rng.integers(1, 3), replace=False)),
                          "ranking": [pids[j] for j in order], "scores": scores[order].tolist(), "pred": "x"})
    return [
        ("accuracy", {}, single, labels), ("f1_micro", {}, single, labels), ("f1_macro", {}, single, labels),
        ("f1_weighted", {}, single, labels), ("f1_micro", {"positive": ["b", "c"]}, single, labels),
        ("f1_binary", {"positive": ["b"]}, binary, ("a", "b")), ("f1_macro", {}, multi, labels),
        ("f1_micro", {}, multi, labels), ("accuracy", {}, multi, labels), ("entity_f1", {}, ner, ()),
        ("entity_precision", {}, ner, ()), ("entity_recall", {}, ner, ()), ("pico_f1", {}, pico, ()),
        ("pico_f1_outcomes", {}, pico, ()), ("pearson", {}, reg, ()), ("auroc_macro", {}, single, labels),
        ("auroc_weighted", {}, single, labels), ("auroc_micro", {}, single, labels),
        ("auroc_macro", {}, binary, ("a", "b")), ("auroc_macro", {}, multi, labels), ("ece", {}, single, labels),
        ("recall@1", {}, retrieval, ()), ("recall@3", {}, retrieval, ()), ("mrr", {}, retrieval, ()),
    ]


def _reference(key, options, records, labels):
    """The metric by kinject's own evaluator (the value metrics.json would hold)."""
    from kinject.tasks.sequence import MetricRef, evaluate_all

    metric = define(key, [], labels)
    ref = MetricRef(name=metric.evaluator, options={**metric.options, **options})
    if metric.evaluator in ("recall-at-k", "mrr"):
        flags = [[pid in set(r["gold"]) for pid in r["ranking"]] for r in records]
        return evaluate_all([ref], flags, [r["scores"] for r in records])[key]
    scores = np.array([r["scores"] for r in records]) if "scores" in records[0] else None
    return evaluate_all([ref], [r["gold"] for r in records], [r["pred"] for r in records], labels=list(labels),
                        scores=scores)[key]


def _ranked_by_hand(record) -> list[int]:
    """1-based ranks of a query's relevant candidates, ties pessimistic: relevant after equal-score others."""
    relevant = [pid in set(record["gold"]) for pid in record["ranking"]]
    order = sorted(range(len(relevant)), key=lambda j: (-record["scores"][j], relevant[j]))
    return [position + 1 for position, j in enumerate(order) if relevant[j]]


def _library(key, options, records, labels):
    """The metric as the field's libraries compute it (scikit-learn, seqeval, scipy), ranks and ECE by hand: an
    oracle independent of the evaluators' statistics."""
    from scipy.special import softmax
    from scipy.stats import pearsonr
    from seqeval import metrics as seqeval
    from sklearn import metrics
    from sklearn.preprocessing import MultiLabelBinarizer

    gold, pred, labels = [r["gold"] for r in records], [r["pred"] for r in records], list(labels)
    scores = np.array([r["scores"] for r in records]) if "scores" in records[0] else None
    multi = isinstance(gold[0], list)
    if key.startswith("entity_"):
        return getattr(seqeval, f"{key[len('entity_'):]}_score")(gold, pred, zero_division=0)
    if key.startswith("pico_f1"):
        per = {e: metrics.f1_score([e in g for doc in gold for g in doc], [e in p for doc in pred for p in doc],
                                   zero_division=0) for e in ("participants", "interventions", "outcomes")}
        return np.mean(list(per.values())) if key == "pico_f1" else per[key[len("pico_f1_"):]]
    if key == "pearson":
        return pearsonr(gold, pred)[0]
    if key.startswith("recall@") or key == "mrr":
        ranked = [_ranked_by_hand(r) for r in records]
        if key == "mrr":
            return np.mean([1 / min(ranks) for ranks in ranked])
        k = int(key.split("@")[1])
        return np.mean([np.mean([rank <= k for rank in ranks]) for ranks in ranked])
    if key == "ece":
        probs = softmax(scores, axis=1)
        confidence, right = probs.max(1), np.array(labels)[probs.argmax(1)] == np.array(gold)
        edges = np.linspace(0, 1, 11)
        in_bin = [(confidence > lo) & (confidence <= hi) | ((lo == 0) & (confidence == 0))
                  for lo, hi in zip(edges, edges[1:])]
        return sum(b.mean() * abs(right[b].mean() - confidence[b].mean()) for b in in_bin if b.any())
    if multi:
        classes = sorted(set(labels) | {x for g in gold for x in g} | {x for p in pred for x in p})
        mlb = MultiLabelBinarizer(classes=classes)
        y, p = mlb.fit_transform(gold), mlb.transform(pred)
        if key == "accuracy":
            return metrics.accuracy_score(y, p)
        if key.startswith("auroc_"):
            y = mlb.transform(gold)[:, [classes.index(c) for c in labels]]
            keep = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
            return metrics.roc_auc_score(y[:, keep], scores[:, keep], average=key[len("auroc_"):])
        return metrics.f1_score(y, p, average=key[len("f1_"):], zero_division=0)
    if key == "accuracy":
        return metrics.accuracy_score(gold, pred)
    if key.startswith("auroc_"):
        if len(labels) == 2:
            return metrics.roc_auc_score([g == labels[1] for g in gold], scores[:, 1] - scores[:, 0])
        if key == "auroc_micro":
            return metrics.roc_auc_score([[g == name for name in labels] for g in gold], softmax(scores, axis=1),
                                         average="micro")
        return metrics.roc_auc_score(gold, softmax(scores, axis=1), multi_class="ovr", labels=labels,
                                     average=key[len("auroc_"):])
    average = key[len("f1_"):]
    if average == "binary":
        return metrics.f1_score(gold, pred, average="binary", pos_label=options["positive"][0], zero_division=0)
    return metrics.f1_score(gold, pred, average=average, labels=options.get("positive"), zero_division=0)


CLASSIFICATION = ("accuracy", "f1_", "auroc_", "ece")


def test_every_metric_recomputed_on_resamples_equals_its_evaluator():
    """Every built-in metric, from its statistics on (re)sampled examples, equals the field's library on those
    examples, and so does its evaluator's ``compute``: one implementation, checked against an independent one."""
    from dataclasses import replace

    rng = np.random.default_rng(3)
    for key, options, records, labels in _cases(rng):
        metric = define(key, [], labels)
        metric = replace(metric, options={**metric.options, **options})
        other = [{**r, "pred": ["zzz"] if isinstance(r["gold"], list) else "zzz"} if i == 0 and key.startswith(
                 CLASSIFICATION) else r for i, r in enumerate(records)]  # another run predicting a label never seen
        scorer = scorer_for(metric, [records, other])
        assert isinstance(scorer, StatisticsScorer), key  # the fast path, for every built-in
        stats = scorer.stats(records)
        for draw in range(3):
            idx = rng.integers(0, len(records), len(records)) if draw else np.arange(len(records))
            mine = float(scorer.value(stats[idx].T[:, None, :])[0])
            resampled = [records[i] for i in idx]
            expected = _library(key, options, resampled, labels)
            assert mine == pytest.approx(expected, abs=1e-9), (key, options, draw)
            assert _reference(key, options, resampled, labels) == pytest.approx(expected, abs=1e-9), (key, draw)


def test_seed_axis_and_batch_axis_are_independent():
    rng = np.random.default_rng(5)
    records = _classification(rng)
    scorer = scorer_for(define("f1_macro"), [records])
    stats = scorer.stats(records)
    x = np.stack([stats, stats[::-1]], axis=-1)  # (n, d, 2 "seeds")
    batch = np.moveaxis(x, 0, -1)[:, :, None, :].repeat(4, axis=2)  # (d, seeds, batch, n)
    values = scorer.value(batch)
    assert values.shape == (2, 4) and np.allclose(values, values[:, :1])


def test_entity_f1_interval_on_5000_sentences_holds_its_difference():
    """Recomputed from per-sentence statistics on every resample (its speed: benchmarks, not this test)."""
    rng = np.random.default_rng(0)
    gold = [_tags(rng, int(rng.integers(5, 30))) for _ in range(5000)]

    def noisy(tags):
        return [t if rng.random() > 0.05 else str(rng.choice(["O", "B-X", "I-X"])) for t in tags]

    a = {0: [{"id": str(i), "gold": g, "pred": noisy(g)} for i, g in enumerate(gold)]}
    b = {0: [{"id": str(i), "gold": g, "pred": noisy(g)} for i, g in enumerate(gold)]}
    base, other = pair(define("entity_f1"), a, [b], n_resamples=2000)
    assert other["ci_low"] < other["difference"] < other["ci_high"]
