"""The summary of a run's results over seeds (``--repeats``, the STILT matrix's cells): mean ± sample std per
metric."""

from __future__ import annotations

import statistics
from typing import Any, Sequence


def seed_stats(values: Sequence[float]) -> dict[str, Any]:
    """{mean, std (sample std, ddof 1; 0.0 for one value), n, values} of one metric over seeds."""
    values = list(values)
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


def summarize_seeds(per_seed: dict[int, dict]) -> dict[str, Any]:
    """:func:`seed_stats` of every numeric value that every seed reports, at any depth of the metrics.

    ``per_seed``: seed -> metrics ({split: {metric: value}}, or a task group's nested summary); values
    that are not numbers (or missing for some seed) are left out.
    """
    def walk(values: list[Any]) -> Any:
        first = values[0]
        if isinstance(first, dict):
            out = {}
            for name in first:
                if all(isinstance(v, dict) and name in v for v in values):
                    summary = walk([v[name] for v in values])
                    if summary is not None:
                        out[name] = summary
            return out or None
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return seed_stats([float(v) for v in values])
        return None

    return (walk(list(per_seed.values())) or {}) if per_seed else {}
