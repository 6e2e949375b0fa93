"""The training settings a stage holds (and is keyed by), the training library's policy: a fine-tune's (the run's,
less what a training stage does not read), a method's own stage's (knowledge retraining, adapters, distillation,
masked-LM: the fine-tuning-only settings reset) and a strategy's per-stage overrides (:class:`TrainingOverrides`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kinject.api import MAX_EPOCHS, MAX_STEPS, PluginConfig, TrainingSpec

#: settings that belong to fine-tuning a task model, not to a method's own stages: a task's recommended head rate
#: must not leak into them
FINETUNING_ONLY: dict[str, Any] = {"head_learning_rate": None, "min_steps": None, "eval_steps": None,
                                   "selection": "last", "select_every": None, "patience": None, "peft": None}


def finetune_training(training: TrainingSpec) -> TrainingSpec:
    """``training`` as a training stage holds it: ``limit`` lives in the task reference and ``eval_splits`` belongs
    to evaluation, so neither reaches (or keys) a training stage."""
    return training.model_copy(update={"limit": None, "eval_splits": None})


def method_stage_training(training: TrainingSpec, **settings: Any) -> TrainingSpec:
    """``training`` for one of a method's own stages: the fine-tuning-only settings reset (:data:`FINETUNING_ONLY`:
    head learning rate, minimum steps, dev scoring and selection) and ``settings`` applied - each stage owns its
    budget."""
    return TrainingSpec.model_validate({**finetune_training(training).model_dump(), **FINETUNING_ONLY, **settings})


class TrainingOverrides(PluginConfig):
    """Training settings of one stage that differ from the run's `training` (unset: the run's value): a
    strategy's per-stage budget (STILT's intermediate tasks, DoKTra's teacher and distillation stages)."""

    epochs: float | None = Field(None, gt=0, le=MAX_EPOCHS, allow_inf_nan=False, description="Training epochs.")
    max_steps: int | None = Field(None, ge=-1, le=MAX_STEPS, description="Optimiser steps (-1: use epochs).")
    learning_rate: float | None = Field(None, gt=0, description="Peak learning rate.")
    head_learning_rate: float | None = Field(None, gt=0, description="Peak learning rate of the new task head.")
    batch_size: int | None = Field(None, ge=1, description="Training batch size.")
    warmup_ratio: float | None = Field(None, ge=0, le=1, description="Fraction of steps for linear warm-up.")
    weight_decay: float | None = Field(None, ge=0, description="AdamW weight decay.")

    def set_fields(self) -> dict[str, Any]:
        """The fields given a value here."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def apply(self, base: TrainingSpec, method_stage: bool = False) -> TrainingSpec:
        """``base`` with the fields set here replaced, as a training stage holds it; ``method_stage``: for one of a
        method's own stages (distillation...), which does not inherit the fine-tuning-only settings
        (:func:`method_stage_training`)."""
        start = method_stage_training(base) if method_stage else finetune_training(base)
        return TrainingSpec.model_validate({**start.model_dump(), **self.set_fields()})
