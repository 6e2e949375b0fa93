"""Summaries of results over seeds, shared by ``--repeats`` and the STILT matrix, and their table."""

from __future__ import annotations

__kinject_fingerprint__ = False  # summaries of finished runs: computes nothing a stage writes

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


def _shown(value) -> str:
    if isinstance(value, dict) and "mean" in value:
        return f"{value['mean']:.4f} ± {value['std']:.4f} (n={value['n']})"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def print_metrics(console, title: str, metrics: dict) -> None:
    """A run's metrics ({split: {metric: value}}, or their mean ± std over seeds) as a rich table on ``console``,
    with its paired comparison when it has one."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("split")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for split, values in metrics.items():
        if split in ("train", "comparison", "dose") or not isinstance(values, dict):
            continue
        for name, value in values.items():
            if isinstance(value, (dict, int, float)) and not isinstance(value, bool):
                table.add_row(split, name, _shown(value))
    console.print(table)
    comparison = metrics.get("comparison")
    if isinstance(comparison, dict) and isinstance(comparison.get("difference"), dict):  # --repeats: over seeds
        console.print(f"comparison (paired, per seed): difference {_shown(comparison['difference'])}", soft_wrap=True)
    elif isinstance(comparison, dict) and "difference" in comparison:
        c = comparison
        console.print(f"[bold]{c['other_name']} vs {c['baseline_name']}[/] on {c['split']} {c['metric']}: "
                      f"{c['other']:.4f} vs {c['baseline']:.4f}, difference {c['difference']:+.4f} "
                      f"({c['confidence']:.0%} paired bootstrap CI {c['ci_low']:+.4f} .. {c['ci_high']:+.4f}, "
                      f"n={c['n']} examples)", soft_wrap=True)
