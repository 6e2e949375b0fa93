"""The `mymethod` strategy.

Stages: ``finetune`` + ``evaluate`` (the shared baseline: the `finetune` strategy's own stages and cache keys),
``mymethod-finetune`` + ``mymethod-evaluate`` (the base model fine-tuned with its embeddings frozen),
``mymethod-compare`` (paired against the baseline) and ``mymethod-report``. Checks and builders in :mod:`.plan`.
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage

from .config import MyMethodConfig
from .plan import Resolved, method_stages, report_stages, resolve


class MyMethodStrategy(Strategy):
    """mymethod: fine-tune with the word embeddings frozen, against plain fine-tuning."""

    Config: ClassVar = MyMethodConfig
    protocols: ClassVar[dict] = {"quick": {"training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        baseline = [finetune_stage(run), evaluate_stage(run, "finetune", export=False)]
        return baseline + method_stages(run, self.config) + report_stages(run, run.resolved)
