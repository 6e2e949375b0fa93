"""The `finetune` baseline strategy: plain fine-tuning, no knowledge injection."""

from __future__ import annotations

from kinject.api import PluginConfig, Stage, Strategy


class FinetuneStrategy(Strategy):
    """Plain fine-tuning on the task, no injection: the baseline every method is compared with."""

    class Config(PluginConfig):
        pass

    def stages(self, run) -> list[Stage]:
        from kinject.api import evaluate_stage, finetune_stage

        return [finetune_stage(run), evaluate_stage(run, "finetune")]
