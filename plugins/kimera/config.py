"""KIMERA's config: the variant (one comparison table: finetune, pruned, no-mask, hard, soft, b+f,
from-scratch), the mask search, the KG retraining budget and the multi-task head settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kinject.interfaces import PluginConfig

Variant = Literal["finetune", "pruned", "no-mask", "hard", "soft", "b+f", "from-scratch"]

# variant -> (mask, forward_mask, from_scratch); finetune / pruned do no KG retraining
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "no-mask": ("none", False, False),
    "hard": ("hard", False, False),
    "soft": ("soft", False, False),
    "b+f": ("hard", True, False),
    "from-scratch": ("none", False, True),
}


class TaskWeights(PluginConfig):
    """Loss weights alpha_i of the KG tasks (0 disables a task)."""

    entity: float = Field(1.0, ge=0, description="Entity prediction (MLM over the masked entity's tokens).")
    relation: float = Field(1.0, ge=0, description="Relation prediction (multi-class).")
    triplet: float = Field(1.0, ge=0, description="Triplet classification (binary, corrupted negatives).")


class KimeraConfig(PluginConfig):
    variant: Variant = Field("hard", description="finetune (baseline), pruned (hard mask applied, then "
                             "fine-tuned), or a KIMERA retraining: no-mask, hard, soft, b+f (hard mask in the "
                             "backward and forward pass), from-scratch (random init, KG training only).")
    mask: Literal["none", "hard", "soft"] | None = Field(
        None, description="Head mask scaling the retraining updates by (1 - m); default: from the variant.")
    forward_mask: bool | None = Field(
        None, description="Also gate heads in the retraining forward pass (gate 1 - m: only retrained heads "
        "carry the KG predictions); default: from the variant.")
    from_scratch: bool | None = Field(None, description="Start retraining from a random init; default: from the "
                                      "variant.")
    finetuned_model: str | None = Field(
        None, description="A model already fine-tuned on the task to score heads with (skips phase-1 fine-tuning).")
    tau: float = Field(0.95, gt=0, le=1, description="Stop masking when the metric falls below tau x the "
                       "unmasked metric (paper: 0.95, 0.98 or 0.99).")
    rho: float = Field(0.1, gt=0, le=1, description="Proportion of the still-active heads masked per round.")
    max_rounds: int = Field(40, ge=1, description="Cap on masking rounds.")
    score_split: str | None = Field(None, description="Split scored for head importance and the mask search "
                                    "(default: the task's first evaluation split, e.g. dev).")
    score_examples: int | None = Field(2000, ge=2, description="Cap on the scoring set the search metric is "
                                       "measured on: the first N examples of score_split (retrieval tasks: whole "
                                       "candidate groups, so roughly N pairs); None: the whole split (CAPR dev: "
                                       "4000 pairs, a round ~1.7x the cost of the default; docs/kimera.md).")
    importance_examples: int | None = Field(1000, ge=1, description="Head importance (forward+backward) on the first "
                                            "N examples of the scoring set (whole groups); the rest only runs "
                                            "forward for the metric. None: importance on the whole scoring set.")
    score_batch_size: int = Field(32, ge=1, description="Batch size of importance scoring.")
    search_metric: str | None = Field(None, description="Metric the search watches (default: the task's selection "
                                      "metric: mrr for retrieval tasks, else the primary metric); higher must be better.")
    kg_steps: int = Field(200, ge=1, description="KG retraining optimiser steps (the retraining budget).")
    kg_batch_size: int = Field(16, ge=1, description="KG retraining batch size.")
    kg_learning_rate: float = Field(5e-5, gt=0, description="KG retraining peak learning rate.")
    kg_max_length: int = Field(64, ge=16, description="Tokens per KG sequence (entity caps shrink to fit).")
    kg_max_triples: int | None = Field(20000, ge=1, description="Use the first N triples of the source "
                                       "(None: all). --limit does not cap the KG.")
    alphas: TaskWeights = Field(default_factory=TaskWeights, description="KG task loss weights.")
    task_sampling: Literal["proportional", "uniform"] = Field(
        "proportional", description="Which KG task a batch comes from: proportional (every batch of every task "
        "once per epoch, shuffled: task i is drawn with probability pi_i ~ its size, so the expected loss is "
        "sum pi_i alpha_i L_i) or uniform (tasks take turns, smaller tasks repeat: each task is equally likely, "
        "the expected loss is sum alpha_i L_i / n, the paper's Eq. 4).")
    pooling: Literal["cls", "mean", "max", "learned"] = Field("cls", description="Pooling for the relation and "
                                                               "triplet heads.")
    other_params: Literal["train", "freeze"] = Field(
        "train", description="Non-attention encoder parameters (FFN, embeddings, LayerNorm, O bias) during "
        "retraining: train (at the full rate) or freeze.")
    analysis: bool = Field(True, description="Score heads again after KIMERA and write heatmaps and tables.")

    @model_validator(mode="after")
    def _consistent(self):
        if self.variant in ("finetune", "pruned"):
            set_fields = [f for f in ("mask", "forward_mask", "from_scratch") if getattr(self, f) is not None]
            if set_fields:
                raise ValueError(f"{', '.join(set_fields)} only apply to retraining variants, not {self.variant!r}")
            return self
        mask, forward, _ = self.settings()
        if forward and mask == "none":
            raise ValueError("forward_mask needs a mask (mask: hard or soft)")
        if sum(v for v in self.alphas.model_dump().values()) == 0:
            raise ValueError("alphas: every KG task is disabled")
        return self

    def settings(self) -> tuple[str, bool, bool]:
        """(mask, forward_mask, from_scratch) after applying the variant's defaults."""
        mask, forward, scratch = VARIANTS.get(self.variant, ("none", False, False))
        return (self.mask if self.mask is not None else mask,
                self.forward_mask if self.forward_mask is not None else forward,
                self.from_scratch if self.from_scratch is not None else scratch)
