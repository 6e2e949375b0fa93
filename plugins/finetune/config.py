"""The `finetune` strategy's configuration: none of its own (the run's model, task and training settings)."""

from __future__ import annotations

from kinject.api import PluginConfig


class FinetuneStrategyConfig(PluginConfig):
    """Options of the `finetune` strategy (it has none: everything is in the run's model/task/training)."""
