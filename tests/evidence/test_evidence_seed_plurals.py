"""Counts of seeds and cells read "1 seed" / "1 cell", never "1 seeds" (issue 42), through one helper."""

from __future__ import annotations

from kinject.evidence import plural
from kinject.evidence.forest import seeds_text
from kinject.experiments.grid_state import CellState, counts


def test_plural_is_singular_only_for_one():
    assert [plural(n, "seed") for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]
    assert plural(1, "analysis", "analyses") == "1 analysis" and plural(3, "analysis", "analyses") == "3 analyses"


def test_grid_status_counts_and_forest_notes_use_the_singular():
    assert counts({"t/finetune/seed-42": CellState("done")}) == "1 cell: 1 done, 0 running, 0 failed, 0 pending"
    assert counts({"a": CellState("done"), "b": CellState("failed")}).startswith("2 cells: 1 done")
    assert seeds_text(1) == "1 seed" and seeds_text(3) == "3 seeds†" and seeds_text(5) == "5 seeds"
