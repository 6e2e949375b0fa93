"""DoKTra's declared stages: configs (what each key holds) and module-level bodies (what each stage does)."""

from __future__ import annotations

import json
import logging
from typing import Literal

from pydantic import Field

from kinject.distributed import is_main_process
from kinject.fingerprint import NOT_KEYED
from kinject.interfaces import StageContext
from kinject.refs import ModelRef, TaskRef
from kinject.spec import TrainingSpec
from kinject.stages import StageConfig

log = logging.getLogger("kinject")


# -- teacher ----------------------------------------------------------------------------------------- #
class CalibratedConfig(StageConfig):
    """Fine-tune ``model`` on the task with L = CE - beta H(p): CTT for a teacher, cp-only for a student."""

    model: ModelRef
    task: TaskRef
    training: TrainingSpec
    seed: int
    beta: float


def calibrated_body(cfg: CalibratedConfig, ctx: StageContext) -> None:
    from kinject.stages import build_task_model, save_model
    from kinject.training import train

    from .trainers import calibrated_trainer

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    head, tokenizer = task.head(env), cfg.model.load_tokenizer()
    model = build_task_model(cfg.model.path, head, cfg.model.attn_implementation, cfg.seed, cfg.model.revision,
                             cfg.model.layers)
    features = task.featurize(tokenizer, task.examples(task.train_split, env), cfg.model.max_length, env)
    stats = train(model, features, task.collator(tokenizer), cfg.training, ctx.work, cfg.seed, stage=ctx.name,
                  resume=ctx.resume, trainer_cls=calibrated_trainer(cfg.beta, head.problem_type))
    if is_main_process():
        save_model(model, tokenizer, ctx.out / "model")
        (ctx.out / "train.json").write_text(json.dumps({**stats, "beta": cfg.beta}, indent=2))


class ImportConfig(StageConfig):
    """Take a teacher that is already fine-tuned on the task: its head's rows put in the task's label order."""

    teacher: ModelRef
    task: TaskRef


def import_body(cfg: ImportConfig, ctx: StageContext) -> None:
    from kinject.stages import save_model

    from .teacher import align_labels, load_classifier

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    model = load_classifier(cfg.teacher)
    order = align_labels(model, task.head(env))
    save_model(model, cfg.teacher.load_tokenizer(), ctx.out / "model")
    (ctx.out / "teacher.json").write_text(json.dumps({"teacher": cfg.teacher.name, "label_order": order}, indent=2))


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


def teacher_outputs_body(cfg: TeacherOutputsConfig, ctx: StageContext) -> None:
    import time

    from safetensors.numpy import save_file

    from kinject.models import load_tokenizer
    from kinject.stages import load_task_model

    from .features import model_outputs

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    directory = ctx.inputs[cfg.teacher_stage] / "model"
    tokenizer, model = load_tokenizer(str(directory)), load_task_model(directory, task.head(env), cfg.attn_implementation)
    arrays, info = {}, {}
    for part, examples in (("train", task.examples(task.train_split, env)),
                           ("analysis", task.examples(cfg.analysis_split, env)[:cfg.analysis_examples])):
        start = time.perf_counter()
        features = featurize_one_to_one(task, tokenizer, examples, cfg.max_length, env)
        arrays[f"{part}.cls"], arrays[f"{part}.logits"] = model_outputs(model, features, task.collator(tokenizer),
                                                                        cfg.batch_size)
        info[part] = {"examples": len(features), "seconds": round(time.perf_counter() - start, 3)}
    if is_main_process():
        save_file(arrays, str(ctx.out / "outputs.safetensors"))
        (ctx.out / "outputs.json").write_text(json.dumps(info, indent=2))


def featurize_one_to_one(task, tokenizer, examples: list[dict], max_length: int, env) -> list[dict]:
    """``task.featurize`` with the check that example i became feature i (DoKTra pairs them by position)."""
    features = task.featurize(tokenizer, examples, max_length, env)
    if len(features) != len(examples):
        raise RuntimeError(f"task {task.name!r} made {len(features)} features of {len(examples)} examples")
    return features


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


def distill_body(cfg: DistillConfig, ctx: StageContext) -> None:
    from kinject.models import load_tokenizer
    from kinject.stages import load_task_model, save_model
    from kinject.training import train

    from .distill import l_at, prepare_teacher
    from .features import PairedCollator
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
    used = {k: getattr(cfg, k) for k in ("gamma", "margin", "abd_scale", "kd_temperature", "kd_alpha")
            if getattr(cfg, k) is not None}
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
        stats["l_at"]["width"] = model.config.hidden_size
    if is_main_process():
        save_model(model, tokenizer, ctx.out / "model")
        teacher.save_projection(ctx.out / "projection.safetensors")
        (ctx.out / "train.json").write_text(json.dumps(stats, indent=2))


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


def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    from .report import write_report

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    roles = {"student": cfg.final, "student_ft": cfg.baseline, "teacher": cfg.teacher}
    folders = {role: ctx.inputs[stage] for role, stage in roles.items() if stage}
    distill = ctx.inputs[cfg.distill] / "train.json" if cfg.distill else None
    if is_main_process():
        write_report(ctx.out, task, env, folders, cfg.metric, cfg.bins, cfg.variant, distill)
