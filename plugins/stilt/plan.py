"""STILT's plan: what validation resolves (the intermediate tasks, configured and with their data checked) and the
builders of its stages. Strategy-side code: no stage body imports this module, so it is in no stage's key."""

from __future__ import annotations

import dataclasses

from kinject.api import (DataError, DataMissingError, PluginRef, SpecError, Stage, Task, TaskGroup, TrainingSpec,
                         UnknownNameError, registry, validate_plugin_config)
from kinject.knowledge import filtered_task_ref, record, task_input
from kinject.training import TrainingOverrides, evaluate_stage, finetune_body, finetune_stage

from .config import IntermediateSpec, StiltConfig
from .pooler import IntermediateConfig

FINETUNE, EVALUATE = "stilt-finetune", "stilt-evaluate"  # the target: not the shared baseline (it starts elsewhere)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``StiltStrategy.validate`` resolved for its stages (``run.resolved``)."""

    tasks: tuple[Task, ...]  # the intermediate tasks, in training order
    drops: tuple[list, ...] = ()  # per task: the held-out name pairs its examples state (filtered out of them)


def resolve(run, cfg: StiltConfig) -> Resolved:
    """The intermediate tasks, configured and with their data checked; a SpecError when none is given."""
    if not cfg.intermediate:
        raise SpecError("strategy.intermediate: STILT trains on an intermediate task first; add one, e.g. --set "
                        "strategy.intermediate=hpo-isa (offline), or a task of your data dir such as --set "
                        "strategy.intermediate=chemprot (several: [chemprot, ddi])")
    tasks = [build_intermediate_task(spec, f"strategy.intermediate.{i}") for i, spec in enumerate(cfg.intermediate)]
    for i, task in enumerate(tasks):
        try:
            task.prepare_data(run.env)
        except DataError as exc:
            kind = DataMissingError if isinstance(exc, DataMissingError) else DataError
            raise kind(f"strategy.intermediate.{i} ({task.name}): {exc.reason}", exc.path, exc.line) from None
    drops = []
    for i, task in enumerate(tasks):  # its examples that state the run's held-out facts are filtered out
        entry, drop = task_input(run, task, f"strategy.intermediate.{i}")
        record(run, entry)
        drops.append(drop)
    return Resolved(tasks=tuple(tasks), drops=tuple(drops))


def build_intermediate_task(spec: IntermediateSpec, field: str) -> Task:
    """An intermediate task instance from its spec; errors name the spec field (did-you-mean included)."""
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


# -- stage builders ----------------------------------------------------------------------------------------- #
def stage_name(index: int, task: Task) -> str:
    return f"stilt-intermediate-{index + 1}-{task.name}"


def intermediate_stages(run, cfg: StiltConfig, resolved: Resolved) -> list[Stage]:
    """``stilt-intermediate-<i>-<task>`` for each intermediate task, each from the previous one's encoder."""
    stages: list[Stage] = []
    previous: str | None = None
    for i, (spec, task) in enumerate(zip(cfg.intermediate, resolved.tasks)):
        training = intermediate_training(run.spec.training, cfg.training, spec.training)
        name = stage_name(i, task)
        base = finetune_stage(run, name=name, init_from=previous, task=task, training=training)
        drop = resolved.drops[i] if resolved.drops else []
        config = {**dict(base.config), "task": filtered_task_ref(base.config.task, drop)}
        stages.append(Stage(name=name, body=finetune_body, config=IntermediateConfig(**config),
                            inputs=base.inputs, produces_model=True))
        previous = name
    return stages


def target_stages(run, previous: str) -> list[Stage]:
    """``stilt-finetune`` (the target, from the last intermediate's encoder) and ``stilt-evaluate``."""
    return [finetune_stage(run, name=FINETUNE, init_from=previous), evaluate_stage(run, FINETUNE, name=EVALUATE)]
