"""A run's metrics as the front ends print them: a value to 4 decimals or as ``mean ± std (n=N)`` over seeds, and the
table of a run's task metrics per split followed by each section a library shows (the ``kinject_show_section``
hook). `kinject run`, `kinject eval` and the libraries' section printers share it."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 seed``, ``3 seeds``, ``0 cells``: a count and its noun, singular for exactly 1 (``many``: an irregular
    plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def _number(value: float) -> str:
    """4 decimals, or 4 significant digits for a large or tiny value (a perplexity of 1.8e9 is not 19 digits)."""
    return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e4 else f"{value:.4g}"


def format_value(value) -> str:
    """A metric value as the tables show it: a number to 4 decimals (4 significant digits when large or tiny), a
    summary over seeds (:func:`.repeats.summarize_seeds`) as ``mean ± std (n=N)``, anything else as text."""
    if isinstance(value, dict) and "mean" in value:
        return f"{_number(value['mean'])} ± {_number(value['std'])} (n={value['n']})"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    return str(value)


def print_metrics(console, title: str, metrics: dict, splits: list[str] | tuple[str, ...] | None = None) -> None:
    """A run's task metrics per split ({split: {metric: value}}, or their mean ± std over seeds) as a rich table on
    ``console`` - only the evaluation splits (``splits``; default: every section of plain numbers that is not a known
    diagnostic) - then each other section a library shows (the ``kinject_show_section`` hook: the knowledge probe,
    the knowledge dose, the paired comparison). Other sections (training statistics, corpus counts, perplexities)
    stay in metrics.json and the run's report."""
    from rich.table import Table

    from kinject.api import plugin_manager

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
                table.add_row(split, name, format_value(value))
    console.print(table)
    show = plugin_manager().hook.kinject_show_section
    for name, section in metrics.items():
        if name not in shown:
            show(console=console, name=name, section=section)
