"""Many comparisons at once: Holm's step-down adjustment of their p-values, with one pre-declared headline left
unadjusted. A grid file names its headline (``headline:``); the leaderboard and the report show every comparison's
raw p-value and verdict beside the adjusted ones.

The p-value of a comparison is that of its verdict's interval (:func:`~kinject.evidence.bootstrap.replicate_p_value`:
twice the share of replicates beyond 0), so a raw p under 0.05 is the interval excluding 0. Holm (1979, Scand. J.
Statist. 6(2)) controls the chance of any false gain or loss among the adjusted comparisons at 0.05, whatever their
dependence. It only raises p-values: an adjusted verdict is the raw one, or "no evidence".
"""

from __future__ import annotations

from typing import Iterable, Sequence

from kinject.evidence.bootstrap import ONE_SEED

TESTED = ("gain", "loss", "no evidence")  # the verdicts of a comparison that is a test
HEADLINE = "headline (not adjusted)"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given: the i-th smallest p times (m - i + 1), made monotone, at most
    1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted


def is_test(row: dict) -> bool:
    """Whether a comparison row is a test Holm counts: a verdict over two or more paired seeds (not one seed, not a
    void baseline, not identical predictions) with a p-value."""
    return (row.get("verdict") in TESTED and row.get("p_value") is not None and not row.get("identical")
            and row.get("verdict") != ONE_SEED)


def adjust(rows: Iterable[dict], headline: dict | None = None, level: float = 0.95) -> int:
    """Set ``p_holm`` and ``verdict_holm`` on every test among ``rows`` but ``headline`` (in place), Holm-adjusted
    together, and mark ``headline`` (``headline: True``; its verdict stays unadjusted). Returns how many were
    adjusted."""
    tested = [row for row in rows if row is not headline and is_test(row)]
    for row, p in zip(tested, holm([row["p_value"] for row in tested])):
        row["p_holm"] = p
        row["verdict_holm"] = row["verdict"] if p < 1 - level else "no evidence"
        row["family"] = len(tested)
    if headline is not None:
        headline["headline"] = True
    return len(tested)


def p_cell(row: dict) -> str:
    """``0.0040 (Holm 0.0160)``; ``0.0040 (headline: not adjusted)``; ``-`` without a p-value."""
    p = row.get("p_value")
    if p is None:
        return "-"
    text = f"{p:.3g}"
    if row.get("headline"):
        return f"{text} ({HEADLINE})"
    return text + (f" (Holm {row['p_holm']:.3g})" if row.get("p_holm") is not None else "")
