"""The `doktra` strategy (Choi et al., ACL 2022): calibrated teacher training -> student fine-tuning ->
activation-boundary distillation on the last-layer [CLS] -> refinement with a confidence penalty.

Stages (each cached; configs in :mod:`.stages`, bodies in :mod:`.teacher`, :mod:`.distill`, :mod:`.report`): ``doktra-teacher`` (CTT, or a given fine-tuned
teacher taken as it is) + ``doktra-teacher-evaluate``; ``finetune`` + ``evaluate`` (the student alone: the
same keys as the `finetune` strategy, and the baseline); ``doktra-teacher-outputs`` (the frozen teacher's
[CLS] and logits, once per example); ``doktra-distill`` (or ``doktra-cp`` for cp-only); ``doktra-evaluate``;
``doktra-report`` (metrics of all three models, ECE, reliability diagrams, % retained, L_AT) and
``doktra-compare`` (paired bootstrap against the fine-tuned student).
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import KinjectError, SpecError, Stage, Strategy

from .config import NEEDS_TEACHER, DoktraConfig
from .distill import distill_body
from .report import report_body
from .stages import CalibratedConfig, DistillConfig, ImportConfig, ReportConfig, TeacherOutputsConfig
from .teacher import calibrated_body, import_body, teacher_outputs_body

CLASSIFICATION = ("single_label_classification", "multi_label_classification")


class DoktraStrategy(Strategy):
    """DoKTra: calibrated teacher, activation-boundary distillation into a fine-tuned student, refinement."""

    Config: ClassVar = DoktraConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"model"})

    # -- validation (runs in prepare, before any stage) ----------------------------------------- #
    def validate(self, run) -> None:
        super().validate(run)
        cfg = self.config
        head = run.task.head(run.env)
        if head.kind != "sequence" or head.problem_type not in CLASSIFICATION:
            raise SpecError(f"task: DoKTra distils sequence classifiers; {run.task.name!r} is a {head.kind} "
                            f"{head.problem_type} task")
        self._teacher = self._resolve_teacher(run, head)
        split = self.analysis_split(run)
        if split not in (*run.task.eval_splits, run.task.train_split):
            raise SpecError(f"strategy.analysis_split: task {run.task.name!r} has no split {split!r}")
        if cfg.objective() in ("abd", "kd"):
            training = cfg.distill_training.apply(run.spec.training)
            total, unit = (training.max_steps, "max_steps") if training.max_steps > 0 else (training.epochs, "epochs")
            if int(cfg.gamma * total) == 0:
                raise SpecError(f"strategy.gamma: int(gamma x {unit}) = int({cfg.gamma} x {total}) = 0, so nothing is "
                                f"distilled; raise gamma or strategy.distill_training.{unit}")

    def _resolve_teacher(self, run, head):
        """(ModelRef, used as given?) of the teacher, or None when the variant reads none and none is set."""
        from kinject.api import registry

        from .teacher import check_teacher, teacher_ref

        cfg = self.config
        given = [(i, s) for i, s in enumerate(run.sources) if s.kind == "model"]
        if len(given) > 1 or (given and cfg.teacher):
            raise SpecError(f"sources.{given[-1][0]}: DoKTra distils from one teacher; give it once (strategy.teacher "
                            "or one `model` source)")
        if cfg.teacher:
            cls = registry("sources").get("model")
            source, field = cls(cls.Config(model=cfg.teacher, revision=cfg.teacher_revision)), "strategy.teacher"
        elif given:
            source, field = given[0][1], f"sources.{given[0][0]}"
        elif cfg.variant in NEEDS_TEACHER:
            raise SpecError(f"strategy.teacher: variant {cfg.variant!r} distils from a teacher; set strategy.teacher "
                            "to an HF id, a model or run directory, or minilm")
        else:
            return None
        if cfg.variant == "student-ft":
            return None
        try:
            source.check(run.env)
        except KinjectError as exc:
            raise SpecError(f"{field}: {getattr(exc, 'reason', exc)}") from None
        ref = teacher_ref(source, run.env, run.spec.model)
        as_given = check_teacher(ref, head, field, cfg.train_teacher)
        if as_given and cfg.variant == "no-ctt":
            raise SpecError(f"strategy.variant: no-ctt trains the teacher with beta1 = 0, but {field} is already "
                            "fine-tuned; set strategy.train_teacher: always")
        return ref, as_given

    def analysis_split(self, run) -> str:
        return self.config.analysis_split or run.task.eval_splits[0]

    # -- stage builders ------------------------------------------------------------------------ #
    def teacher_stage(self, run, ref, as_given: bool) -> Stage:
        cfg = self.config
        if as_given:
            config = ImportConfig(teacher=ref, task=run.task_ref())
            return Stage(name="doktra-teacher", body=import_body, config=config, produces_model=True)
        config = CalibratedConfig(model=ref, task=run.task_ref(), training=cfg.teacher_training.apply(run.spec.training),
                                  seed=run.spec.seed, beta=cfg.teacher_beta())
        return Stage(name="doktra-teacher", body=calibrated_body, config=config, produces_model=True)

    def outputs_stage(self, run) -> Stage:
        config = TeacherOutputsConfig(task=run.task_ref(), teacher_stage="doktra-teacher",
                                      max_length=run.spec.model.max_length,
                                      attn_implementation=run.spec.model.attn_implementation,
                                      analysis_split=self.analysis_split(run),
                                      analysis_examples=self.config.analysis_examples,
                                      batch_size=run.spec.training.eval_batch_size)
        return Stage(name="doktra-teacher-outputs", body=teacher_outputs_body, config=config,
                     inputs=("doktra-teacher",))

    def distill_stage(self, run) -> Stage:
        cfg, objective = self.config, self.config.objective()
        cached = objective != "none" and cfg.teacher_cache
        teacher = None if objective == "none" else ("doktra-teacher-outputs" if cached else "doktra-teacher")
        abd, kd = objective == "abd", objective == "kd"
        config = DistillConfig(
            task=run.task_ref(), objective=objective, training=cfg.distill_training.apply(run.spec.training),
            seed=run.spec.seed, max_length=run.spec.model.max_length,
            attn_implementation=run.spec.model.attn_implementation,
            teacher_stage=teacher if teacher and not cached else None, outputs_stage=teacher if cached else None,
            beta=cfg.beta2, gamma=cfg.gamma if teacher else None, margin=cfg.margin if abd else None,
            abd_scale=cfg.abd_scale if abd else None, projection=cfg.projection if teacher else None,
            kd_temperature=cfg.kd_temperature if kd else None, kd_alpha=cfg.kd_alpha if kd else None,
            analysis_split=self.analysis_split(run) if teacher else None,
            analysis_examples=cfg.analysis_examples if teacher else None,
            batch_size=run.spec.training.eval_batch_size)
        return Stage(name="doktra-distill", body=distill_body, config=config,
                     inputs=("finetune", teacher) if teacher else ("finetune",), produces_model=True)

    def report_stage(self, run, final_model: str) -> Stage:
        teacher = "doktra-teacher-evaluate" if getattr(self, "_teacher", None) else None
        distill = "doktra-distill" if final_model == "doktra-distill" else None
        config = ReportConfig(task=run.task_ref(), variant=self.config.variant, metric=run.task.primary_metric(),
                              bins=self.config.ece_bins, teacher=teacher, distill=distill)
        inputs = tuple(s for s in ("doktra-evaluate", "evaluate", teacher, distill) if s)
        return Stage(name="doktra-report", body=report_body, config=config, inputs=inputs,
                     artifacts=("plots", "calibration.json"))

    # -- the pipeline --------------------------------------------------------------------------- #
    def stages(self, run) -> list[Stage]:
        from kinject.plugins.evidence.stage import compare_stage
        from kinject.api import evaluate_stage, finetune_stage

        cfg = self.config
        if cfg.variant == "student-ft":
            return [finetune_stage(run), evaluate_stage(run, "finetune")]
        if not hasattr(self, "_teacher"):
            self._teacher = self._resolve_teacher(run, run.task.head(run.env))
        stages: list[Stage] = []
        if self._teacher:
            stages += [self.teacher_stage(run, *self._teacher),
                       evaluate_stage(run, "doktra-teacher", name="doktra-teacher-evaluate", export=False)]
        stages += [finetune_stage(run), evaluate_stage(run, "finetune", export=False)]
        if cfg.variant == "cp-only":
            config = CalibratedConfig(model=run.model_ref(), task=run.task_ref(),
                                      training=run.spec.training.for_training(), seed=run.spec.seed, beta=cfg.beta2)
            stages.append(Stage(name="doktra-cp", body=calibrated_body, config=config, produces_model=True))
            final = "doktra-cp"
        else:
            if cfg.objective() != "none" and cfg.teacher_cache:
                stages.append(self.outputs_stage(run))
            stages.append(self.distill_stage(run))
            final = "doktra-distill"
        stages += [evaluate_stage(run, final, name="doktra-evaluate"), self.report_stage(run, final),
                   compare_stage(run, baseline="evaluate", other="doktra-evaluate", name="doktra-compare",
                                 labels=("student-ft", cfg.variant))]
        return stages
