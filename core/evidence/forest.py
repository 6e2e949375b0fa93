"""The forest plot: every comparison's difference to its baseline with its intervals, one row each, on one axis -
the figure a reader of a comparison wants first (``kinject report``, the grid leaderboard).

The axis always holds 0 and spans at least :data:`MIN_SPAN`, so a difference of 0.0004 reads as the tiny effect it
is, not as a bar across the whole figure. Verdicts sit in a column right of the axis and the legend below it, so
neither covers a bar, and the saved figure is cropped to hold every label. A smoke run's row says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


COLOURS = {"gain": "#1b7837", "loss": "#b2182b", "no evidence": "#4d4d4d", "identical predictions": "#9e9e9e",
           "1 seed: no verdict": "#7f7f7f", "not learned": "#e08214"}
MIN_SPAN = 0.02  # the axis spans at least this much (2 points of accuracy): small effects look small
EXAMPLES_ONLY = "examples only"


def colour(verdict: str) -> str:
    """The verdict's colour, by its first words (``gain, conditional on one ...`` is a gain)."""
    return next((tint for name, tint in COLOURS.items() if verdict.startswith(name)), "#4d4d4d")


def seeds_text(seeds: int) -> str:
    """``1 seed``, ``3 seeds†`` (fewer than 5 paired: provisional), ``unpaired``."""
    if seeds == 0:
        return "unpaired seeds"
    from kinject.evidence import plural

    return plural(seeds, "seed") + ("†" if 2 <= seeds < 5 else "")


@dataclass
class ForestRow:
    """One comparison: a label, the difference and its two intervals, the verdict, the seeds paired."""

    label: str
    difference: float
    low: float
    high: float
    verdict: str
    low_examples: float | None = None
    high_examples: float | None = None
    seeds: int = 1
    interval: str = ""  # what the thick bar is over (the verdict's interval), in words
    smoke: str | None = None  # "smoke run, not comparable: ..." when either side is one


def row_of(label: str, row: dict, smoke: str | None = None) -> ForestRow:
    """The forest row of one comparison row (``kinject compare``'s, or a leaderboard's)."""
    from kinject.evidence.tables import paired_count, shown_verdict

    return ForestRow(label, row["difference"], row["ci_low"], row["ci_high"], shown_verdict(row),
                     row.get("ci_low_examples"), row.get("ci_high_examples"), paired_count(row),
                     row.get("interval", ""), smoke)


def rows_of(result: dict, prefix: str = "") -> list[ForestRow]:
    """The forest rows of a `kinject compare` result (every metric, every arm but the baseline)."""
    out = []
    for block in result.get("metrics", []):
        base_smoke = block["rows"][0].get("smoke")
        for row in block["rows"][1:]:
            out.append(row_of(f"{prefix}{row['run']} ({block['metric']})", row, row.get("smoke") or base_smoke))
    return out


def _finite(*values: float | None) -> list[float]:
    import math

    return [v for v in values if v is not None and math.isfinite(v)]


def x_limits(rows: list[ForestRow]) -> tuple[float, float]:
    """The axis: every interval and 0, widened to :data:`MIN_SPAN` around their middle, plus a margin."""
    values = [0.0] + [v for r in rows for v in _finite(r.low, r.high, r.low_examples, r.high_examples, r.difference)]
    low, high = min(values), max(values)
    if high - low < MIN_SPAN:
        middle = (low + high) / 2
        low, high = min(low, middle - MIN_SPAN / 2), max(high, middle + MIN_SPAN / 2)
    margin = 0.06 * (high - low)
    return low - margin, high + margin


def _bars_text(rows: list[ForestRow]) -> str:
    """What the bars are over: the verdict's interval (thick) and examples only (thin); one bar where they are the
    same (every row one seed)."""
    kinds = sorted({r.interval for r in rows if r.interval})
    if all(r.seeds < 2 for r in rows):
        return f"95% CI over {EXAMPLES_ONLY} (1 seed: no verdict)"
    thick = kinds[0] if len(kinds) == 1 else "the verdict's interval, per row"
    return f"95% CI: thick, {thick}; thin, {EXAMPLES_ONLY} (these models)"


def forest_plot(rows: list[ForestRow], path: Path, title: str) -> Path | None:
    """Draw ``rows`` (top to bottom) into the PNG ``path``: a dot at each difference, a thick bar for the verdict's
    interval, a thin one for the interval over examples only (one bar where they coincide), coloured by verdict,
    with the zero line; the verdicts in a column right of the axis, the legend below it. None when there is nothing
    to draw."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    labels = [r.label + (" [smoke run]" if r.smoke else "") for r in rows]
    height = 2.0 + 0.42 * len(rows)
    fig, ax = plt.subplots(figsize=(7.5, height), dpi=110)
    for y, row in enumerate(reversed(rows)):
        tint = colour(row.verdict)
        two = row.seeds >= 2 and row.low_examples is not None and row.high_examples is not None
        if two:
            ax.plot([row.low_examples, row.high_examples], [y, y], color=tint, linewidth=1.0, alpha=0.55)
        ax.plot([row.low, row.high], [y, y], color=tint, linewidth=3.2, solid_capstyle="butt")
        ax.plot([row.difference], [y], "o", color=tint, markersize=6)
        note = row.verdict if row.verdict.startswith("1 seed") else f"{row.verdict}, {seeds_text(row.seeds)}"
        ax.annotate(note, xy=(1.02, y), xycoords=("axes fraction", "data"), va="center", fontsize=8, color=tint,
                    annotation_clip=False)
    ax.axvline(0.0, color="black", linewidth=0.9, linestyle="--")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=9)
    ax.set_xlim(*x_limits(rows))
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"difference to the baseline ({_bars_text(rows)})", fontsize=9)
    smoke = sorted({r.smoke for r in rows if r.smoke})
    ax.set_title(title + "".join(f"\n{text}" for text in smoke), fontsize=10, loc="left", wrap=True)
    ax.grid(axis="x", alpha=0.3)
    shown = list(dict.fromkeys(name for r in rows for name in COLOURS if r.verdict.startswith(name)))
    handles = [Line2D([], [], color=COLOURS[name], linewidth=3.2, label=name) for name in shown]
    if any(r.seeds >= 2 for r in rows):
        handles.append(Line2D([], [], color="#4d4d4d", linewidth=1.0, alpha=0.55, label=EXAMPLES_ONLY))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.16 - 1.2 / height), ncol=3, fontsize=8,
              frameon=False)  # below the axis and its label: it covers no bar
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")  # cropped to every label and the legend: nothing clipped
    plt.close(fig)
    return path
