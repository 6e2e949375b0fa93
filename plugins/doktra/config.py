"""DoKTra's config: the variant (one comparison table), the teacher, the loss weights and schedule, the
per-stage training budgets and the calibration report."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import PluginConfig
from kinject.training import TrainingOverrides

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
