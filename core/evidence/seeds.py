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

    summary = (walk(list(per_seed.values())) or {}) if per_seed else {}
    named = _comparison_names(list(per_seed.values()))
    if named and isinstance(summary.get("comparison"), dict):
        summary["comparison"].update(named)
    return summary


COMPARISON_NAMES = ("other_name", "baseline_name", "split", "metric")  # what a comparison line names


def _comparison_names(values: list[Any]) -> dict[str, str]:
    """The names of the paired comparison every seed made (its two systems, split and metric), when every seed
    names the same: the summary's comparison line says what was compared, as one seed's does."""
    sections = [v.get("comparison") for v in values if isinstance(v, dict)]
    if not sections or len(sections) < len(values) or not all(isinstance(c, dict) for c in sections):
        return {}
    found = {key: sections[0].get(key) for key in COMPARISON_NAMES}
    same = all(isinstance(value, str) and all(c.get(key) == value for c in sections) for key, value in found.items())
    return found if same else {}
