"""A metric has one implementation: the comparison's fast bootstrap finds an evaluator's sufficient statistics on the
evaluator object (``Evaluator.statistics``), for a third party's evaluator as for a built-in, under any entry-point
name; an evaluator without them is recomputed on every resample, with the same intervals."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import installed
from kinject.api import KinjectError, MetricRef, registry
from kinject.evidence import comparison
from kinject.evidence.comparison import pair
from kinject.evidence.metrics import MetricDef, define
from kinject.evidence.scorers import EvaluatorScorer, StatisticsScorer, scorer_for

ENTRY_POINTS = """
    [kinject.evaluators]
    precision-yes = outside_metrics:PrecisionYes
    precision-yes-renamed = outside_metrics:PrecisionYes
    renamed-f1 = kinject.tasks.evaluators.classification:F1
    plain-precision = outside_metrics:PlainPrecision
    """
MODULE = '''
    """A third party's metrics: precision of "yes", declared by its statistics only, and the same by compute only."""
    import numpy as np

    from kinject.api import Evaluator, PluginConfig


    class Precision(Evaluator):
        """Precision of the label "yes"."""

        class Config(PluginConfig):
            pass

        def metric_names(self):
            return ["precision_yes"]


    class PrecisionYes(Precision):
        """Precision of the label "yes", declared by its statistics."""

        def statistics(self, references, predictions, **kwargs):
            called = np.array([p == "yes" for p in predictions], dtype=float)
            right = np.array([r == p for r, p in zip(references, predictions)], dtype=float)
            return {"hits": called * right, "called": called}

        def from_statistics(self, sums, n):
            with np.errstate(invalid="ignore", divide="ignore"):
                return {"precision_yes": np.where(sums["called"] > 0, sums["hits"] / sums["called"], 0.0)}


    class PlainPrecision(Precision):
        """Precision of the label "yes", from compute alone."""

        def compute(self, references, predictions, **kwargs):
            called = [r for r, p in zip(references, predictions) if p == "yes"]
            return {"precision_yes": sum(r == "yes" for r in called) / len(called) if called else 0.0}
    '''


@pytest.fixture
def outside(tmp_path, monkeypatch):
    with installed(monkeypatch, tmp_path / "site", "kinject-metrics", ENTRY_POINTS, {"outside_metrics": MODULE},
                   "evaluators"):
        yield registry("evaluators")


def runs(accuracy: float, seeds=(1, 2, 3), n: int = 60) -> dict[int, list[dict]]:
    """Per seed the records of a system right ``accuracy`` of the time; the pairs of a child term share a group."""
    out = {}
    for seed in seeds:
        rng = np.random.default_rng([seed, int(accuracy * 100)])
        records = []
        for i in range(n):
            gold = "yes" if i % 3 == 0 else "no"
            pred = gold if rng.random() < accuracy else ("no" if gold == "yes" else "yes")
            records.append({"id": str(i), "gold": gold, "pred": pred, "group": f"term{i // 2}"})
        out[seed] = records
    return out


def _built(metric: MetricDef):
    return MetricRef(name=metric.evaluator, options=metric.options).build()


def test_a_third_party_metric_with_statistics_takes_the_fast_path_with_the_slow_paths_intervals(outside,
                                                                                                  monkeypatch):
    metric = MetricDef("precision_yes", "precision-yes", {}, ("no", "yes"))
    baseline, other = runs(0.6), runs(0.8)
    scorer = scorer_for(metric, [*baseline.values(), *other.values()])
    assert isinstance(scorer, StatisticsScorer) and scorer.additive
    cls = outside.get("precision-yes")
    calls = []
    original = cls.compute
    monkeypatch.setattr(cls, "compute", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    fast = pair(metric, baseline, [other], n_resamples=400, seed=7)
    assert calls == []  # the fast path sums statistics: compute is never called
    monkeypatch.setattr(comparison, "scorer_for", lambda metric, sets, **_: EvaluatorScorer(metric, _built(metric), sets))
    slow = pair(metric, baseline, [other], n_resamples=400, seed=7)
    assert len(calls) >= 400 * 3  # a compute per resample and seed
    assert fast == slow  # bit for bit: the same replicates, the same intervals
    assert fast[1]["ci_low"] < fast[1]["difference"] < fast[1]["ci_high"] and fast[1]["seeds_paired"] == 3


def test_renaming_an_entry_point_does_not_change_a_metrics_path(outside):
    baseline, other = runs(0.6), runs(0.8)
    sets = [*baseline.values(), *other.values()]
    rows = {}
    for name in ("precision-yes", "precision-yes-renamed", "plain-precision"):
        metric = MetricDef("precision_yes", name, {}, ("no", "yes"))
        rows[name] = pair(metric, baseline, [other], n_resamples=300)
    assert isinstance(scorer_for(MetricDef("precision_yes", "precision-yes-renamed", {}, ()), sets), StatisticsScorer)
    assert isinstance(scorer_for(MetricDef("precision_yes", "plain-precision", {}, ()), sets), EvaluatorScorer)
    assert rows["precision-yes"] == rows["precision-yes-renamed"] == rows["plain-precision"]
    builtin = define("f1_macro", labels=("no", "yes"))
    renamed = MetricDef("f1_macro", "renamed-f1", builtin.options, builtin.labels)
    assert isinstance(scorer_for(renamed, sets), StatisticsScorer)  # a built-in under another name: still fast
    assert pair(renamed, baseline, [other], n_resamples=300) == pair(builtin, baseline, [other], n_resamples=300)


class _Columns:
    """Statistics of a wrong shape, or without the metric asked for."""

    def __init__(self, rows: int | None = None, metric: str = "precision_yes"):
        self.rows, self.metric = rows, metric

    def statistics(self, references, predictions, **kwargs):
        return {"hits": np.ones(self.rows if self.rows is not None else len(references))}

    def from_statistics(self, sums, n):
        return {self.metric: sums["hits"] / n}


@pytest.mark.parametrize("rows, metric, message", [
    (3, "precision_yes", "statistics column 'hits' has 3 values for 60 records"),
    (None, "another", "statistics give 'another'"),
])
def test_statistics_that_do_not_fit_the_records_are_one_line(outside, monkeypatch, rows, metric, message):
    cls = outside.get("precision-yes")
    bad = _Columns(rows, metric)
    monkeypatch.setattr(cls, "statistics", lambda self, *a, **k: bad.statistics(*a, **k))
    monkeypatch.setattr(cls, "from_statistics", lambda self, sums, n: bad.from_statistics(sums, n))
    with pytest.raises(KinjectError, match=f"^metric 'precision_yes': evaluator 'precision-yes'.s {message}"):
        pair(MetricDef("precision_yes", "precision-yes", {}, ()), runs(0.6, seeds=(1,)), [runs(0.8, seeds=(1,))],
             n_resamples=50)


def test_statistics_failing_are_one_line(outside, monkeypatch):
    cls = outside.get("precision-yes")
    monkeypatch.setattr(cls, "statistics", lambda self, *a, **k: 1 / 0)
    with pytest.raises(KinjectError) as failed:
        scorer_for(MetricDef("precision_yes", "precision-yes", {}, ()), [runs(0.6, seeds=(1,))[1]])
    assert str(failed.value) == ("metric 'precision_yes': evaluator 'precision-yes' failed on the predictions: "
                                 "ZeroDivisionError: division by zero")
