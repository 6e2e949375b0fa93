"""KIMERA's scoring set and mask-search stage: caps (groups whole), importance part + metric-only part,
length-sorted batches mapped back to the split's order, the rounds' prediction records the search stores and the
paired round intervals kimera-search-report computes from them, and a loud warning when no head is redundant."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from kinject.plugins.kimera.scoring import ScoringSet, choose_examples


def test_choose_examples_keeps_groups_whole_and_none_means_all():
    examples = [{"group": q} for q in ("a", "a", "a", "b", "b", "c")]
    assert choose_examples(examples, None) == examples
    assert [e["group"] for e in choose_examples(examples, 2)] == ["a", "a", "a"]  # query a stays whole
    assert [e["group"] for e in choose_examples(examples, 4)] == ["a", "a", "a", "b", "b"]
    plain = [{"text": str(i)} for i in range(5)]
    assert choose_examples(plain, 3) == plain[:3]


def test_restore_undoes_the_length_sort():
    order = np.array([2, 0, 3, 1])
    logits = np.arange(8.0).reshape(4, 2)  # row i belongs to feature order[i]
    restored = ScoringSet([], [], [], order).restore(logits)
    assert restored[2].tolist() == [0.0, 1.0] and restored[1].tolist() == [6.0, 7.0]


def test_scoring_batches_are_length_sorted_and_order_maps_rows_to_features(textcls_dir, tiny_model, tmp_path):
    """Importance batches (the first 6 examples) then metric-only batches (the other 10), each part sorted by
    length; ``order`` names the feature behind every batch row."""
    from kinject.interfaces import Environment
    from kinject.api import load_tokenizer
    from kinject.plugins.kimera.scoring import build_scoring_set
    from kinject.tasks.textcls import TextClassificationTask

    task = TextClassificationTask(path=str(textcls_dir))
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    scoring = build_scoring_set(task, env, "dev", None, load_tokenizer(tiny_model), 64, batch_size=4,
                                importance_cap=6)
    assert len(scoring.features) == 16 and scoring.features == task.featurize(
        load_tokenizer(tiny_model), task.examples("dev", env), 64, env)  # featurized in two parts, same result
    assert [len(b["input_ids"]) for b in scoring.batches] == [4, 2]
    assert [len(b["input_ids"]) for b in scoring.metric_batches] == [4, 4, 2]
    assert sorted(scoring.order[:6]) == list(range(6)) and sorted(scoring.order[6:]) == list(range(6, 16))
    rows = [(ids[mask.bool()].tolist(), int(label)) for b in (*scoring.batches, *scoring.metric_batches)
            for ids, mask, label in zip(b["input_ids"], b["attention_mask"], b["labels"])]
    lengths = [len(ids) for ids, _ in rows]
    assert lengths[:6] == sorted(lengths[:6]) and lengths[6:] == sorted(lengths[6:]) and len(set(lengths)) > 1
    for (ids, label), index in zip(rows, scoring.order):
        assert ids == scoring.features[index]["input_ids"] and label == scoring.features[index]["labels"]


def _mask_stage_run(tmp_path, textcls_dir, tiny_model, monkeypatch):
    """The kimera-mask-hard and kimera-search-report stages of a tiny run on a given model, and a context for
    each; the search's metric drops by 1 after round 0, so round 1 already fails (no redundant head)."""
    from kinject.preparation import prepare
    from kinject.interfaces import Head, StageContext
    from kinject.api import load_tokenizer
    from kinject.plugins.kimera import search
    from kinject.spec_reading import build_spec
    from kinject.training import build_task_model, save_model

    finetuned = tmp_path / "finetuned"
    save_model(build_task_model(tiny_model, Head("sequence", 2, labels=("bio", "other"))), load_tokenizer(tiny_model),
               finetuned)
    spec = build_spec({"model": {"name": "tiny", "max_length": 32},
                       "task": {"name": "textcls", "path": str(textcls_dir)},
                       "strategy": {"name": "kimera", "finetuned_model": str(finetuned), "rho": 0.25},
                       "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)})
    stages = {s.name: s for s in prepare(spec).stages}
    real = search.search_mask

    def masking_always_hurts(model, batches, problem_type, metric, *args, **kwargs):
        calls = []

        def worse(logits):
            calls.append(1)
            return metric(logits) - (0.0 if len(calls) == 1 else 1.0)
        return real(model, batches, problem_type, worse, *args, **kwargs)

    monkeypatch.setattr(search, "search_mask", masking_always_hurts)

    def context(name: str, inputs: dict) -> StageContext:
        out = tmp_path / name
        out.mkdir()
        return StageContext(name=name, key="k", out=out, work=tmp_path / "work", inputs=inputs,
                            cache_dir=tmp_path / "cache")
    return stages, context


def test_mask_stage_stores_round_predictions_and_the_report_adds_intervals_and_warns_loudly(
        tmp_path, textcls_dir, tiny_model, monkeypatch, caplog):
    from kinject.plugins.kimera.search import ROUND_PREDICTIONS, mask_body, read_round_predictions
    from kinject.plugins.kimera.search_report import search_report_body

    stages, context = _mask_stage_run(tmp_path, textcls_dir, tiny_model, monkeypatch)
    stage, report = stages["kimera-mask-hard"], stages["kimera-search-report"]
    assert stage.config.scoring.examples == 500 and stage.config.scoring.importance_examples == 250  # defaults
    assert stage.config.rho_of == "all"  # HF bertology's convention, the default
    assert report.inputs == ("kimera-mask-hard",) and report.config.search_stage == "kimera-mask-hard"
    searched = context("mask", {})
    with caplog.at_level(logging.WARNING, logger="kinject"):
        mask_body(stage.config, searched)
    search = json.loads((searched.out / "search.json").read_text())
    assert search["examples"] == 16 and search["units"] == 16  # every dev example; textcls: one unit each
    assert search["importance_examples"] == 16  # both default caps are above the split's size
    assert search["no_redundant_heads"] is True and search["masked_heads"] == 0
    assert "NO redundant head" in search["warning"] and "FFN" in search["warning"]
    assert any(r.levelno == logging.WARNING and "NO redundant head" in r.getMessage() for r in caplog.records)
    assert "ci_low" not in search["rounds"][1]  # the search stage computes no interval
    rounds = read_round_predictions(searched.out / ROUND_PREDICTIONS)
    assert len(rounds) == len(search["rounds"]) == 2 and [len(r) for r in rounds] == [16, 16]
    assert set(rounds[0][0]) >= {"id", "gold", "pred", "scores"}
    assert json.loads((searched.out / "masks.json").read_text())["hard"] == [[1.0] * 4] * 2

    caplog.clear()
    reported = context("report", {"kimera-mask-hard": searched.out})
    with caplog.at_level(logging.WARNING, logger="kinject"):
        search_report_body(report.config, reported)
    full = json.loads((reported.out / "search.json").read_text())
    first = full["rounds"][1]
    assert not first["kept"] and first["ci_low"] <= first["difference"] <= first["ci_high"]
    # the interval is the real paired bootstrap of the task's accuracy (the -1 above only moved the threshold)
    assert -1.0 <= first["ci_low"] <= first["ci_high"] <= 1.0 and isinstance(first["threshold_in_ci"], bool)
    assert first["units"] == 16 and first["confidence"] == 0.95 and "ci_low" not in full["rounds"][0]
    assert full["threshold"] == pytest.approx(full["tau"] * full["baseline"])
    assert "vs unmasked [95% CI" in full["warning"]  # round 1's interval joins the warning
    assert any(r.levelno == logging.WARNING and "95% CI" in r.getMessage() for r in caplog.records)
    assert {k: v for k, v in full.items() if k not in ("rounds", "warning")} == \
        {k: v for k, v in search.items() if k not in ("rounds", "warning")}


def test_a_task_without_per_example_predictions_gives_rounds_without_intervals(
        tmp_path, textcls_dir, tiny_model, monkeypatch, caplog):
    from kinject.plugins.kimera.search import ROUND_PREDICTIONS, mask_body
    from kinject.plugins.kimera.search_report import search_report_body
    from kinject.tasks.textcls import TextClassificationTask

    def none(self, *args, **kwargs):
        raise NotImplementedError

    monkeypatch.setattr(TextClassificationTask, "predictions", none)
    stages, context = _mask_stage_run(tmp_path, textcls_dir, tiny_model, monkeypatch)
    searched = context("mask", {})
    with caplog.at_level(logging.WARNING, logger="kinject"):
        mask_body(stages["kimera-mask-hard"].config, searched)
    warned = [r.getMessage() for r in caplog.records if "no confidence interval" in r.getMessage()]
    assert warned == ["kimera mask search: no confidence interval for the rounds (NotImplementedError)"]
    assert not (searched.out / ROUND_PREDICTIONS).exists()
    assert json.loads((searched.out / "search.json").read_text())["units"] is None
    reported = context("report", {"kimera-mask-hard": searched.out})
    search_report_body(stages["kimera-search-report"].config, reported)
    full = json.loads((reported.out / "search.json").read_text())
    assert full["no_redundant_heads"] and not any("ci_low" in r for r in full["rounds"])
    assert "CI" not in full["warning"]


def test_intervals_join_their_rounds_with_whether_the_stop_threshold_lies_inside():
    """Threshold: a difference of (tau - 1) x baseline = -0.05; round 1's [-0.03, 0.01] excludes it, round 2's
    [-0.16, -0.04] includes it."""
    from kinject.plugins.kimera.search_report import add_intervals

    search = {"kind": "hard", "metric": "accuracy", "tau": 0.95, "baseline": 1.0, "threshold": 0.95,
              "no_redundant_heads": False, "warning": None,
              "rounds": [{"round": r, "metric": m, "masked": r, "kept": r < 2} for r, m in enumerate((1.0, 0.99, 0.9))]}
    add_intervals(search, [None, {"difference": -0.01, "ci_low": -0.03, "ci_high": 0.01, "confidence": 0.95},
                           {"difference": -0.1, "ci_low": -0.16, "ci_high": -0.04, "confidence": 0.95}])
    assert "ci_low" not in search["rounds"][0]
    assert search["rounds"][1]["threshold_in_ci"] is False and search["rounds"][2]["threshold_in_ci"] is True
    assert search["rounds"][2]["ci_low"] == pytest.approx(-0.16) and search["warning"] is None
