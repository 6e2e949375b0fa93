"""The run's metrics with a task (the report stage), and the chart of `kinject vocab compare`."""

from __future__ import annotations

import json
from pathlib import Path

from kinject.api import StageConfig, StageContext, is_main_process


class ReportConfig(StageConfig):
    """The run's metrics with a task: the task metrics of ``task_stage`` and those of ``perplexity_stage``."""

    perplexity_stage: str
    task_stage: str


def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    """``metrics.json`` = the task metrics + the held-out perplexity, corpus and MLM statistics."""
    if not is_main_process():
        return
    task = json.loads((ctx.inputs[cfg.task_stage] / "metrics.json").read_text())
    pretrain = json.loads((ctx.inputs[cfg.perplexity_stage] / "metrics.json").read_text())
    (ctx.out / "metrics.json").write_text(json.dumps({**task, **pretrain}, indent=2, default=str))


def pieces_chart(path: Path, rows: list[dict], names: list[str]) -> None:
    """A bar chart (PNG) of the pieces each tokenizer splits each term into (`kinject vocab compare --png`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from kinject.api import atomic_file

    x = np.arange(len(rows))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(rows)), 3.6))
    for i, name in enumerate(names):
        ax.bar(x + i * width - 0.4 + width / 2, [len(r["pieces"][name]) for r in rows], width, label=name)
    ax.set_xticks(x, [r["term"] for r in rows], rotation=60, ha="right")
    ax.set_ylabel("pieces")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
