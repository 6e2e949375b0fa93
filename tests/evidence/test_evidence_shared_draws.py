"""Seeds that share a stage's draw (one KG retraining for every fine-tuning seed): kinject reads it from run.json's
stage keys, names the stage in the interval's heading, and either takes the t over the distinct draws or marks the
verdict conditional on the one draw, in every view (compare, report, leaderboard, forest plot)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from evidence_runs import GIVEN_MASK_CONFIG, seeded_pair
from helpers import run_kinject as kinject

BASE = {42: 150, 43: 154, 44: 148, 45: 152, 46: 151}
ARM = {42: 170, 43: 176, 44: 168, 45: 180, 46: 173}


def _compare(capsys, *folders) -> dict:
    capsys.readouterr()
    assert kinject("compare", "--json", *map(str, folders)) == 0
    return json.loads(capsys.readouterr().out)


def test_one_shared_retraining_makes_the_verdict_conditional_on_it_in_compare(tmp_path, capsys):
    base, arm = seeded_pair(tmp_path, BASE, ARM, {seed: "retrain-0" for seed in ARM})
    row = _compare(capsys, base, arm)["metrics"][0]["rows"][1]
    shared = row["shared_stages"]
    assert shared == {"stages": ["kimera-retrain"], "draws": 1, "seeds": 5, "conditional": True,
                      "text": "conditional on one kimera-retrain"}
    assert row["interval"] == "seeds (t) × examples, conditional on one kimera-retrain"
    assert row["verdict"] == "gain"  # the verdict itself; every view shows it with its condition
    assert kinject("compare", str(base), str(arm)) == 0
    out = capsys.readouterr().out
    assert "gain, conditional on one kimera-retrain" in out
    assert "share one draw of kimera-retrain" in out


def test_reseeded_retrainings_share_nothing_and_the_heading_is_the_plain_default(tmp_path, capsys):
    base, arm = seeded_pair(tmp_path, BASE, ARM, {seed: f"retrain-{seed}" for seed in ARM})
    row = _compare(capsys, base, arm)["metrics"][0]["rows"][1]
    assert "shared_stages" not in row and row["interval"] == "seeds (t) × examples"


def test_repeated_but_varying_draws_put_the_t_over_the_draws(tmp_path, capsys):
    """Two retrainings for four seeds: the seed part is a t over 2 draws (1 degree of freedom), wider than over the
    4 seeds, and the verdict is not conditional."""
    base_correct, arm_correct = {s: BASE[s] for s in (42, 43, 44, 45)}, {s: ARM[s] for s in (42, 43, 44, 45)}
    keys = {42: "r-a", 43: "r-a", 44: "r-b", 45: "r-b"}
    base, arm = seeded_pair(tmp_path / "paired", base_correct, arm_correct, keys)
    row = _compare(capsys, base, arm)["metrics"][0]["rows"][1]
    assert row["shared_stages"]["draws"] == 2 and not row["shared_stages"]["conditional"]
    assert row["interval"] == "seeds (t) × examples, t over 2 draws of kimera-retrain"
    plain_base, plain_arm = seeded_pair(tmp_path / "own", base_correct, arm_correct,
                                        {s: f"r-{s}" for s in arm_correct})
    plain = _compare(capsys, plain_base, plain_arm)["metrics"][0]["rows"][1]
    assert abs(plain["difference"] - row["difference"]) < 1e-12
    assert row["ci_high"] - row["ci_low"] > plain["ci_high"] - plain["ci_low"]


def test_a_shared_stage_without_a_seed_and_a_stage_both_sides_ran_are_no_draw(tmp_path, capsys):
    """A given mask (no seed field) read by every seed computes the same thing whoever runs it; the base model's
    probe, run alike by both systems, is common ground."""
    base, arm = seeded_pair(tmp_path, BASE, ARM, {seed: f"retrain-{seed}" for seed in ARM},
                            extra=("kimera-mask-given", "mask-0", GIVEN_MASK_CONFIG))
    assert "shared_stages" not in _compare(capsys, base, arm)["metrics"][0]["rows"][1]

    from kinject.evidence.draws import draw_labels

    probe = {seed: {"probe-base": "p-0"} for seed in (1, 2, 3)}
    arm_draws = {seed: {"probe-base": "p-0", "kimera-retrain": f"r-{seed}"} for seed in (1, 2, 3)}
    assert draw_labels([probe, arm_draws], [1, 2, 3]) == ([0, 1, 2], [])
    shared = {seed: {"probe-base": "p-0", "kimera-retrain": "r-0", "mop-partition": "m-0"} for seed in (1, 2, 3)}
    assert draw_labels([probe, shared], [1, 2, 3]) == ([0, 0, 0], ["kimera-retrain", "mop-partition"])


def test_the_report_the_leaderboard_and_the_forest_plot_show_the_condition(tmp_path):
    from kinject.evidence.forest import rows_of
    from kinject.evidence.runs import Run, RunSet
    from kinject.experiments.grid_board import board_table, task_board

    base, arm = seeded_pair(tmp_path / "runs", BASE, ARM, {seed: "retrain-0" for seed in ARM})
    assert kinject("report", str(base), str(arm), "-o", str(tmp_path / "report"), "--resamples", "500") == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "95% CI (seeds (t) × examples, conditional on one kimera-retrain)" in md
    assert "| gain, conditional on one kimera-retrain |" in md
    result = json.loads((tmp_path / "report" / "comparisons.json").read_text())[0]
    assert rows_of(result)[0].verdict == "gain, conditional on one kimera-retrain"
    assert rows_of(result)[0].interval.endswith("conditional on one kimera-retrain")

    systems = {name: {"cells": [], "strategy": name, "name": name, "values": {},
                      "set": RunSet(name, folder, {s: Run(folder / f"seed-{s}") for s in BASE})}
               for name, folder in (("finetune", base), ("kimera", arm))}
    grid = SimpleNamespace(file=SimpleNamespace(baseline="finetune"))
    board = task_board(grid, "textcls", systems, {}, "test", None, 500, 0)
    headers, rows = board_table(board, "finetune")
    assert headers[5] == "95% CI (seeds (t) × examples, conditional on one kimera-retrain)"
    assert next(r for r in rows if r[0] == "kimera")[6] == "gain, conditional on one kimera-retrain"


def test_the_cluster_variance_is_the_spread_of_the_draw_means():
    from kinject.evidence.bootstrap import _clusters, _seed_mean_variance

    per = np.array([0.10, 0.12, 0.02, 0.04, 0.06, 0.08])
    clusters = _clusters(["a", "a", "b", "b", "c", "c"], 6)
    variance, freedom = _seed_mean_variance(per, clusters)
    means = np.array([0.11, 0.03, 0.07])
    assert freedom == 2 and abs(variance - np.var(means, ddof=1) / 3) < 1e-15
    assert _seed_mean_variance(per, _clusters(None, 6)) == (float(np.var(per, ddof=1)) / 6, 5)
    assert _seed_mean_variance(per, _clusters(["x"] * 6, 6))[1] == 5  # one draw: over seeds, conditional on it
