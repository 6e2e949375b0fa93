"""The teacher side of the distillation stage (cached outputs or a live frozen model, the width projection)
and L_AT, the number of [CLS] neurons whose sign differs between student and teacher (paper, Eq. 4)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from kinject.api import NOT_KEYED, StageConfig, StageContext, TaskRef, TrainingSpec, is_main_process

from .features import PairedCollator, align, featurize_one_to_one, make_projection, model_outputs, pair_features


@dataclass
class TeacherSide:
    """What the distillation stage knows of the teacher."""

    features: list[dict]  # the training features, paired with the teacher's encoding or cached outputs
    available: bool = False  # False: refinement only (no-abd), no L_AT
    tokenizer: Any = None  # live teacher: its tokenizer (the collator pads its encoding with it)
    online: Any = None  # live teacher model (eval mode, frozen), run on every batch
    projection: Any = None  # the map between the [CLS] widths (None: identity; see features.make_projection)
    analysis_cls: np.ndarray | None = None  # cached teacher [CLS] of the L_AT examples
    width: int = 0  # the teacher's [CLS] width

    def analysis(self, task, env, examples: list[dict], max_length: int, batch_size: int) -> np.ndarray:
        """The teacher's [CLS] vectors of the L_AT examples (cached, or computed by the live teacher)."""
        if self.analysis_cls is not None:
            if len(self.analysis_cls) != len(examples):
                raise RuntimeError(f"{len(self.analysis_cls)} cached teacher vectors for {len(examples)} examples")
            return self.analysis_cls
        features = featurize_one_to_one(task, self.tokenizer, examples, max_length, env)
        return model_outputs(self.online, features, task.collator(self.tokenizer), batch_size)[0]

    def aligned(self, student: np.ndarray, teacher: np.ndarray, kind: str):
        """The student and teacher vectors the AB loss compares (as tensors, the projection applied)."""
        import torch

        with torch.no_grad():
            return align(torch.as_tensor(student, dtype=torch.float32), torch.as_tensor(teacher, dtype=torch.float32),
                         self.projection.cpu() if self.projection is not None else None, kind)

    def save_projection(self, path: Path) -> None:
        if self.projection is not None:
            from safetensors.torch import save_file

            save_file({k: v.detach().cpu().contiguous() for k, v in self.projection.state_dict().items()}, str(path))


def prepare_teacher(cfg, ctx, task, env, examples: list[dict], features: list[dict], student_width: int) -> TeacherSide:
    """Pair the student's training features with the teacher: its cached outputs (``cfg.outputs_stage``) or its
    own encoding of the same texts for a live teacher (``cfg.teacher_stage``); build the width projection."""
    if cfg.objective == "none":
        return TeacherSide(features)
    if cfg.outputs_stage:
        from safetensors.numpy import load_file

        arrays = load_file(str(ctx.inputs[cfg.outputs_stage] / "outputs.safetensors"))
        name = "cls" if cfg.objective == "abd" else "logits"
        side = TeacherSide(pair_features(features, cached={f"teacher_{name}": arrays[f"train.{name}"]}), True,
                           analysis_cls=arrays["analysis.cls"])
        width = arrays["train.cls"].shape[1]
    else:
        from kinject.training import load_task_model
        from kinject.api import load_tokenizer

        directory = ctx.inputs[cfg.teacher_stage] / "model"
        tokenizer = load_tokenizer(str(directory))
        model = load_task_model(directory, task.head(env), cfg.attn_implementation).eval().requires_grad_(False)
        teacher_features = featurize_one_to_one(task, tokenizer, examples, cfg.max_length, env)
        side = TeacherSide(pair_features(features, teacher=teacher_features), True, tokenizer, model)
        width = model.config.hidden_size
    # kd never trains a projection; it needs one (random) only to measure L_AT across different widths
    kind = "random" if cfg.objective == "kd" and cfg.projection == "learned" else cfg.projection
    side.projection, side.width = make_projection(width, student_width, kind, cfg.seed), width
    return side


def l_at(model, tokenizer, task, env, examples: list[dict], cfg, teacher: TeacherSide) -> float:
    """Mean over ``examples`` of the number of [CLS] neurons whose sign differs between student and teacher
    (after the width projection, as the AB loss compares them)."""
    from .losses import sign_disagreements

    features = featurize_one_to_one(task, tokenizer, examples, cfg.max_length, env)
    student, _ = model_outputs(model, features, task.collator(tokenizer), cfg.batch_size)
    target = teacher.analysis(task, env, examples, cfg.max_length, cfg.batch_size)
    kind = cfg.projection if cfg.objective == "abd" else "random"
    return float(sign_disagreements(*teacher.aligned(student, target, kind)).float().mean())


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


def distill_body(cfg: DistillConfig, ctx: StageContext) -> None:
    from kinject.training import load_task_model, save_model, train
    from kinject.api import load_tokenizer

    from .trainers import DistillRecord, DistillSettings, distill_trainer

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    head = task.head(env)
    student_dir = ctx.inputs[cfg.student_stage] / "model"
    tokenizer, model = load_tokenizer(str(student_dir)), load_task_model(student_dir, head, cfg.attn_implementation)
    train_examples = task.examples(task.train_split, env)
    features = featurize_one_to_one(task, tokenizer, train_examples, cfg.max_length, env)
    teacher = prepare_teacher(cfg, ctx, task, env, train_examples, features, model.config.hidden_size)
    stats: dict = {"objective": cfg.objective}
    if teacher.available:
        analysis = task.examples(cfg.analysis_split, env)[:cfg.analysis_examples]
        stats["l_at"] = {"split": cfg.analysis_split, "examples": len(analysis),
                         "before": l_at(model, tokenizer, task, env, analysis, cfg, teacher)}
    projection = teacher.projection if cfg.objective == "abd" else None
    if projection is not None:  # moves with the model and is checkpointed with it (a learned one is trained)
        model.add_module("doktra_projection", projection)
    record = DistillRecord()
    used = {k: getattr(cfg, k) for k in ("gamma", "margin", "abd_scale", "kd_temperature", "kd_alpha", "projection")
            if getattr(cfg, k) is not None}
    used.pop("margin_unit", None)
    if cfg.objective == "abd" and cfg.margin_unit == "teacher":  # mu in the units of the teacher's activations
        reference = task.examples(cfg.analysis_split, env)[:cfg.analysis_examples]
        scale = float(np.abs(teacher.analysis(task, env, reference, cfg.max_length, cfg.batch_size)).mean())
        used["margin"] = cfg.margin * scale
        stats["margin"] = {"mu": cfg.margin, "unit": "teacher", "teacher_mean_abs_cls": scale,
                           "effective": used["margin"]}
    settings = DistillSettings(cfg.objective, head.problem_type, cfg.beta, **used)
    trainer_cls = distill_trainer(settings, record, projection, teacher.online)
    stats.update(train(model, teacher.features, PairedCollator(tokenizer, teacher.tokenizer), cfg.training, ctx.work,
                       cfg.seed, stage=ctx.name, resume=ctx.resume, trainer_cls=trainer_cls,
                       remove_unused_columns=False))
    stats.update(record.summary())
    if projection is not None:
        del model._modules["doktra_projection"]
    if teacher.available:
        stats["l_at"]["after"] = l_at(model, tokenizer, task, env, analysis, cfg, teacher)
        learned = cfg.objective == "abd" and cfg.projection == "learned"  # compared at the teacher's width
        stats["l_at"]["width"] = teacher.width if learned else model.config.hidden_size
    if is_main_process():
        save_model(model, tokenizer, ctx.out / "model")
        teacher.save_projection(ctx.out / "projection.safetensors")
        (ctx.out / "train.json").write_text(json.dumps(stats, indent=2))
