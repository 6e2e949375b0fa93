"""The forest plot of a small effect: its axis holds 0 and spans at least MIN_SPAN, its bars are named for the
interval they show, a smoke run says so on the figure, and no label is cut off."""

from __future__ import annotations

import pytest

from kinject.evidence.forest import MIN_SPAN, ForestRow, forest_plot, x_limits


def _row(difference: float, low: float, high: float, seeds: int = 5, **kw) -> ForestRow:
    return ForestRow("kimera (accuracy)", difference, low, high, kw.pop("verdict", "no evidence"),
                     low - 0.0001, high + 0.0001, seeds, kw.pop("interval", "seeds (t) × examples"), **kw)


@pytest.mark.parametrize("row", [_row(0.0004, 0.0001, 0.0007), _row(0.0, -0.0003, 0.0003),
                                 _row(-0.0004, -0.0009, -0.0002)])
def test_a_0004_difference_gets_an_axis_that_holds_0_and_spans_at_least_min_span(row):
    low, high = x_limits([row])
    assert low < 0 < high and high - low >= MIN_SPAN
    assert low <= row.low_examples and row.high_examples <= high  # every bar inside it


def test_a_large_effect_keeps_its_own_span_and_0():
    low, high = x_limits([_row(0.08, 0.05, 0.10)])
    assert low < 0 and 0.10 < high < 0.12


def _drawn(monkeypatch, tmp_path, rows):
    import matplotlib.pyplot as plt

    kept = {}
    monkeypatch.setattr(plt, "close", lambda fig: kept.setdefault("fig", fig))
    assert forest_plot(rows, tmp_path / "f.png", "Each arm minus its baseline").exists()
    return kept["fig"]


def test_the_figure_names_its_bars_warns_of_a_smoke_run_and_cuts_off_no_label(monkeypatch, tmp_path):
    smoke = "smoke run, not comparable: tiny random model"
    rows = [_row(0.0004, 0.0001, 0.0007, verdict="gain, conditional on one kimera-retrain", smoke=smoke),
            ForestRow("stilt (accuracy)", 0.0002, -0.001, 0.0015, "1 seed: no verdict", -0.001, 0.0015, 1,
                      "examples")]
    fig = _drawn(monkeypatch, tmp_path, rows)
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    assert low < 0 < high and high - low >= MIN_SPAN
    assert "thick, the verdict's interval, per row; thin, examples only" in ax.get_xlabel()
    assert smoke in ax.get_title(loc="left") and "[smoke run]" in ax.get_yticklabels()[1].get_text()
    renderer = fig.canvas.get_renderer()
    saved = fig.get_tightbbox(renderer)  # what bbox_inches="tight" keeps
    texts = [t for t in ax.texts] + list(ax.get_yticklabels())
    assert texts and all(saved.x0 - 1 <= t.get_window_extent(renderer).x0 / fig.dpi and
                         t.get_window_extent(renderer).x1 / fig.dpi <= saved.x1 + 1 for t in texts)
    right = ax.get_window_extent(renderer).x1
    assert all(t.get_window_extent(renderer).x0 > right for t in ax.texts)  # verdicts beside the axis, not on bars
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y1 < ax.get_window_extent(renderer).y0  # below the axis: it covers no bar


def test_one_seed_rows_name_one_bar_over_examples_only(monkeypatch, tmp_path):
    fig = _drawn(monkeypatch, tmp_path, [ForestRow("a", 0.0004, 0.0001, 0.0007, "1 seed: no verdict", 0.0001,
                                                   0.0007, 1, "examples")])
    assert fig.axes[0].get_xlabel() == "difference to the baseline (95% CI over examples only (1 seed: no verdict))"
    assert len(fig.axes[0].lines) == 3  # the bar, the dot, the zero line: no second bar
