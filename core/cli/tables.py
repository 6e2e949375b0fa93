"""A run's metrics as the front ends print them: the table of a run's task metrics per split, then the sections
:mod:`.sections` shows (`kinject run`, `kinject eval`)."""

from __future__ import annotations

from kinject.evidence import format_value


def print_metrics(console, title: str, metrics: dict, splits: list[str] | tuple[str, ...] | None = None) -> None:
    """A run's task metrics per split ({split: {metric: value}}, or their mean ± std over seeds) as a rich table on
    ``console`` - only the evaluation splits (``splits``; default: every section of plain numbers that is not a known
    diagnostic) - then the sections :func:`kinject.cli.sections.show_section` shows (the knowledge probe,
    the knowledge dose, the paired comparison). Other sections (training statistics, corpus counts, perplexities)
    stay in metrics.json and the run's report."""
    from rich.markup import escape
    from rich.table import Table

    from kinject.cli.sections import show_section

    known = ("train", "comparison", "dose", "probe", "corpus", "mlm", "head", "perplexity", "pretrain", "teacher",
             "report", "architecture")
    shown = [s for s in (splits or [k for k in metrics if k not in known]) if isinstance(metrics.get(s), dict)]
    table = Table(title=escape(title), title_justify="left")  # names and paths are text, not markup
    table.add_column("split")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for split in shown:
        for name, value in metrics[split].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) or \
                    isinstance(value, dict) and "mean" in value:
                table.add_row(escape(split), escape(name), format_value(value))
    console.print(table)
    for name, section in metrics.items():
        if name not in shown:
            show_section(console, name, section)
