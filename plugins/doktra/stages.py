"""DoKTra's declared stages: the configs (what each key holds). The module-level bodies live beside the code
they run (teacher.py, distill.py, report.py), so a stage's code fingerprint holds only the modules it uses:
editing the report does not re-train the teacher."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import ModelRef, NOT_KEYED, StageConfig, TaskRef, TrainingSpec


# -- teacher ----------------------------------------------------------------------------------------- #
class CalibratedConfig(StageConfig):
    """Fine-tune ``model`` on the task with L = CE - beta H(p): CTT for a teacher, cp-only for a student."""

    model: ModelRef
    task: TaskRef
    training: TrainingSpec
    seed: int
    beta: float


class ImportConfig(StageConfig):
    """Take a teacher that is already fine-tuned on the task: its head's rows put in the task's label order."""

    teacher: ModelRef
    task: TaskRef


# -- cached teacher outputs -------------------------------------------------------------------------- #
class TeacherOutputsConfig(StageConfig):
    """The frozen teacher's last-layer [CLS] and logits for every training example and the L_AT examples."""

    task: TaskRef
    teacher_stage: str
    max_length: int
    attn_implementation: str = "sdpa"
    analysis_split: str
    analysis_examples: int
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)


# -- distillation + refinement ----------------------------------------------------------------------- #
class DistillConfig(StageConfig):
    """The fine-tuned student (stage ``student_stage``) distilled from the teacher, then refined."""

    task: TaskRef
    objective: Literal["abd", "kd", "none"]
    training: TrainingSpec
    seed: int
    max_length: int
    attn_implementation: str = "sdpa"
    student_stage: str = "finetune"
    teacher_stage: str | None = Field(None, description="Teacher model stage, run on every batch (no cache).")
    outputs_stage: str | None = Field(None, description="Stage with the teacher's cached outputs.")
    beta: float
    gamma: float | None = None  # fields an objective does not use are None (so they do not key it)
    margin: float | None = None
    abd_scale: float | None = None
    projection: Literal["auto", "random", "learned"] | None = None
    kd_temperature: float | None = None
    kd_alpha: float | None = None
    analysis_split: str | None = None
    analysis_examples: int | None = None
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)


# -- report ------------------------------------------------------------------------------------------ #
class ReportConfig(StageConfig):
    """Student, fine-tuned student and teacher side by side: task metrics, ECE, % of the teacher retained,
    L_AT before/after distillation; reliability diagrams."""

    task: TaskRef
    variant: str
    metric: str
    bins: int
    final: str = "doktra-evaluate"
    baseline: str = "evaluate"
    teacher: str | None = "doktra-teacher-evaluate"
    distill: str | None = "doktra-distill"
