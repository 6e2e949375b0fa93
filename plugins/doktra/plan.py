"""How a DoKTra run is planned: the checks the strategy runs before any stage (the task, the teacher, the L_AT
split, the switch step) and the builders of its own stages, their configs filled from the options and the run.
No stage body imports this module, so it is in no stage's key."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from kinject.api import KinjectError, ModelRef, SpecError, Stage, TrainingSpec
from kinject.knowledge import model_input, record
from kinject.training import finetune_body, finetune_stage

from .config import NEEDS_TEACHER, DoktraConfig
from .distill import distill_body
from .report import report_body
from .stages import DistillConfig, ImportConfig, ReportConfig, TeacherOutputsConfig
from .teacher import check_teacher, import_body, teacher_outputs_body, teacher_ref

CLASSIFICATION = ("single_label_classification", "multi_label_classification")
TEACHER, TEACHER_EVALUATE, OUTPUTS = "doktra-teacher", "doktra-teacher-evaluate", "doktra-teacher-outputs"
STUDENT, STUDENT_EVALUATE = "finetune", "evaluate"  # the fine-tuned student: the `finetune` strategy's stages
DISTILL, CP, FINAL, REPORT = "doktra-distill", "doktra-cp", "doktra-evaluate", "doktra-report"


class Teacher(NamedTuple):
    """The resolved teacher."""

    ref: ModelRef
    as_given: bool  # True: already a fine-tuned classifier of the task's labels (imported); False: trained with CTT


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``DoktraStrategy.validate`` resolved for its stages (``run.resolved``)."""

    teacher: Teacher | None = None  # None: the variant reads none and none is given


def resolve(run, cfg: DoktraConfig) -> Resolved:
    """Check the task, the teacher, the L_AT split and the switch step before any stage; return the teacher."""
    teacher = resolve_teacher(cfg, run, classification_head(run))
    analysis_split(cfg, run)
    check_switch(cfg, run)
    return Resolved(teacher=teacher)


# -- checks (validate) ------------------------------------------------------------------------------- #
def classification_head(run):
    """The task's head; a SpecError unless the task is sequence classification."""
    head = run.task.head(run.env)
    if head.kind != "sequence" or head.problem_type not in CLASSIFICATION:
        raise SpecError(f"task: DoKTra distils single-label sequence classifiers; {run.task.name!r} is a "
                        f"{head.kind} {head.problem_type} task")
    return head


def resolve_teacher(cfg: DoktraConfig, run, head) -> Teacher | None:
    """The teacher (checked), or None when the variant reads none and none is set."""
    from kinject.api import registry

    given = [(i, s) for i, s in enumerate(run.sources) if s.kind == "model"]
    if len(given) > 1 or (given and cfg.teacher):
        raise SpecError(f"sources.{given[-1][0]}: DoKTra distils from one teacher; give it once (strategy.teacher "
                        "or one `model` source)")
    if cfg.teacher:
        cls = registry("sources").get("model")
        source, field = cls(cls.Config(model=cfg.teacher, revision=cfg.teacher_revision)), "strategy.teacher"
    elif given:
        source, field = given[0][1], f"sources.{given[0][0]}"
    elif cfg.variant in NEEDS_TEACHER and run.spec.protocol == "quick":  # a quick try: the run's model teaches
        import logging

        logging.getLogger("kinject").info("doktra --quick: no strategy.teacher given; the run's model (%s) is the "
                                          "teacher (set strategy.teacher to choose one)", run.spec.model.name)
        cls = registry("sources").get("model")
        source, field = cls(cls.Config(model=run.spec.model.name)), "strategy.teacher"
    elif cfg.variant in NEEDS_TEACHER:
        raise SpecError(f"strategy.teacher: variant {cfg.variant!r} distils from a teacher; add one, e.g. --set "
                        f"strategy.teacher=minilm (an HF id, a model or run directory work too; --quick uses the "
                        "run's own model)")
    else:
        return None
    if cfg.variant == "student-ft":
        return None
    try:
        source.check(run.env)
    except KinjectError as exc:
        raise SpecError(f"{field}: {getattr(exc, 'reason', exc)}") from None
    ref = teacher_ref(source, run.env, run.spec.model)
    seen = model_input(run, source.config.model, field)  # a teacher that is a kinject run: the facts it saw
    if seen is not None:
        record(run, seen)
    as_given = check_teacher(ref, head, field, cfg.train_teacher)
    if as_given and cfg.variant == "no-ctt":
        raise SpecError(f"strategy.variant: no-ctt trains the teacher with beta1 = 0, but {field} is already "
                        "fine-tuned; set strategy.train_teacher: always")
    return Teacher(ref, as_given)


def analysis_split(cfg: DoktraConfig, run) -> str:
    """The split L_AT is measured on (checked)."""
    split = cfg.analysis_split or run.task.eval_splits[0]
    if split not in (*run.task.eval_splits, run.task.train_split):
        raise SpecError(f"strategy.analysis_split: task {run.task.name!r} has no split {split!r}")
    return split


def distill_training(cfg: DoktraConfig, run) -> TrainingSpec:
    """The distillation + refinement budget: the run's settings without the fine-tuning-only ones (a task's
    recommended head learning rate does not reach this stage; the reference uses one rate for all parameters),
    then ``distill_training``'s overrides."""
    return cfg.distill_training.apply(run.spec.training, method_stage=True)


def check_switch(cfg: DoktraConfig, run) -> None:
    """A distilling variant must distil for at least one optimiser step before the switch at gamma."""
    if cfg.objective() in ("abd", "kd"):
        import math

        training = distill_training(cfg, run)
        if training.max_steps > 0:
            total = training.max_steps
        else:
            examples = len(run.task.examples(run.task.train_split, run.env))
            total = math.ceil(training.epochs * math.ceil(examples / (training.batch_size
                                                                      * training.gradient_accumulation_steps)))
        if int(cfg.gamma * total) == 0:
            raise SpecError(f"strategy.gamma: int(gamma x steps) = int({cfg.gamma} x {total}) = 0, so nothing is "
                            "distilled; raise gamma or the distillation budget (strategy.distill_training)")


# -- stage builders (stages) ------------------------------------------------------------------------- #
def calibrated_stage(run, name: str, beta: float, model: ModelRef | None = None,
                     training: TrainingSpec | None = None) -> Stage:
    """Fine-tune ``model`` (default: the run's) with L = CE - beta H(p): the shared fine-tune body."""
    from .trainers import CalibratedConfig  # imports transformers: only when the stage is built

    base = dict(finetune_stage(run, name, training=training).config)
    config = CalibratedConfig(**{**base, "model": base["model"] if model is None else model}, beta=beta)
    return Stage(name=name, body=finetune_body, config=config, produces_model=True)


def teacher_stage(run, cfg: DoktraConfig, teacher: Teacher) -> Stage:
    """CTT from the teacher's encoder, or the given fine-tuned teacher with its rows in the task's label order."""
    if teacher.as_given:
        config = ImportConfig(teacher=teacher.ref, task=run.task_ref())
        return Stage(name=TEACHER, body=import_body, config=config, produces_model=True)
    training = cfg.teacher_training.apply(run.spec.training)
    return calibrated_stage(run, TEACHER, cfg.teacher_beta(), teacher.ref, training)


def outputs_stage(run, cfg: DoktraConfig) -> Stage:
    """The frozen teacher's [CLS] and logits, once per training and L_AT example."""
    config = TeacherOutputsConfig(task=run.task_ref(), teacher_stage=TEACHER, max_length=run.spec.model.max_length,
                                  attn_implementation=run.spec.model.attn_implementation,
                                  analysis_split=analysis_split(cfg, run), analysis_examples=cfg.analysis_examples,
                                  batch_size=run.spec.training.eval_batch_size)
    return Stage(name=OUTPUTS, body=teacher_outputs_body, config=config, inputs=(config.teacher_stage,))


def distill_stage(run, cfg: DoktraConfig) -> Stage:
    """Distil into the fine-tuned student from the cached outputs or the live teacher (none: no-abd), then refine;
    the fields an objective does not use stay None, so they do not key it."""
    objective = cfg.objective()
    cached = objective != "none" and cfg.teacher_cache
    teacher = None if objective == "none" else (OUTPUTS if cached else TEACHER)
    abd, kd = objective == "abd", objective == "kd"
    config = DistillConfig(
        task=run.task_ref(), objective=objective, training=distill_training(cfg, run),
        seed=run.spec.seed, max_length=run.spec.model.max_length,
        attn_implementation=run.spec.model.attn_implementation, student_stage=STUDENT,
        teacher_stage=teacher if teacher and not cached else None, outputs_stage=teacher if cached else None,
        beta=cfg.beta2, gamma=cfg.gamma if teacher else None, margin=cfg.margin if abd else None,
        margin_unit=cfg.margin_unit if abd else None,
        abd_scale=cfg.abd_scale if abd else None, projection=cfg.projection if teacher else None,
        kd_temperature=cfg.kd_temperature if kd else None, kd_alpha=cfg.kd_alpha if kd else None,
        analysis_split=analysis_split(cfg, run) if teacher else None,
        analysis_examples=cfg.analysis_examples if teacher else None,
        batch_size=run.spec.training.eval_batch_size)
    inputs = tuple(s for s in (config.student_stage, config.outputs_stage, config.teacher_stage) if s)
    return Stage(name=DISTILL, body=distill_body, config=config, inputs=inputs, produces_model=True)


def student_stages(run, cfg: DoktraConfig) -> list[Stage]:
    """The variant's student: cp-only fine-tuning, or (the cached teacher outputs and) the distillation stage."""
    if cfg.variant == "cp-only":
        return [calibrated_stage(run, CP, cfg.beta2)]
    outputs = [outputs_stage(run, cfg)] if cfg.objective() != "none" and cfg.teacher_cache else []
    return [*outputs, distill_stage(run, cfg)]


def report_stage(run, cfg: DoktraConfig, final_model: str, has_teacher: bool) -> Stage:
    """Metrics of the final student, the fine-tuned student and the teacher side by side, ECE, L_AT, plots."""
    config = ReportConfig(task=run.task_ref(), variant=cfg.variant, metric=run.task.primary_metric(), bins=cfg.ece_bins,
                          final=FINAL, baseline=STUDENT_EVALUATE, teacher=TEACHER_EVALUATE if has_teacher else None,
                          distill=DISTILL if final_model == DISTILL else None)
    inputs = tuple(s for s in (config.final, config.baseline, config.teacher, config.distill) if s)
    return Stage(name=REPORT, body=report_body, config=config, inputs=inputs,
                 artifacts=("plots", "calibration.json"))
