"""The `doktra` strategy (Choi et al., ACL 2022): calibrated teacher training -> student fine-tuning ->
activation-boundary distillation on the last-layer [CLS] -> refinement with a confidence penalty. Its config, the
checks run before any stage, the stage builders and the Strategy class.

Stages (each cached): ``doktra-teacher`` (CTT, or a given fine-tuned teacher taken as it is, :mod:`.teacher`) +
``doktra-teacher-evaluate``; ``finetune`` + ``evaluate`` (the student alone: the same keys as the `finetune`
strategy, and the baseline); ``doktra-teacher-outputs`` (the frozen teacher's [CLS] and logits, once per example,
:mod:`.teacher`); ``doktra-distill`` (:mod:`.distill`; or ``doktra-cp`` for cp-only, :mod:`.trainers`);
``doktra-evaluate``; ``doktra-report`` (metrics of all three models, ECE, reliability diagrams, % retained, L_AT,
:mod:`.report`) and ``doktra-compare`` (paired bootstrap against the fine-tuned student).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, NamedTuple

from pydantic import Field

from kinject.api import KinjectError, ModelRef, PluginConfig, SpecError, Stage, Strategy, TrainingSpec
from kinject.knowledge import model_input, record
from kinject.training import TrainingOverrides, evaluate_stage, finetune_body, finetune_stage

from .distill import DistillConfig, distill_body
from .report import ReportConfig, report_body
from .teacher import ImportConfig, TeacherOutputsConfig, check_teacher, import_body, teacher_outputs_body, teacher_ref

Variant = Literal["doktra", "student-ft", "kd", "no-ctt", "no-abd", "cp-only"]

# variant -> what the student's second training stage optimises before the switch at gamma
OBJECTIVES: dict[str, str] = {"doktra": "abd", "no-ctt": "abd", "kd": "kd", "no-abd": "none"}
#: variants whose distillation reads a teacher
NEEDS_TEACHER = ("doktra", "no-ctt", "kd")


class DoktraConfig(PluginConfig):
    """Options of the `doktra` strategy (names as in Choi et al. 2022: beta1, beta2, gamma, margin mu)."""

    variant: Variant = Field("doktra", description="doktra (CTT teacher -> student fine-tuning -> activation-"
                             "boundary distillation -> refinement); baselines: student-ft (student fine-tuned "
                             "alone), kd (KL on temperature-softened logits instead of ABD), no-ctt (beta1 = 0), "
                             "no-abd (refinement only, no teacher signal), cp-only (the student fine-tuned "
                             "with the confidence penalty beta2, no teacher).")
    teacher: str | None = Field(None, description="The teacher: an HF id, a model directory, a run directory "
                                "(its model/) or 'minilm'/'tiny'; resolved through the `model` knowledge source "
                                "(a `model` entry in `sources` works too). A pre-trained encoder is fine-tuned "
                                "with CTT; a sequence classifier with the task's labels is used as it is.")
    teacher_revision: str | None = Field(None, description="Hub revision of the teacher (hub ids only).")
    train_teacher: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: fine-tune (CTT) unless the teacher is already a sequence classifier; always: "
        "CTT from the teacher's encoder (its head dropped); never: the teacher must be a fine-tuned classifier.")
    beta1: float = Field(0.3, ge=0, le=1, description="Confidence penalty of teacher training: "
                         "L = CE - beta1 H(p) (paper grid 0, .3, .5, .7; ChemProt/DDI .3, GAD .7, HoC 0).")
    beta2: float = Field(0.5, ge=0, le=1, description="Confidence penalty of the refinement after the switch "
                         "(and of cp-only fine-tuning): L = CE - beta2 H(p).")
    gamma: float = Field(0.9, ge=0, le=1, description="Loss switch rate: distil for int(gamma x N) of the "
                         "distillation stage's N optimiser steps, then refine (the reference switches after "
                         "int(gamma x epochs) whole epochs, which is the same only at its 10 epochs).")
    margin: float = Field(1.0, gt=0, description="Margin mu of the activation-boundary hinge loss (in margin_unit).")
    margin_unit: Literal["absolute", "teacher"] = Field(
        "absolute", description="absolute: mu as it is (the paper's 1.0, for BERT-large/ALBERT activations); "
        "teacher: mu times the teacher's mean |[CLS]| on the L_AT examples, so the hinge is in the units of the "
        "teacher's activations (minilm's last-layer [CLS] has mean |x| ~0.24: an absolute mu of 1 mostly inflates "
        "magnitudes instead of transferring signs).")
    abd_scale: float = Field(1000.0, gt=0, description="The AB loss (summed over [CLS] neurons and examples) is "
                             "divided by this and by the batch size, as the reference code does.")
    projection: Literal["auto", "random", "learned"] = Field(
        "auto", description="Between the [CLS] widths: auto = none when they match, else random; random = the "
        "teacher's [CLS] through a frozen Xavier-initialised linear map (bias 0.01), never trained (the reference "
        "code); learned = the student's [CLS] through a linear connector to the teacher's width, trained with the "
        "student during distillation (Heo et al.).")
    kd_temperature: float = Field(2.0, gt=0, description="kd: softmax/sigmoid temperature T (loss x T^2).")
    kd_alpha: float = Field(1.0, ge=0, le=1, description="kd: weight of the KL term before the switch; "
                            "1 - kd_alpha goes to the task loss.")
    teacher_cache: bool = Field(True, description="Compute the frozen teacher's [CLS] and logits once per example "
                                "(stage doktra-teacher-outputs) instead of running the teacher on every batch.")
    teacher_training: TrainingOverrides = Field(
        default_factory=TrainingOverrides, description="Teacher (CTT) budget; the paper: lr 2e-5, 3-10 epochs, "
        "no warm-up.")
    distill_training: TrainingOverrides = Field(
        default_factory=TrainingOverrides, description="Distillation + refinement budget; the paper: 10 epochs, "
        "lr 6e-6 to 1e-5.")
    ece_bins: int = Field(15, ge=1, le=1000, description="Equal-width confidence bins of the ECE and the "
                          "reliability diagrams.")
    analysis_split: str | None = Field(None, description="Split on which L_AT (sign disagreements of [CLS], "
                                       "Eq. 4) is measured before and after distillation (default: the task's "
                                       "first evaluation split).")
    analysis_examples: int = Field(1000, ge=1, description="First N examples of analysis_split used for L_AT.")

    def objective(self) -> str | None:
        """abd, kd or none for the student's distillation stage; None for variants without one."""
        return OBJECTIVES.get(self.variant)

    def teacher_beta(self) -> float:
        return 0.0 if self.variant == "no-ctt" else self.beta1


# -- stage names, and what validate resolves --------------------------------------------------------- #
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


# -- the strategy ------------------------------------------------------------------------------------ #
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

    @staticmethod
    def label(config: DoktraConfig) -> str:
        """The arm's name in comparisons, leaderboards and the card: ``doktra``, else ``doktra/<variant>``; the
        baseline it is compared with is ``finetune``, the student fine-tuned alone (the finetune strategy's
        stages)."""
        return "doktra" if config.variant == "doktra" else f"doktra/{config.variant}"

    def validate(self, run) -> Resolved:
        """Check the task, the teacher, the L_AT split and the switch step before any stage (:func:`resolve`);
        returns the teacher (None: the variant reads none and none is given), which :meth:`stages` reads as
        ``run.resolved.teacher``."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
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
                                 labels=("finetune", self.label(cfg)))]
        return stages
