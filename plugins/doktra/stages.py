"""DoKTra's stage configs (what each key holds). The bodies live beside the code they run - :mod:`.teacher`
(import, cached outputs), :mod:`.distill` (distillation + refinement), :mod:`.report` - and the calibrated
fine-tunes run the kernel's shared fine-tune body with ``CalibratedConfig``, which overrides its extension points
and so lives beside the trainer it returns (:mod:`.trainers`), so a stage's code fingerprint holds only the modules
it uses: editing the report does not re-train the teacher, and no stage configured here carries the trainers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import ModelRef, NOT_KEYED, StageConfig, TaskRef, TrainingSpec


# -- the given teacher ------------------------------------------------------------------------------- #
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
    student_stage: str  # the fine-tuned student (its model/ is where distillation starts)
    teacher_stage: str | None = Field(None, description="Teacher model stage, run on every batch (no cache).")
    outputs_stage: str | None = Field(None, description="Stage with the teacher's cached outputs.")
    beta: float
    gamma: float | None = None  # fields an objective does not use are None (so they do not key it)
    margin: float | None = None
    margin_unit: Literal["absolute", "teacher"] | None = None
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
    final: str  # the evaluation of the variant's student
    baseline: str  # the evaluation of the fine-tuned student
    teacher: str | None = None  # the teacher's evaluation (None: the run has no teacher)
    distill: str | None = None  # the distillation stage, for L_AT (None: cp-only)
