"""The `doktra` strategy (Choi et al., ACL 2022): calibrated teacher training -> student fine-tuning ->
activation-boundary distillation on the last-layer [CLS] -> refinement with a confidence penalty.

Stages (each cached; configs in :mod:`.stages`, built in :mod:`.plan`): ``doktra-teacher`` (CTT, or a given
fine-tuned teacher taken as it is) + ``doktra-teacher-evaluate``; ``finetune`` + ``evaluate`` (the student alone:
the same keys as the `finetune` strategy, and the baseline); ``doktra-teacher-outputs`` (the frozen teacher's
[CLS] and logits, once per example); ``doktra-distill`` (or ``doktra-cp`` for cp-only); ``doktra-evaluate``;
``doktra-report`` (metrics of all three models, ECE, reliability diagrams, % retained, L_AT) and
``doktra-compare`` (paired bootstrap against the fine-tuned student).
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy

from .config import DoktraConfig
from .plan import (FINAL, STUDENT, STUDENT_EVALUATE, TEACHER, TEACHER_EVALUATE, Resolved, report_stage, resolve,
                   student_stages, teacher_stage)


class DoktraStrategy(Strategy):
    """DoKTra: calibrated teacher, activation-boundary distillation into a fine-tuned student, refinement."""

    Config: ClassVar = DoktraConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"model"})
    task_kinds: ClassVar[frozenset[str]] = frozenset({"sequence"})  # it distils a sequence classifier
    #: Choi et al. 2022 and their code: teacher lr 2e-5 without warm-up; a converged student (fine-tuned up to 10
    #: epochs at 1e-5, best on dev); 10 distillation epochs at 1e-5 without warm-up, gamma 0.9, margin 1.0
    protocols: ClassVar[dict] = {"paper": {
        "strategy": {"gamma": 0.9, "margin": 1.0, "margin_unit": "absolute",
                     "teacher_training": {"learning_rate": 2e-5, "warmup_ratio": 0.0},
                     "distill_training": {"epochs": 10, "learning_rate": 1e-5, "warmup_ratio": 0.0}},
        "training": {"epochs": 10, "learning_rate": 1e-5, "selection": "best"}},
        "quick": {"strategy": {"teacher_training": {"max_steps": 20}, "distill_training": {"max_steps": 20}},
                  "training": {"max_steps": 20}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Check the task, the teacher, the L_AT split and the switch step before any stage (:func:`.plan.resolve`);
        returns the teacher (None: the variant reads none and none is given), which :meth:`stages` reads as
        ``run.resolved.teacher``."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        from kinject.training import evaluate_stage, finetune_stage
        from kinject.evidence import compare_stage

        cfg, teacher = self.config, run.resolved.teacher
        if cfg.variant == "student-ft":
            return [finetune_stage(run, STUDENT), evaluate_stage(run, STUDENT)]
        stages: list[Stage] = []
        if teacher is not None:
            stages += [teacher_stage(run, cfg, teacher),
                       evaluate_stage(run, TEACHER, name=TEACHER_EVALUATE, export=False)]
        stages += [finetune_stage(run, STUDENT), evaluate_stage(run, STUDENT, name=STUDENT_EVALUATE, export=False)]
        stages += student_stages(run, cfg)
        final = stages[-1].name
        stages += [evaluate_stage(run, final, name=FINAL), report_stage(run, cfg, final, teacher is not None),
                   compare_stage(run, baseline=STUDENT_EVALUATE, other=FINAL, name="doktra-compare",
                                 labels=("student-ft", cfg.variant))]
        return stages
