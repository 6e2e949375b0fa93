"""The report stage (``mymethod-report``): the metric of the baseline and of the method side by side, per split
(``report.json``, exported into the run folder)."""

from __future__ import annotations

import json

from kinject.api import StageConfig, StageContext, is_main_process


class ReportConfig(StageConfig):
    """The two evaluations the report reads (their stage names) and the metric it puts side by side."""

    baseline: str
    method: str
    metric: str


def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    if not is_main_process():
        return
    base, ours = (json.loads((ctx.inputs[name] / "metrics.json").read_text()) for name in (cfg.baseline, cfg.method))
    splits = {split: {"finetune": base[split][cfg.metric], "mymethod": scores[cfg.metric],
                      "delta": scores[cfg.metric] - base[split][cfg.metric]}
              for split, scores in ours.items() if cfg.metric in scores and cfg.metric in base.get(split, {})}
    (ctx.out / "report.json").write_text(json.dumps({"metric": cfg.metric, "splits": splits}, indent=2))
