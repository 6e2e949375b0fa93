"""HF Trainer subclasses for DoKTra's losses (passed to ``kinject.training.train(trainer_cls=...)``).

* :func:`calibrated_trainer`: L = mean(CE - beta H(p)) - calibrated teacher training (CTT) and cp-only, and
  :class:`CalibratedConfig`, the fine-tune config whose ``trainer_class`` returns it (beside the code it calls).
* :func:`distill_trainer`: before the switch step the distillation loss (the scaled AB hinge on the
  last-layer [CLS], or KD on logits), from the switch step on the refinement loss CE - beta2 H(p).

The switch step is int(gamma x N) of the stage's N optimiser steps (the reference switches after int(epochs x gamma)
whole epochs, the same only at its 10 epochs; with 2 epochs it would refine for half the steps). The phase of a step
follows from ``state.global_step``, so it is right after ``--resume`` too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from transformers import Trainer, TrainerCallback

from kinject.api import Head
from kinject.training import FinetuneConfig

from .features import CACHED_KEYS, TEACHER, align, cls_and_logits, encoder_inputs
from .losses import abd_loss, confidence_penalty_loss, kd_loss, task_loss


class CalibratedTrainer(Trainer):
    """Trainer with the confidence-penalty loss mean(CE - beta H(p)) (sigmoid/BCE for multi-label tasks)."""

    beta: float = 0.0
    problem_type: str = "single_label_classification"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_accepts_loss_kwargs = False  # the loss is a batch mean: Trainer divides by accumulation steps

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = confidence_penalty_loss(outputs.logits, labels, self.problem_type, self.beta)
        return (loss, outputs) if return_outputs else loss


def calibrated_trainer(beta: float, problem_type: str) -> type[CalibratedTrainer]:
    return type("CalibratedTrainer", (CalibratedTrainer,), {"beta": beta, "problem_type": problem_type})


class CalibratedConfig(FinetuneConfig):
    """Fine-tune ``model`` on the task (the shared fine-tune body) with L = mean(CE - beta H(p)): CTT for a teacher,
    cp-only for a student; ``beta`` is written to train.json."""

    beta: float

    def trainer_class(self, head: Head):
        return calibrated_trainer(self.beta, head.problem_type)

    def extra_stats(self) -> dict[str, Any]:
        return {"beta": self.beta}


@dataclass
class DistillSettings:
    """What the distillation trainer optimises (filled from the stage config)."""

    objective: str  # abd | kd | none (refinement only)
    problem_type: str
    beta: float  # beta2 of the refinement
    gamma: float = 0.0
    margin: float = 1.0
    abd_scale: float = 1000.0
    kd_temperature: float = 2.0
    kd_alpha: float = 1.0
    projection: str = "auto"  # auto | random | learned (see features.make_projection)


@dataclass
class DistillRecord:
    """What happened during training: the switch step and, per phase, steps and summed loss."""

    switch_step: int | None = None
    phases: list[tuple[int, str]] = field(default_factory=list)  # (global step, phase) of every loss computation
    loss: dict[str, object] = field(default_factory=lambda: {"distill": 0.0, "refine": 0.0})  # summed, on device

    def summary(self) -> dict:
        counts = {p: sum(1 for _, q in self.phases if q == p) for p in ("distill", "refine")}
        return {"switch_step": self.switch_step, "batches": counts,
                "mean_loss": {p: float(self.loss[p]) / counts[p] if counts[p] else None for p in counts}}


def switch_step(gamma: float, epochs: float, max_steps: int, steps_per_epoch: int) -> int:
    """The first optimiser step of the refinement phase: gamma of the stage's optimiser steps."""
    total = max_steps if max_steps > 0 else math.ceil(epochs * steps_per_epoch)
    return int(gamma * total)


class _Schedule(TrainerCallback):
    def __init__(self, trainer: "DistillTrainer"):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        batches = len(train_dataloader)
        per_epoch = max(math.ceil(batches / args.gradient_accumulation_steps), 1)
        self.trainer.record.switch_step = switch_step(self.trainer.settings.gamma, args.num_train_epochs,
                                                      args.max_steps, per_epoch)


class DistillTrainer(CalibratedTrainer):
    """Distil (AB hinge on [CLS] or KD on logits) until the switch step, then refine with CE - beta2 H(p).

    The teacher comes as cached outputs in the batch (``teacher_cls``/``teacher_logits``) or, when ``teacher``
    is set, as the ``teacher_*`` encoding run through that frozen model (eval mode, no gradients).
    ``projection`` maps between the [CLS] widths (None: same width; see :func:`features.align`).
    """

    settings: DistillSettings
    teacher = None
    projection = None
    record: DistillRecord

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.problem_type = self.settings.problem_type
        self.beta = self.settings.beta
        if self.teacher is not None:  # frozen: no dropout, no gradients, never in the optimiser
            self.teacher.eval().requires_grad_(False)
        self.add_callback(_Schedule(self))

    def teacher_outputs(self, batch: dict):
        import torch

        if self.teacher is None:
            return batch.get("teacher_cls"), batch.get("teacher_logits")
        self.teacher.to(self.args.device)
        with torch.no_grad():
            return cls_and_logits(self.teacher, encoder_inputs(batch, TEACHER))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        s, step = self.settings, self.state.global_step
        labels = inputs.pop("labels")
        teacher_cls, teacher_logits = self.teacher_outputs(inputs)
        student = {k: v for k, v in inputs.items() if not k.startswith(TEACHER) and k not in CACHED_KEYS}
        cls, logits = cls_and_logits(model, student)
        switch = self.record.switch_step or 0
        phase = "distill" if s.objective != "none" and step < switch else "refine"
        unused = []  # tensors computed but not in the loss (DDP wants every parameter in the graph)
        if phase == "refine":
            loss = confidence_penalty_loss(logits, labels, s.problem_type, s.beta)
            if self.projection is not None and s.projection == "learned":
                unused.append(self.projection(cls))
        elif s.objective == "abd":
            loss = abd_loss(*align(cls, teacher_cls, self.projection, s.projection), s.margin, s.abd_scale)
            unused.append(logits)
        else:
            loss = s.kd_alpha * kd_loss(logits, teacher_logits, s.problem_type, s.kd_temperature)
            if s.kd_alpha < 1:
                loss = loss + (1 - s.kd_alpha) * task_loss(logits, labels, s.problem_type)
        if self.args.world_size > 1 and unused:
            loss = loss + sum(t.sum() for t in unused) * 0.0
        self.record.phases.append((step, phase))
        self.record.loss[phase] = self.record.loss[phase] + loss.detach()
        return (loss, {"logits": logits}) if return_outputs else loss


def distill_trainer(settings: DistillSettings, record: DistillRecord, projection=None,
                    teacher=None) -> type[DistillTrainer]:
    """A :class:`DistillTrainer` class bound to these settings (``train`` instantiates it)."""
    return type("DistillTrainer", (DistillTrainer,), {"settings": settings, "record": record,
                                                      "projection": projection, "teacher": teacher})
