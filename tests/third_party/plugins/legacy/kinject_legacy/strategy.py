"""Fine-tune on inputs wrapped in [E] .. [/E], through the shared builders, as last release's plugins were written."""

from __future__ import annotations

from pydantic import Field

from kinject.api import InputTransform, PluginConfig, Strategy
from kinject.stages import evaluate_stage, finetune_stage  # moved in kinject 0.1.0 (kinject.plugins.training)


class LegacyStrategy(Strategy):
    """Fine-tune on inputs wrapped in [E] .. [/E] (written against the previous release's module paths)."""

    class Config(PluginConfig):
        marker: str = Field("E", description="The marker's name: inputs become [E] text [/E].")

    def validate(self, run):
        super().validate(run)
        from kinject.plugins.pretrain.mlm import load_mlm  # noqa: F401 - moved in 0.1.0 (knowledge library)

    def stages(self, run):
        marked = run.task_ref().with_inputs(InputTransform(function="kinject_legacy.mark:add_markers",
                                                           options={"marker": self.config.marker}))
        return [finetune_stage(run, "legacy-finetune", task=marked),
                evaluate_stage(run, "legacy-finetune", task=marked)]
