"""Verdicts that hold at the seeds a study can afford: one seed gives no gain/loss, unequal seeds are paired (and
valued) over the shared ones, different single seeds are shown unpaired, headings name the interval their rows
carry; a system that learned nothing is named wherever a verdict is shown; the coverage simulation's function."""

from __future__ import annotations

import json
from types import SimpleNamespace

from evidence_runs import classification_records, make_run
from helpers import run_kinject as kinject


def _constant(n: int = 40, label: str = "other") -> list[dict]:
    """Every example predicted ``label`` (gold alternates bio/other: accuracy 0.5, the majority baseline's)."""
    return [{**r, "pred": label, "scores": [0.1, 0.2]} for r in classification_records(n, 0)]


def _json(capsys, *args) -> dict:
    capsys.readouterr()
    assert kinject("compare", "--json", *map(str, args)) == 0
    return json.loads(capsys.readouterr().out)


def test_a_constant_predictor_is_named_not_learned_in_compare_and_its_json(tmp_path, capsys):
    for seed in (42, 43):
        make_run(tmp_path / "base" / f"seed-{seed}", _constant(), seed=seed)
        make_run(tmp_path / "arm" / f"seed-{seed}", classification_records(40, 30 + seed % 2), seed=seed)
    result = _json(capsys, tmp_path / "base", tmp_path / "arm")
    base, arm = result["metrics"][0]["rows"]
    assert base["not_learned"]["constant"] and base["not_learned"]["seeds"] == [42, 43]
    assert arm["not_learned"] is None and arm["verdict"] == "not learned: base"
    assert kinject("compare", str(tmp_path / "base"), str(tmp_path / "arm")) == 0
    out = capsys.readouterr().out
    assert "not learned: base" in out and "constant predictor" in out


def test_below_the_majority_baseline_is_not_learned_and_identical_constant_runs_are_not_identical(tmp_path, capsys):
    make_run(tmp_path / "a", _constant())
    make_run(tmp_path / "b", _constant())
    row = _json(capsys, tmp_path / "a", tmp_path / "b")["metrics"][0]["rows"][1]
    assert row["identical"] and row["verdict"] == "not learned: a"  # the baseline voids it; b is its own outcome
    make_run(tmp_path / "c", classification_records(40, 18))  # varies, but 0.45 < 0.5 (always 'bio')
    row = _json(capsys, tmp_path / "c", tmp_path / "c")["metrics"][0]["rows"][1]
    flag = row["not_learned"]
    assert not flag["constant"] and flag["score"] == 0.45 and flag["baseline"] == 0.5
    assert "does not beat the best input-free predictor" in flag["reason"]
    assert "the constant prediction" in flag["reason"] and flag["margin"][0] < 0


def test_report_and_forest_rows_name_the_constant_predictor(tmp_path):
    """A constant arm is an outcome of its method (collapsed), a constant baseline voids the comparison."""
    from kinject.evidence.forest import rows_of

    make_run(tmp_path / "runs" / "base", classification_records(40, 30))
    make_run(tmp_path / "runs" / "flat", _constant(label="bio"))
    assert kinject("report", str(tmp_path / "runs" / "base"), str(tmp_path / "runs" / "flat"), "-o",
                   str(tmp_path / "report")) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| 1 seed: no verdict; collapsed |" in md and "collapsed: flat: constant predictor" in md
    result = json.loads((tmp_path / "report" / "comparisons.json").read_text())[0]
    assert [r.verdict for r in rows_of(result)] == ["1 seed: no verdict; collapsed"]
    assert kinject("report", str(tmp_path / "runs" / "flat"), str(tmp_path / "runs" / "base"), "-o",
                   str(tmp_path / "void")) == 0
    md = (tmp_path / "void" / "report.md").read_text()
    assert "| not learned: flat |" in md and "not learned: flat: constant predictor" in md


def test_the_leaderboard_names_the_constant_predictor(tmp_path):
    from kinject.experiments.grid_board import board_table, task_board
    from kinject.evidence.runs import Run, RunSet

    systems = {}
    for name, records in (("finetune", classification_records(40, 30)), ("kimera", _constant())):
        folder = make_run(tmp_path / name / "seed-42", records, strategy=name)
        systems[name] = {"cells": [], "strategy": name, "name": name, "values": {},
                         "set": RunSet(name, folder.parent, {42: Run(folder)})}
    grid = SimpleNamespace(file=SimpleNamespace(baseline="finetune"))
    board = task_board(grid, "textcls", systems, {}, "test", None, 200, 0)
    headers, rows = board_table(board, "finetune")
    row = next(r for r in rows if r[0] == "kimera")
    assert row[6] == "1 seed: no verdict; collapsed" and headers[5] == "95% CI (examples only)"
    assert row[2] == "1"  # one seed: no † (no verdict to call provisional)


def test_the_model_card_warns_when_the_model_learned_nothing(tmp_path):
    from kinject.plugins.hub.card import learned_section

    flat = make_run(tmp_path / "flat", _constant())
    good = make_run(tmp_path / "good", classification_records(40, 33))
    assert "**Not learned.**" in learned_section(flat) and "constant predictor" in learned_section(flat)
    assert learned_section(good) == ""


def test_one_seed_never_gives_gain_or_loss(tmp_path, capsys):
    make_run(tmp_path / "base", classification_records(40, 32))
    make_run(tmp_path / "arm", classification_records(40, 39))
    row = _json(capsys, tmp_path / "base", tmp_path / "arm")["metrics"][0]["rows"][1]
    assert row["ci_low"] > 0 and row["verdict"] == "1 seed: no verdict" and row["interval"] == "examples only"
    assert kinject("compare", str(tmp_path / "base"), str(tmp_path / "arm")) == 0
    out = capsys.readouterr().out
    assert "gain" not in out.replace("again", "") and "1 seed: no verdict" in out
    assert "seeds × examples" not in out and "95% CI (examples only)" in out and "1 seeds" not in out


def test_unequal_seeds_value_columns_use_the_paired_seeds(tmp_path, capsys):
    base_correct, arm_correct = {42: 22, 43: 24, 44: 30}, {42: 33, 43: 35}
    for seed, c in base_correct.items():
        make_run(tmp_path / "base" / f"seed-{seed}", classification_records(40, c), seed=seed)
    for seed, c in arm_correct.items():
        make_run(tmp_path / "arm" / f"seed-{seed}", classification_records(40, c), seed=seed)
    base, arm = _json(capsys, tmp_path / "base", tmp_path / "arm")["metrics"][0]["rows"]
    assert arm["paired_seeds"] == [42, 43] and abs(arm["value"] - 34 / 40) < 1e-12
    assert abs(arm["baseline_value"] - 23 / 40) < 1e-12 and abs(base["value"] - 76 / 120) < 1e-12
    assert abs(arm["difference"] - (arm["value"] - arm["baseline_value"])) < 1e-12
    assert kinject("compare", str(tmp_path / "base"), str(tmp_path / "arm")) == 0
    out = capsys.readouterr().out
    assert "2 (2 paired)" in out and "vs 0.5750 on the paired seeds" in out


def test_two_single_runs_of_different_seeds_are_shown_unpaired(tmp_path, capsys):
    make_run(tmp_path / "base", classification_records(40, 32), seed=42)
    make_run(tmp_path / "arm", classification_records(40, 39), seed=43)
    row = _json(capsys, tmp_path / "base", tmp_path / "arm")["metrics"][0]["rows"][1]
    assert row["unpaired"] == {"baseline_seed": 42, "seed": 43} and row["verdict"] == "1 seed: no verdict"
    assert kinject("compare", str(tmp_path / "base"), str(tmp_path / "arm")) == 0
    out = capsys.readouterr().out
    assert "unpaired" in out and "different seeds" in out


def test_the_heading_names_the_interval_and_rows_of_different_kinds_say_theirs():
    from kinject.evidence.tables import comparison_table

    def row(run, seeds, interval):
        return {"run": run, "seeds": seeds, "seeds_paired": len(seeds), "value": 0.6, "difference": 0.1,
                "ci_low": -0.1, "ci_high": 0.3, "ci_low_examples": 0.0, "ci_high_examples": 0.2,
                "interval": interval, "verdict": "no evidence"}

    result = {"confidence": 0.95, "examples": 40}
    mixed = {"metric": "accuracy", "rows": [row("base", [1, 2, 3], ""), row("a", [1, 2, 3], "seeds (t) × examples"),
                                            row("b", [1], "examples only")]}
    headers, rows = comparison_table(result, mixed)
    assert headers[4] == "95% CI (verdict's; over what: per row)"
    assert rows[1][4].endswith("over seeds (t) × examples") and rows[2][4].endswith("over examples only")
    same = {"metric": "accuracy", "rows": mixed["rows"][:2]}
    assert comparison_table(result, same)[0][4] == "95% CI (seeds (t) × examples)"


def test_run_result_and_the_printed_lines_carry_the_flag_and_the_probe_sentence():
    import io

    from rich.console import Console

    from kinject import RunResult
    from kinject.cli.tables import print_metrics

    flag = {"reason": "constant predictor (every prediction \"other\")", "constant": True}
    metrics = {"test": {"accuracy": 0.5},
               "probe": {"auroc": 0.77, "base_auroc": 0.82, "gain_auroc": -0.05, "gain_auroc_low": -0.08,
                         "gain_auroc_high": -0.02},
               "comparison": {"baseline_name": "finetune", "other_name": "kimera", "split": "test",
                              "metric": "accuracy", "baseline": 0.5, "other": 0.5, "difference": 0.0,
                              "confidence": 0.95, "ci_low": 0.0, "ci_high": 0.0, "n": 40, "identical": True,
                              "verdict": "not learned: finetune, kimera",
                              "not_learned": {"baseline": flag, "other": flag}}}
    result = RunResult(metrics, "runs/x")
    assert result.not_learned == {"finetune": flag["reason"], "kimera": flag["reason"]}
    buffer = io.StringIO()
    print_metrics(Console(file=buffer, width=300), "t", metrics)
    out = buffer.getvalue()
    assert "(not learned: finetune, kimera)" in out and "identical predictions" not in out
    assert "not learned: kimera: constant predictor" in out
    assert "the probe's AUROC fell below the base model's" in out


def test_learned_check_for_regression_and_sequence_labelling():
    from kinject.evidence.learned import check
    from kinject.evidence.metrics import define

    gold = [0.1 * i for i in range(20)]
    pearson = define("pearson")
    flat = [{"id": str(i), "gold": g, "pred": 1.0} for i, g in enumerate(gold)]
    assert check(flat, pearson)["constant"]
    good = [{"id": str(i), "gold": g, "pred": g + 0.01 * (i % 3)} for i, g in enumerate(gold)]
    assert check(good, pearson) is None
    tags = [{"id": str(i), "gold": ["B-X", "O", "O"], "pred": ["O", "O", "O"]} for i in range(5)]
    found = check(tags, define("entity_f1"))  # the best constant tags every token B-X: F1 0.5 > all-O's 0
    assert found["constant"] and found["baseline"] == 0.5 and found["baseline_name"] == "the tag 'B-X' everywhere"


def test_coverage_simulation_on_a_tiny_setting():
    from benchmarks.coverage import REGIMES, Regime, coverage

    from kinject.evidence.bootstrap import DEFAULT_INTERVAL

    regime = Regime("tiny seed-dominated", 0.5, 0.0, examples=120)
    found = coverage(regime, 3, replications=60, resamples=200)
    assert all(0.0 <= found[k]["coverage"] <= 1.0 for k in found if isinstance(found[k], dict))
    assert found[DEFAULT_INTERVAL]["coverage"] > found["examples"]["coverage"] + 0.2
    assert found[DEFAULT_INTERVAL]["width"] > found["examples"]["width"]
    assert set(REGIMES) >= {"modest", "seed-dominated", "no-seed-effect", "units"}
