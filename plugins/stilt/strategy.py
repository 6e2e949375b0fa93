"""The `stilt` strategy: intermediate task(s) first, then the target (Phang et al. 2018; Jeong & Hwang).

Stages: ``intermediate-1-<task>`` [-> ``intermediate-2-<task>`` ...] -> ``finetune`` (target) -> ``evaluate``.
Each intermediate stage is keyed by the model, its own task config, its training settings, the seed and the
previous intermediate's key, never by the target: targets that share an intermediate train it once. Every
stage puts a fresh head on the encoder it receives, so task types mix; an intermediate whose model has no pooler
(token heads, mean pooling) keeps the pooler of the model it started from (:mod:`.stages`, :mod:`.pooler`), so a
sequence target starts from the same pooler as the no-intermediate baseline.
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import DataError, DataMissingError, Stage, Strategy, Task
from kinject.plugins.training import evaluate_stage, finetune_body, finetune_stage

from .config import StiltConfig, build_intermediate_task, intermediate_training
from .stages import IntermediateConfig


def stage_name(index: int, task: Task) -> str:
    return f"intermediate-{index + 1}-{task.name}"


class StiltStrategy(Strategy):
    """STILT: fine-tune on intermediate task(s), then on the target; the encoder carries over, heads are new."""

    Config: ClassVar = StiltConfig
    #: Jeong & Hwang: "the hyperparameters of fine-tuning are the same as those of PubMedBERT" (BLURB's protocol)
    protocols: ClassVar[dict] = {"paper": {"training": {"warmup_ratio": 0.1, "selection": "best"}},
                                 "quick": {"strategy": {"intermediate": [{"name": "hpo-isa", "train_pairs": 64,
                                                                          "dev_pairs": 32, "test_pairs": 32,
                                                                          "split_seed": 1}]},
                                           "training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> list[Task]:
        """The intermediate tasks, configured and with their data checked."""
        super().validate(run)
        if not self.config.intermediate:
            from kinject.api import SpecError

            raise SpecError("strategy.intermediate: STILT trains on an intermediate task first; add one, e.g. --set "
                            "strategy.intermediate=hpo-isa (offline), or a task of your data dir such as --set "
                            "strategy.intermediate=chemprot (several: [chemprot, ddi])")
        tasks = [build_intermediate_task(spec, f"strategy.intermediate.{i}")
                 for i, spec in enumerate(self.config.intermediate)]
        for i, task in enumerate(tasks):
            try:
                task.prepare_data(run.env)
            except DataError as exc:
                kind = DataMissingError if isinstance(exc, DataMissingError) else DataError
                raise kind(f"strategy.intermediate.{i} ({task.name}): {exc.reason}", exc.path, exc.line) from None
        return tasks

    def stages(self, run) -> list[Stage]:
        stages: list[Stage] = []
        previous: str | None = None
        for i, (spec, task) in enumerate(zip(self.config.intermediate, run.resolved)):
            training = intermediate_training(run.spec.training, self.config.training, spec.training)
            name = stage_name(i, task)
            base = finetune_stage(run, name=name, init_from=previous, task=task, training=training)
            stages.append(Stage(name=name, body=finetune_body, config=IntermediateConfig(**dict(base.config)),
                                inputs=base.inputs, produces_model=True))
            previous = name
        stages.append(finetune_stage(run, name="finetune", init_from=previous))
        stages.append(evaluate_stage(run, "finetune"))
        return stages
