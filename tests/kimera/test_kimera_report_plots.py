"""KIMERA's per-layer plot (figure 3): integer layer ticks, bar pairs centred on them, every y axis labelled."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from kinject.plugins.kimera.report import bars_figure, importance_table, write_analysis  # noqa: E402


def _tiny(layers: int = 2, heads: int = 4):
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])[:layers, :heads]
    before = torch.linspace(0, 1, layers * heads).reshape(layers, heads)
    after = before.flip(1)
    return mask, before, after


def test_per_layer_plot_has_integer_layer_ticks_centred_bars_and_y_labels():
    mask, before, after = _tiny()
    fig = bars_figure(importance_table(mask, before, after))
    fig.canvas.draw()
    try:
        assert len(fig.axes) == 3
        for ax in fig.axes:
            labels = [t.get_text().replace("\u2212", "-") for t in ax.get_xticklabels()]
            assert labels == ["0", "1"], labels
            assert list(ax.get_xticks()) == [0, 1]
            assert ax.get_ylabel(), ax.get_title()
            assert ax.get_xlabel() == "layer"
            centres = sorted(p.get_x() + p.get_width() / 2 for p in ax.patches)
            assert len(centres) == 4  # two series x two layers
            for layer in (0, 1):  # each pair (before/after, rose/fell) straddles its layer symmetrically
                pair = [c for c in centres if abs(c - layer) < 0.5]
                assert len(pair) == 2 and sum(pair) / 2 == pytest.approx(layer)
        for ax in fig.axes[1:]:  # counts of heads: whole numbers on the y axis
            ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
            assert ticks and all(float(t).is_integer() for t in ticks), ticks
            assert "count" in ax.get_ylabel()
    finally:
        plt.close(fig)


def test_write_analysis_draws_the_four_plots(tmp_path):
    mask, before, after = _tiny()
    table = write_analysis(tmp_path, mask, before, after, "hard")
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "1-mask.png", "2-importance-before.png", "3-importance-after.png", "4-importance-per-layer.png"]
    assert [row["layer"] for row in table["per_layer"]] == [0, 1]
    assert (tmp_path / "analysis.json").exists()
