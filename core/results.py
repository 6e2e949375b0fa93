"""Summaries of results over seeds, shared by ``--repeats`` and the STILT matrix."""

from __future__ import annotations

import statistics
from typing import Any, Sequence


def seed_stats(values: Sequence[float]) -> dict[str, Any]:
    """{mean, std (sample std, ddof 1; 0.0 for one value), n, values} of one metric over seeds."""
    values = list(values)
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


def summarize_seeds(per_seed: dict[int, dict]) -> dict[str, dict[str, dict[str, Any]]]:
    """split -> metric -> :func:`seed_stats`, for every numeric metric that every seed reports.

    ``per_seed``: seed -> {split: {metric: value}} (non-dict splits and non-numeric values are left out).
    """
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    first = next(iter(per_seed.values()), {})
    for split, values in first.items():
        if not isinstance(values, dict):
            continue
        summary[split] = {}
        for name in values:
            series = [m[split][name] for m in per_seed.values()
                      if isinstance(m.get(split, {}).get(name), (int, float))]
            if len(series) == len(per_seed):
                summary[split][name] = seed_stats(series)
    return summary
