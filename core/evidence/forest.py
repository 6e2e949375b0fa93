"""The forest plot: every comparison's difference to its baseline with its intervals, one row each, on one axis -
the figure a reader of a comparison wants first (``kinject report``, the grid leaderboard)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


COLOURS = {"gain": "#1b7837", "loss": "#b2182b", "no evidence": "#4d4d4d", "identical predictions": "#9e9e9e",
           "1 seed: no verdict": "#7f7f7f", "not learned": "#e08214"}


def colour(verdict: str) -> str:
    return COLOURS["not learned"] if verdict.startswith("not learned") else COLOURS.get(verdict, "#4d4d4d")


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


def rows_of(result: dict, prefix: str = "") -> list[ForestRow]:
    """The forest rows of a `kinject compare` result (every metric, every arm but the baseline)."""
    from kinject.evidence.tables import paired_count, shown_verdict

    out = []
    for block in result.get("metrics", []):
        for row in block["rows"][1:]:
            label = f"{prefix}{row['run']} ({block['metric']})"
            out.append(ForestRow(label, row["difference"], row["ci_low"], row["ci_high"], shown_verdict(row),
                                 row.get("ci_low_examples"), row.get("ci_high_examples"), paired_count(row),
                                 row.get("interval", "")))
    return out


def forest_plot(rows: list[ForestRow], path: Path, title: str) -> Path | None:
    """Draw ``rows`` (top to bottom) into the PNG ``path``: a dot at each difference, a thick bar for
    the verdict's interval (over seeds and examples; over examples only with one seed, as its note says), a thin one
    for the interval over examples only, coloured by verdict, with the zero line; labels never clipped. None when
    there is nothing to draw."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 1.2 + 0.42 * len(rows)
    width = 7.5 + min(4.0, max(len(r.label) for r in rows) * 0.055)
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    for y, row in enumerate(reversed(rows)):
        tint = colour(row.verdict)
        if row.low_examples is not None and row.high_examples is not None:
            ax.plot([row.low_examples, row.high_examples], [y, y], color=tint, linewidth=1.0, alpha=0.55)
        ax.plot([row.low, row.high], [y, y], color=tint, linewidth=3.2, solid_capstyle="butt")
        ax.plot([row.difference], [y], "o", color=tint, markersize=6)
        note = (row.verdict if row.verdict.startswith("1 seed") else f"{row.verdict}, {seeds_text(row.seeds)}") \
            + (" (examples only)" if row.seeds < 2 else "")
        ax.annotate(note, (row.high, y), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                    color=tint)
    ax.axvline(0.0, color="black", linewidth=0.9, linestyle="--")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r.label for r in reversed(rows)], fontsize=9)
    lows = [min(r.low, r.low_examples if r.low_examples is not None else r.low, 0.0) for r in rows]
    highs = [max(r.high, r.high_examples if r.high_examples is not None else r.high, 0.0) for r in rows]
    span = max(max(highs) - min(lows), 1e-3)
    ax.set_xlim(min(lows) - 0.05 * span, max(highs) + 0.35 * span)  # room for the verdict beside each bar
    ax.set_ylim(-0.7, len(rows) - 0.3)
    kinds = sorted({r.interval for r in rows if r.interval})
    thick = kinds[0] if len(kinds) == 1 else "the verdict's interval, per row"
    ax.set_xlabel(f"difference to the baseline (95% CI: thick, {thick}; thin, examples only)", fontsize=9)
    ax.set_title(title, fontsize=10, loc="left", wrap=True)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
