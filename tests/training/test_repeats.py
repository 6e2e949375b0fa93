"""Seed summaries: one implementation (the training library's repeats module) behind --repeats and the STILT matrix."""

from __future__ import annotations

import pytest

from kinject.evidence import seed_stats, summarize_seeds


def test_summarize_seeds_mean_sample_std_and_common_metrics_only():
    per_seed = {1: {"dev": {"acc": 0.5, "f1": 0.2, "note": "x"}, "test": {"acc": 0.7}, "seconds": 3},
                2: {"dev": {"acc": 0.7, "f1": 0.4}, "test": {"acc": 0.9}, "seconds": 4},
                3: {"dev": {"acc": 0.9}, "test": {"acc": 0.8}}}
    out = summarize_seeds(per_seed)
    assert set(out) == {"dev", "test"} and set(out["dev"]) == {"acc"}  # f1 missing for seed 3; text skipped
    assert out["dev"]["acc"] == {"mean": pytest.approx(0.7), "std": pytest.approx(0.2), "n": 3,
                                 "values": [0.5, 0.7, 0.9]}
    assert seed_stats([0.4]) == {"mean": 0.4, "std": 0.0, "n": 1, "values": [0.4]}


def test_stilt_matrix_summary_uses_the_seed_summary():
    from kinject.plugins.stilt.matrix import BASELINE, TaskDef, summarize

    a, b = TaskDef("a", "textcls"), TaskDef("b", "textcls")
    records = [{"target": "a", "intermediate": BASELINE, "seed": 42, "value": 0.5},
               {"target": "a", "intermediate": BASELINE, "seed": 43, "value": 0.7},
               {"target": "a", "intermediate": "b", "seed": 42, "value": 0.8}]
    summary = summarize(records, [a], [b], {"a": ("test", "accuracy")}, 2, {})
    cells = summary["rows"]["a"]["cells"]
    expected = summarize_seeds({42: {"cell": {"value": 0.5}}, 43: {"cell": {"value": 0.7}}})["cell"]["value"]
    assert cells[BASELINE] == {**expected, "delta": None}
    assert cells["b"]["n"] == 1 and cells["b"]["delta"] == pytest.approx(0.8 - 0.6)
