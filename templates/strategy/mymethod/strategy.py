"""The `mymethod` strategy: its config, what ``validate`` checks, and the stages it builds.

Stages: ``finetune`` + ``evaluate`` (the shared baseline: the `finetune` strategy's own stages and keys),
``mymethod-finetune`` + ``mymethod-evaluate`` (the base model fine-tuned with its embeddings frozen),
``mymethod-compare`` (paired against the baseline) and ``mymethod-report`` (:mod:`.report`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from pydantic import Field

from kinject.api import PluginConfig, SpecError, Stage, StageContext, Strategy
from kinject.evidence import compare_stage
from kinject.training import FinetuneConfig, evaluate_stage, finetune_stage

from .report import ReportConfig, report_body

FINETUNE, EVALUATE = "mymethod-finetune", "mymethod-evaluate"


class MyMethodConfig(PluginConfig):
    """Options of the `mymethod` strategy."""

    freeze_embeddings: bool = Field(True, description="Fine-tune with the word embeddings frozen.")
    metric: str | None = Field(None, description="The metric the comparison and the report read (default: the "
                               "task's primary metric).")


class FrozenEmbeddingsConfig(FinetuneConfig):
    """Fine-tune the task model with its input embeddings frozen (when ``freeze_embeddings``)."""

    freeze_embeddings: bool = True

    def prepare_model(self, model, ctx: StageContext):
        if self.freeze_embeddings:
            for param in model.get_input_embeddings().parameters():
                param.requires_grad = False
        return model


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``validate`` resolved for the stages (``run.resolved``)."""

    metric: str  # the metric the comparison and the report read


class MyMethodStrategy(Strategy):
    """mymethod: fine-tune with the word embeddings frozen, against plain fine-tuning."""

    Config: ClassVar = MyMethodConfig
    protocols: ClassVar[dict] = {"quick": {"training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail on user input fails here, before any stage runs."""
        super().validate(run)
        metric = self.config.metric or run.task.primary_metric()
        if metric not in run.task.metric_names():
            raise SpecError(f"strategy.metric: task {run.task.name!r} reports no {metric!r} "
                            f"(has: {', '.join(run.task.metric_names())})")
        return Resolved(metric=metric)

    def stages(self, run) -> list[Stage]:
        metric = run.resolved.metric
        tune = finetune_stage(run, FINETUNE)
        frozen = FrozenEmbeddingsConfig(**dict(tune.config), freeze_embeddings=self.config.freeze_embeddings)
        report = ReportConfig(baseline="evaluate", method=EVALUATE, metric=metric)
        return [finetune_stage(run), evaluate_stage(run, "finetune", export=False),
                dataclasses.replace(tune, config=frozen), evaluate_stage(run, FINETUNE, name=EVALUATE),
                compare_stage(run, baseline="evaluate", other=EVALUATE, name="mymethod-compare",
                              labels=("finetune", "mymethod"), metric=metric),
                Stage(name="mymethod-report", body=report_body, config=report, inputs=("evaluate", EVALUATE),
                      artifacts=("report.json",))]
