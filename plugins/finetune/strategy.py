"""The `finetune` baseline strategy: plain fine-tuning, no knowledge injection."""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy, evaluate_stage, finetune_stage

from .config import FinetuneStrategyConfig


class FinetuneStrategy(Strategy):
    """Plain fine-tuning on the task, no injection: the baseline every method is compared with."""

    Config: ClassVar = FinetuneStrategyConfig

    def stages(self, run) -> list[Stage]:
        return [finetune_stage(run), evaluate_stage(run, "finetune")]
