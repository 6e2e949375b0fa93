"""The `stilt` strategy: intermediate task(s) first, then the target (Phang et al. 2018; Jeong & Hwang).

Stages: ``stilt-intermediate-1-<task>`` [-> ``stilt-intermediate-2-<task>`` ...] -> ``stilt-finetune`` (the target)
-> ``stilt-evaluate``. Each intermediate stage is keyed by the model, its own task config, its training settings, the
seed and the previous intermediate's key, never by the target: targets that share an intermediate train it once.
Every stage puts a fresh head on the encoder it receives, so task types mix; an intermediate whose model has no
pooler (token heads, mean pooling) keeps the pooler of the model it started from (:mod:`.pooler`), so a sequence
target starts from the same pooler as the no-intermediate baseline. The target's stages are not the shared
``finetune`` + ``evaluate``: they start from the intermediate model.

With ``baseline`` (the default) the run also fine-tunes the plain model (the finetune strategy's ``finetune`` +
``evaluate``, shared cache) and ends with ``stilt-compare``, paired against it like every method; across runs, the
target x intermediate transfer matrix against the `finetune` baseline runs is ``kinject stilt matrix``
(:mod:`.matrix`). This module holds the config, the checks, the stage builders and the Strategy class; the
intermediate stage's config is in :mod:`.pooler`, beside the ``save_model`` it overrides.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kinject.api import (DataError, DataMissingError, PluginConfig, PluginRef, SpecError, Stage, Strategy, Task,
                         TaskGroup, TrainingSpec, UnknownNameError, registry, validate_plugin_config)
from kinject.knowledge import filtered_task_ref, record, task_input
from kinject.training import TrainingOverrides, evaluate_stage, finetune_body, finetune_stage

from .pooler import IntermediateConfig


class IntermediateSpec(BaseModel):
    """One intermediate task: a registered task name plus that task's own config fields.

    Written as a plain name (``chemprot``) or a mapping (``{name: textcls, path: DIR, training: {epochs: 1}}``);
    every field other than ``name`` and ``training`` is validated by the task's Config.
    """

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    name: str = Field(..., description="Registered task name (see `kinject list tasks`).")
    training: TrainingOverrides = Field(default_factory=TrainingOverrides,
                                        description="Training overrides for this intermediate stage only.")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class StiltConfig(PluginConfig):
    """Options of the `stilt` strategy."""

    intermediate: list[IntermediateSpec] | None = Field(
        None, min_length=1,
        description="Intermediate tasks, trained in this order before the target; each a task name or "
                    "{name: TASK, <task options>, training: {epochs, learning_rate, ...}}. Required (--quick: "
                    "hpo-isa, which needs no data dir).")
    training: TrainingOverrides = Field(default_factory=TrainingOverrides,
                                        description="Training overrides for every intermediate stage.")
    baseline: bool = Field(True, description="Also fine-tune and evaluate the plain model on the target (the "
                           "finetune strategy's stages, shared cache) and compare against it, paired.")

    @field_validator("intermediate", mode="before")
    @classmethod
    def _names_to_specs(cls, value: Any) -> Any:
        if isinstance(value, str):  # "a,b" -> [a, b]
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, dict):
            value = [value]
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value


# -- what validate resolves -------------------------------------------------------------------------- #
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


# -- stage builders ---------------------------------------------------------------------------------- #
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


# -- the strategy ------------------------------------------------------------------------------------ #
class StiltStrategy(Strategy):
    """STILT: fine-tune on intermediate task(s), then on the target; the encoder carries over, heads are new."""

    Config: ClassVar = StiltConfig
    #: Jeong & Hwang: "the hyperparameters of fine-tuning are the same as those of PubMedBERT" (BLURB's protocol)
    protocols: ClassVar[dict] = {"paper": {"training": {"warmup_ratio": 0.1, "selection": "best"}},
                                 "quick": {"strategy": {"intermediate": [{"name": "hpo-isa", "train_pairs": 64,
                                                                          "dev_pairs": 32, "test_pairs": 32,
                                                                          "split_seed": 1}]},
                                           "training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`resolve`): the intermediate tasks, configured
        and with their data checked."""
        super().validate(run)
        return resolve(run, self.config)

    @staticmethod
    def label(config: StiltConfig) -> str:
        """The arm's name in comparisons, leaderboards and the card: ``stilt/<intermediate>[+<next>...]``."""
        return "stilt/" + "+".join(spec.name for spec in config.intermediate or ())

    def stages(self, run) -> list[Stage]:
        from kinject.evidence import compare_stage

        intermediate = intermediate_stages(run, self.config, run.resolved)
        stages = intermediate + target_stages(run, intermediate[-1].name)
        if not self.config.baseline:
            return stages
        return [finetune_stage(run), evaluate_stage(run, "finetune", export=False), *stages,
                compare_stage(run, baseline="evaluate", other=EVALUATE, name="stilt-compare",
                              labels=("finetune", self.label(self.config)))]
