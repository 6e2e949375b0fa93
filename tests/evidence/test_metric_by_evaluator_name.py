"""``-m NAME`` takes an evaluator's entry-point name as well as a metric: `kinject compare` and `kinject report`
compare the metrics it reports (under the options the task gives it), a grid's leaderboard the one it reports, and an
unknown name is one line listing the task's metrics and the evaluators' names, with a near name."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evidence_runs import brier_evaluator, classification_records, make_run
from helpers import one_line_error, run_kinject
from kinject.api import KinjectError
from kinject.testing import registered


class Brier(brier_evaluator()):
    """The Brier score, declared lower-is-better."""

    def greater_is_better(self, metric):
        return False


class Both(Brier):
    """Two metrics from one evaluator."""

    def metric_names(self):
        return ["both_a", "both_b"]


@pytest.fixture
def runs(tmp_path):
    with registered("evaluators", "brier", Brier), registered("evaluators", "both", Both):
        yield [str(make_run(tmp_path / name, classification_records(40, correct))) for name, correct in
               (("base", 24), ("arm", 30))]


def compared(capsys, runs, *names):
    capsys.readouterr()
    assert run_kinject("compare", *runs, "--json", *(a for n in names for a in ("-m", n))) == 0
    return [m["metric"] for m in json.loads(capsys.readouterr().out)["metrics"]]


def test_compare_takes_an_evaluators_entry_point_name_and_the_tasks_options(capsys, runs):
    assert compared(capsys, runs, "brier") == ["brier_macro"]
    assert compared(capsys, runs, "f1") == ["f1_macro"]  # textcls lists f1 with average=macro (the default: micro)
    assert compared(capsys, runs, "accuracy", "brier_macro") == ["accuracy", "brier_macro"]  # metrics stay metrics


def test_an_unknown_name_lists_the_tasks_metrics_and_the_evaluators(capsys, runs):
    line = one_line_error(capsys, ["compare", *runs, "-m", "brierr"])
    assert "metric 'brierr' cannot be recomputed" in line and "Did you mean 'brier'?" in line
    assert "the task reports accuracy, f1_macro" in line
    assert "evaluators by entry-point name: " in line and "brier" in line.split("evaluators by entry-point name: ")[1]


def test_the_report_compares_an_evaluators_metrics(capsys, runs, tmp_path):
    assert run_kinject("report", *runs, "-m", "brier", "-o", str(tmp_path / "report")) == 0
    shown = json.loads((tmp_path / "report" / "comparisons.json").read_text())
    assert [m["metric"] for m in shown[0]["metrics"]] == ["brier_macro"]


def test_a_leaderboard_takes_the_one_metric_an_evaluator_reports(runs):
    from kinject.experiments.commands import leaderboard_metric

    cells = [SimpleNamespace(data={"task": {"name": "textcls", "path": "/nowhere"}})]
    assert leaderboard_metric("f1", cells) == "f1_macro" and leaderboard_metric("brier", cells) == "brier_macro"
    assert leaderboard_metric("accuracy", cells) == "accuracy" and leaderboard_metric(None, cells) is None
    with pytest.raises(KinjectError, match="evaluator 'both' reports both_a, both_b here; a leaderboard ranks one"):
        leaderboard_metric("both", cells)
