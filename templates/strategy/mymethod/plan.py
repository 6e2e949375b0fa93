"""mymethod's plan: what validation resolves (``Resolved``, by ``resolve``: everything that can fail on user input,
before any stage) and the builders of its stages. No stage body imports this module, so it is in no stage's key."""

from __future__ import annotations

import dataclasses

from kinject.api import SpecError, Stage
from kinject.evidence import compare_stage
from kinject.training import evaluate_stage, finetune_stage

from .config import MyMethodConfig
from .freeze import FrozenEmbeddingsConfig
from .report import report_body
from .stages import ReportConfig

FINETUNE, EVALUATE = "mymethod-finetune", "mymethod-evaluate"
COMPARE, REPORT = "mymethod-compare", "mymethod-report"


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``MyMethodStrategy.validate`` resolved for its stages (``run.resolved``)."""

    metric: str  # the metric the comparison and the report read


def resolve(run, cfg: MyMethodConfig) -> Resolved:
    metric = cfg.metric or run.task.primary_metric()
    if metric not in run.task.metric_names():
        raise SpecError(f"strategy.metric: task {run.task.name!r} reports no {metric!r} "
                        f"(has: {', '.join(run.task.metric_names())})")
    return Resolved(metric=metric)


def method_stages(run, cfg: MyMethodConfig) -> list[Stage]:
    """``mymethod-finetune`` (from the base model, embeddings frozen) and ``mymethod-evaluate``."""
    tune = finetune_stage(run, FINETUNE)
    config = FrozenEmbeddingsConfig(**dict(tune.config), freeze_embeddings=cfg.freeze_embeddings)
    return [dataclasses.replace(tune, config=config), evaluate_stage(run, FINETUNE, name=EVALUATE)]


def report_stages(run, resolved: Resolved) -> list[Stage]:
    """``mymethod-compare`` (paired, against the baseline's ``evaluate``) and ``mymethod-report``."""
    config = ReportConfig(baseline="evaluate", method=EVALUATE, metric=resolved.metric)
    return [compare_stage(run, baseline="evaluate", other=EVALUATE, name=COMPARE, labels=("finetune", "mymethod"),
                          metric=resolved.metric),
            Stage(name=REPORT, body=report_body, config=config, inputs=("evaluate", EVALUATE),
                  artifacts=("report.json",))]
