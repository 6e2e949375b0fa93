"""The `stilt` strategy: intermediate task(s) first, then the target (Phang et al. 2018; Jeong & Hwang).

Stages: ``intermediate-1-<task>`` [-> ``intermediate-2-<task>`` ...] -> ``finetune`` (target) -> ``evaluate``.
Each intermediate stage is keyed by the model, its own task config, its training settings, the seed and the
previous intermediate's key, never by the target: targets that share an intermediate train it once. Every
stage puts a fresh head on the encoder it receives (``kinject.stages.build_task_model``), so task types mix;
an intermediate whose model has no pooler (token heads, mean pooling) keeps the pooler of the model it started
from (:mod:`.pooler`), so a sequence target starts from the same pooler as the no-intermediate baseline.
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import DataError, DataMissingError, SpecError, Stage, Strategy, Task, TaskGroup, UnknownNameError
from kinject.plugins.stilt.config import IntermediateSpec, StiltConfig
from kinject.api import PluginRef, TrainingOverrides, TrainingSpec, validate_plugin_config


def build_intermediate_task(spec: IntermediateSpec, field: str) -> Task:
    """An intermediate task instance from its spec; errors name the spec field (did-you-mean included)."""
    from kinject.api import registry

    try:
        cls = registry("tasks").get(spec.name)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{field}.name: {exc}") from None
    if issubclass(cls, TaskGroup):
        raise SpecError(f"{field}.name: {spec.name!r} is a task group; name its member tasks one by one")
    return cls(validate_plugin_config(cls, PluginRef(name=spec.name, **spec.options()), field))


def intermediate_training(base: TrainingSpec, *overrides: TrainingOverrides) -> TrainingSpec:
    """The run's training settings with the strategy-wide, then the per-task overrides applied."""
    data = base.model_dump()
    for override in overrides:
        data.update(override.set_fields())
    return TrainingSpec.model_validate(data)


def stage_name(index: int, task: Task) -> str:
    return f"intermediate-{index + 1}-{task.name}"


class StiltStrategy(Strategy):
    """STILT: fine-tune on intermediate task(s), then on the target; the encoder carries over, heads are new."""

    Config: ClassVar = StiltConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.intermediate_tasks: list[Task] = [
            build_intermediate_task(spec, f"strategy.intermediate.{i}")
            for i, spec in enumerate(self.config.intermediate)]

    def validate(self, run) -> None:
        super().validate(run)
        for i, task in enumerate(self.intermediate_tasks):
            try:
                task.prepare_data(run.env)
            except DataError as exc:
                kind = DataMissingError if isinstance(exc, DataMissingError) else DataError
                raise kind(f"strategy.intermediate.{i} ({task.name}): {exc.reason}", exc.path, exc.line) from None

    def stages(self, run) -> list[Stage]:
        import dataclasses

        from kinject.api import evaluate_stage, finetune_stage

        from .pooler import intermediate_body

        stages: list[Stage] = []
        previous: str | None = None
        for i, (spec, task) in enumerate(zip(self.config.intermediate, self.intermediate_tasks)):
            training = intermediate_training(run.spec.training, self.config.training, spec.training)
            name = stage_name(i, task)
            stage = finetune_stage(run, name=name, init_from=previous, task=task, training=training)
            stages.append(dataclasses.replace(stage, body=intermediate_body))  # + the pooler carried through
            previous = name
        stages.append(finetune_stage(run, name="finetune", init_from=previous))
        stages.append(evaluate_stage(run, "finetune"))
        return stages
