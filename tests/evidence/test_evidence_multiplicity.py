"""Declared comparisons: a grid file names its headline (``headline: {baseline: finetune, arm: kimera}``); every
other comparison is Holm-adjusted in the leaderboard and the report, with the raw p-value and verdict beside it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from evidence_runs import FINETUNE_CONFIG, classification_records, make_run
from helpers import one_line_error, run_kinject as kinject

TINY = __import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks" / "grids" / "tiny.yaml"


def test_holm_multiplies_the_ith_smallest_p_by_m_minus_i_plus_1_and_keeps_the_order():
    from kinject.evidence.multiplicity import holm

    # sorted: 0.01 * 4 = 0.04, 0.03 * 3 = 0.09, 0.04 * 2 = 0.08 made monotone 0.09, 0.5 * 1 = 0.5
    assert holm([0.04, 0.01, 0.5, 0.03]) == pytest.approx([0.09, 0.04, 0.5, 0.09])
    assert holm([0.9, 0.6]) == pytest.approx([1.0, 1.0])  # at most 1
    assert holm([]) == []


def test_adjust_leaves_the_headline_alone_and_adjusts_the_tests_only():
    from kinject.evidence.multiplicity import adjust, p_cell

    rows = [{"verdict": "gain", "p_value": 0.01}, {"verdict": "gain", "p_value": 0.03},
            {"verdict": "loss", "p_value": 0.02}, {"verdict": "1 seed: no verdict", "p_value": 0.001},
            {"verdict": "gain", "p_value": 0.001, "identical": False}]
    assert adjust(rows, headline=rows[4]) == 3
    assert rows[4]["headline"] and "p_holm" not in rows[4] and p_cell(rows[4]) == "0.001 (headline (not adjusted))"
    assert [r.get("p_holm") for r in rows[:3]] == pytest.approx([0.03, 0.04, 0.04])  # 0.01 * 3, 0.02 * 2, 0.03 * 1 made monotone
    assert [r["verdict_holm"] for r in rows[:3]] == ["gain", "gain", "loss"]
    assert "p_holm" not in rows[3]  # one seed gives no verdict: not a test
    weaker = [{"verdict": "gain", "p_value": p} for p in (0.02, 0.03, 0.04)]
    adjust(weaker)
    assert [r["verdict_holm"] for r in weaker] == ["no evidence"] * 3 and p_cell(weaker[0]) == "0.02 (Holm 0.06)"


def _grid(tmp_path, **changes):
    data = yaml.safe_load(TINY.read_text())
    data["strategies"]["lora2"] = {"name": "finetune", "settings": {"training.peft.method": "lora"}}
    data.update(changes)
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_grid_file_declares_its_headline_and_a_wrong_one_is_one_line(tmp_path, capsys):
    from kinject.experiments.grid import load_grid

    grid = load_grid(_grid(tmp_path, headline={"baseline": "finetune", "arm": "lora"}))
    assert grid.headline() == ("textcls", "lora")
    assert load_grid(_grid(tmp_path)).headline() is None
    for headline, words in (({"arm": "kimera"}, "headline.arm: 'kimera' is no system of task textcls"),
                            ({"arm": "finetune"}, "headline.arm: 'finetune' is the baseline"),
                            ({"baseline": "lora", "arm": "lora2"}, "headline.baseline: 'lora' is not the grid's"),
                            ({"arm": "lora", "task": "capr"}, "headline.task: 'capr' is no task of the grid"),
                            ({"arms": "lora"}, "headline")):
        path = _grid(tmp_path, headline=headline)
        line = one_line_error(capsys, ["grid", str(path), "--dry-run", "-o", str(tmp_path / "out")])
        assert words in line and str(path) in line, line


def _systems(tmp_path) -> dict:
    from kinject.evidence.runs import Run, RunSet

    corrects = {"finetune": (150, 152, 151), "big": (180, 183, 181), "small": (158, 161, 160)}
    out = {}
    for name, values in corrects.items():
        for seed, correct in zip((42, 43, 44), values):
            make_run(tmp_path / name / f"seed-{seed}", classification_records(200, correct, offset=seed % 5),
                     seed=seed, stages=[("finetune", f"{name}-{seed}", FINETUNE_CONFIG)])
        folder = tmp_path / name
        out[name] = {"cells": [], "strategy": name, "name": name, "values": {},
                     "set": RunSet(name, folder, {s: Run(folder / f"seed-{s}") for s in (42, 43, 44)})}
    return out


def test_the_leaderboard_shows_raw_and_holm_adjusted_and_marks_the_headline(tmp_path):
    from kinject.experiments.grid_board import _adjust, board_table, task_board

    grid = SimpleNamespace(file=SimpleNamespace(baseline="finetune"), headline=lambda: ("textcls", "small"))
    board = task_board(grid, "textcls", _systems(tmp_path), {}, "test", None, 500, 0)
    assert _adjust(grid, [board]) == ("textcls", "small")
    headers, rows = board_table(board, "finetune")
    p, adjusted = headers.index("verdict's p (Holm)"), headers.index("verdict (Holm)")
    small, big = (next(r for r in rows if r[0] == name) for name in ("small", "big"))
    assert small[adjusted] == "headline (not adjusted)" and small[p].endswith("(headline (not adjusted))")
    assert "(Holm " in big[p] and big[adjusted] == big[headers.index("verdict")]  # one other test: Holm is raw p
    found = next(r for r in board["rows"] if r["system"] == "big")
    assert found["family"] == 1 and found["p_holm"] == pytest.approx(found["p_value"])


def test_the_report_adjusts_every_comparison_but_the_declared_headline(tmp_path):
    import json

    _systems(tmp_path / "runs")
    folders = [str(tmp_path / "runs" / name) for name in ("finetune", "big", "small")]
    assert kinject("report", *folders, "-o", str(tmp_path / "r"), "--resamples", "500", "--headline", "small") == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "verdict's p (Holm)" in md and "headline (not adjusted)" in md and "Holm-adjusted" in md
    rows = json.loads((tmp_path / "r" / "comparisons.json").read_text())[0]["metrics"][0]["rows"]
    assert next(r for r in rows if r["run"] == "small")["headline"]
    assert "p_holm" in next(r for r in rows if r["run"] == "big")
    assert kinject("report", *folders, "-o", str(tmp_path / "r2"), "--headline", "nothing") == 2
