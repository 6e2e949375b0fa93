"""The `finetune` baseline strategy: plain fine-tuning, no knowledge injection."""

from __future__ import annotations

from typing import ClassVar

from kinject.api import PluginConfig, Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage


class FinetuneStrategyConfig(PluginConfig):
    """Options of the `finetune` strategy (it has none: everything is in the run's model/task/training)."""


class FinetuneStrategy(Strategy):
    """Plain fine-tuning on the task, no injection: the baseline every method is compared with."""

    #: BLURB's fine-tuning (Gu et al. 2021, section 4.2): warm-up over 10% then linear decay, the best dev model;
    #: the learning rate (1e-5/3e-5/5e-5), batch size and epochs were tuned per dataset on dev: `kinject sweep`
    protocols: ClassVar[dict] = {"paper": {"training": {"warmup_ratio": 0.1, "selection": "best"}},
                                 "quick": {"training": {"max_steps": 30}}}  # kinject run --quick

    Config: ClassVar = FinetuneStrategyConfig

    @staticmethod
    def label(config: FinetuneStrategyConfig) -> str:
        """The baseline's name in every comparison."""
        return "finetune"

    def stages(self, run) -> list[Stage]:
        return [finetune_stage(run), evaluate_stage(run, "finetune")]
