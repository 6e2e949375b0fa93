"""benchmarks/results_board.py, the study's leaderboard (issue #53): arms that did not run wait for a GPU with
their command, finished arms get `kinject grid report`'s difference, interval and verdict, the page's block is
rewritten in place."""

from __future__ import annotations

import pytest

from benchmarks import results_board


def test_arms_with_no_finished_cell_wait_for_a_gpu_with_their_command(tmp_path):
    block = results_board.board(tmp_path / "no-runs")
    lines = [line for line in block.splitlines() if line.startswith("| kimera | hpo-isa | kimera-no-mask |")]
    assert len(lines) == 1 and "| kimera/no-mask |" in lines[0]
    assert "waits for a GPU: `bash benchmarks/gpu_study.sh --run --only 'hpo-isa/kimera-no-mask/*'`" in lines[0]
    assert "| kimera | hpo-isa | kimera (headline) | kimera |" in block
    assert "| doktra | hpo-isa | doktra-of-kimera-no-mask |" in block and "| capr-medquad |" in block
    assert not [line for line in block.splitlines() if line.startswith("| finetune |")]  # the baseline: no row


def test_the_page_block_is_put_after_the_title_then_replaced_in_place(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Results\n\nthe notebook\n")
    results_board.rewrite(page, f"{results_board.BEGIN}\nold\n{results_board.END}")
    results_board.rewrite(page, f"{results_board.BEGIN}\nnew\n{results_board.END}")
    text = page.read_text()
    assert text.startswith("# Results\n\n" + results_board.BEGIN) and "old" not in text and text.count("new") == 1
    assert text.endswith("the notebook\n")


@pytest.mark.slow
def test_a_finished_arm_gets_its_difference_interval_verdict_and_draws(tmp_path, tiny_model, monkeypatch):
    from helpers import run_kinject

    grid = tmp_path / "small.yaml"
    grid.write_text(f"output: {tmp_path / 'runs' / 'small'}\nmodel: tiny\nseeds: [42, 43]\ntasks: [hpo-isa]\n"
                    "settings: {protocol: quick, training.limit: 64, choose: false}\n"
                    "strategies:\n  finetune: {}\n  kimera-no-mask: {name: kimera, settings: "
                    "{strategy.variant: no-mask, strategy.retrain_seed: 0}}\n  kimera: {name: kimera}\n"
                    "baseline: finetune\nexecutor: debug\n")
    assert run_kinject("grid", "run", str(grid), "--only", "*/finetune/*", "--only", "*/kimera-no-mask/*") == 0
    rows = {row["arm"]: row for row in results_board.grid_rows(grid, None)}
    done = rows["kimera-no-mask"]
    assert done["variant"] == "kimera/no-mask" and done["seeds"] == "2 of 2" and done["draws"] == "1"
    assert done["delta"].count("[") == 1 and done["verdict"] != "-" and done["cost"] != "-"
    assert rows["kimera"]["delta"].startswith("waits for a GPU")
