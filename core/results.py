"""Summaries of results over seeds, shared by ``--repeats`` and the STILT matrix, and their table."""

from __future__ import annotations


import statistics
from typing import Any, Sequence


def seed_stats(values: Sequence[float]) -> dict[str, Any]:
    """{mean, std (sample std, ddof 1; 0.0 for one value), n, values} of one metric over seeds."""
    values = list(values)
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 seed``, ``3 seeds``, ``0 cells``: a count and its noun, singular for exactly 1 (``many``: an irregular
    plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


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


def _number(value: float) -> str:
    """4 decimals, or 4 significant digits for a large or tiny value (a perplexity of 1.8e9 is not 19 digits)."""
    return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e4 else f"{value:.4g}"


def _shown(value) -> str:
    if isinstance(value, dict) and "mean" in value:
        return f"{_number(value['mean'])} ± {_number(value['std'])} (n={value['n']})"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    return str(value)


def _mean(value):
    return value["mean"] if isinstance(value, dict) and "mean" in value else value


def print_metrics(console, title: str, metrics: dict, splits: list[str] | tuple[str, ...] | None = None) -> None:
    """A run's task metrics per split ({split: {metric: value}}, or their mean ± std over seeds) as a rich table on
    ``console`` - only the evaluation splits (``splits``; default: every section of plain numbers that is not a known
    diagnostic) - then one line each for its knowledge probe, its knowledge dose and its paired comparison. Other
    sections (training statistics, corpus counts, perplexities) stay in metrics.json and the run's report."""
    from rich.table import Table

    known = ("train", "comparison", "dose", "probe", "corpus", "mlm", "head", "perplexity", "pretrain", "teacher",
             "report", "architecture")
    shown = [s for s in (splits or [k for k in metrics if k not in known]) if isinstance(metrics.get(s), dict)]
    table = Table(title=title, title_justify="left")
    table.add_column("split")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for split in shown:
        for name, value in metrics[split].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) or \
                    isinstance(value, dict) and "mean" in value:
                table.add_row(split, name, _shown(value))
    console.print(table)
    probe = metrics.get("probe")
    if isinstance(probe, dict) and _mean(probe.get("auroc")) is not None:
        low, high = _mean(probe.get("gain_auroc_low")), _mean(probe.get("gain_auroc_high"))
        interval = f" [{low:+.4f}, {high:+.4f}]" if isinstance(low, float) and isinstance(high, float) else ""
        kind = "generalisation" if _mean(probe.get("generalisation")) else "memorisation"
        console.print(f"knowledge probe ({kind}): AUROC {_shown(probe['auroc'])} (base model "
                      f"{_shown(probe.get('base_auroc'))}), gain {_mean(probe.get('gain_auroc')):+.4f}{interval}"
                      + (f": {sentence}" if (sentence := probe_sentence(low, high)) else ""),
                      highlight=False, soft_wrap=True)
    dose = metrics.get("dose")
    if isinstance(dose, dict) and "distinct" in dose:
        from kinject.knowledge import dose_line

        try:  # over --repeats the numbers are summaries: their means
            console.print(dose_line({k: _mean(v) for k, v in dose.items()}), highlight=False, soft_wrap=True)
        except (KeyError, TypeError, ValueError):
            pass
    comparison = metrics.get("comparison")
    if isinstance(comparison, dict) and isinstance(comparison.get("difference"), dict):  # --repeats: over seeds
        console.print(f"comparison (paired, per seed): difference {_shown(comparison['difference'])}", soft_wrap=True)
    elif isinstance(comparison, dict) and "difference" in comparison:
        c = comparison
        verdict = str(c.get("verdict") or "")
        note = f" ({verdict})" if verdict.startswith("not learned") or not c.get("identical") and verdict else \
            " (identical predictions)" if c.get("identical") else ""
        console.print(f"[bold]{c['other_name']} vs {c['baseline_name']}[/] on {c['split']} {c['metric']}: "
                      f"{c['other']:.4f} vs {c['baseline']:.4f}, difference {c['difference']:+.4f} "
                      f"({c['confidence']:.0%} paired bootstrap CI {c['ci_low']:+.4f} .. {c['ci_high']:+.4f}, "
                      f"n={c['n']} examples; one seed: these models){note}", soft_wrap=True)
        for side, flag in (c.get("not_learned") or {}).items():
            if isinstance(flag, dict) and flag.get("reason"):
                name = c.get("baseline_name") if side == "baseline" else c.get("other_name")
                console.print(f"not learned: {name}: {flag['reason']}", highlight=False, soft_wrap=True)


def probe_sentence(low, high) -> str:
    """One plain sentence for a probe AUROC gain whose interval excludes 0 (else "")."""
    if not (isinstance(low, float) and isinstance(high, float)):
        return ""
    if high < 0:
        return ("the probe's AUROC fell below the base model's: this model's frozen features separate these facts "
                "less well than the base model's did")
    if low > 0:
        return ("the probe's AUROC rose above the base model's: this model's frozen features separate these facts "
                "better than the base model's did")
    return ""


def load(run_dir) -> Any:
    """A run folder that ``kinject run`` (or ``--repeats``, or a grid cell) wrote, as :class:`kinject.RunResult`:
    its metrics.json by split, ``.output`` the folder. A folder without a readable metrics.json mapping is one line
    (a :class:`kinject.errors.DataError` naming it)."""
    import json
    from pathlib import Path

    from kinject.errors import DataError, DataMissingError
    from kinject.notebook import RunResult

    folder = Path(run_dir).expanduser()
    path = folder / "metrics.json"
    if not path.is_file():
        raise DataMissingError("no metrics.json: not a finished run folder (kinject run writes it last)",
                               folder if not folder.is_dir() else path)
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not readable JSON ({exc})", path) from None
    if not isinstance(metrics, dict):
        raise DataError(f"expected a mapping of split -> metrics, got a {type(metrics).__name__}", path)
    return RunResult(metrics, folder)
