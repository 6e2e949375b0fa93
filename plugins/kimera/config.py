"""KIMERA's config: the variant (one comparison table: finetune, pruned, no-mask, hard, soft, b+f, random,
from-scratch), the mask search, the KG retraining budget, the multi-task head settings and the controls for
experiments (random mask, scoring samples, a given mask, a fixed retraining seed, held-out KG triples)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kinject.api import FILE_PATH, PluginConfig

Variant = Literal["finetune", "pruned", "no-mask", "hard", "soft", "b+f", "random", "from-scratch"]

# variant -> (mask, forward_mask, from_scratch); finetune / pruned do no KG retraining
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "no-mask": ("none", False, False),
    "hard": ("hard", False, False),
    "soft": ("soft", False, False),
    "b+f": ("hard", True, False),
    "random": ("hard", False, False),  # the searched hard mask's count of redundant heads, placed at random
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
                             "backward and forward pass), random (control: as many redundant heads as the searched "
                             "hard mask, chosen uniformly at random with mask_seed), from-scratch (random init, KG "
                             "training only).")
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
    kg_token_budget: int | None = Field(None, ge=16, le=1_000_000, description="Token-budget batching: each KG batch "
                                        "holds as many rows as fit this many padded tokens (short rows pack into "
                                        "larger batches, fewer steps per epoch); None: kg_batch_size rows per batch. "
                                        "Changes the optimisation (batch size and steps): docs/kimera.md.")
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
    # -- controls for experiments (docs/kimera.md) -- #
    mask_seed: int = Field(0, description="variant random: seed of the random choice of redundant heads (the "
                           "kimera-mask-random stage; independent of the run seed).")
    score_seed: int | None = Field(None, description="None: the scoring set is the first score_examples examples "
                                   "of score_split; an int: a seeded random draw of them (whole candidate groups "
                                   "for retrieval tasks), so masks can be searched on different samples and "
                                   "compared (kimera.masks.redundant_overlap).")
    mask_file: str | None = Field(None, description="A masks.json of an earlier KIMERA run (its run directory's "
                                  "masks.json, or the directory): use its mask instead of searching one. The mask "
                                  "stage is then keyed by the mask's values only, so runs on other tasks or seeds "
                                  "share it, and the retraining after it (the paper: one mask for all evaluations).",
                                  json_schema_extra=FILE_PATH)
    until: Literal["mask", "all"] = Field("all", description="mask: stop after the mask search (phase-1 fine-tune, "
                                          "kimera-mask-<kind> and its kimera-search-report; masks.json and "
                                          "search.json go into the run directory), e.g. to search masks on several "
                                          "score_seed; all: the whole pipeline.")
    retrain_seed: int | None = Field(None, description="Seed of the KG retraining stage (None: the run seed). "
                                     "Fixed, runs that differ only in seed (--repeats) share one kimera-retrain stage "
                                     "when its mask does not depend on the seed either (no mask, or mask_file) and "
                                     "vary only phase 3.")
    kg_heldout: int = Field(0, ge=0, description="Triples held out of KG retraining (drawn with the retraining "
                            "seed among the distinct triples of the first kg_max_triples). > 0: after "
                            "retraining, retrain.json `heldout` has the relation-prediction and triplet-classification "
                            "accuracy of the trained KG heads on them (negatives corrupted as in training) next to "
                            "their majority and chance levels: the positive control that knowledge went in.")

    @model_validator(mode="after")
    def _consistent(self):
        if self.variant in ("finetune", "pruned"):
            set_fields = [f for f in ("mask", "forward_mask", "from_scratch", "retrain_seed")
                          if getattr(self, f) is not None]
            set_fields += ["kg_heldout"] if self.kg_heldout else []
            if set_fields:
                raise ValueError(f"{', '.join(set_fields)} only apply to retraining variants, not {self.variant!r}")
            self._check_mask_controls("hard" if self.variant == "pruned" else "none")
            return self
        mask, forward, _ = self.settings()
        if forward and mask == "none":
            raise ValueError("forward_mask needs a mask (mask: hard or soft)")
        if self.variant == "random" and mask != "hard":
            raise ValueError(f"mask: the random variant draws a hard mask (got mask={mask!r})")
        if sum(v for v in self.alphas.model_dump().values()) == 0:
            raise ValueError("alphas: every KG task is disabled")
        if self.kg_heldout and not (self.alphas.relation or self.alphas.triplet):
            raise ValueError("kg_heldout: the held-out triples are scored by the relation and triplet heads, and "
                             "alphas disable both")
        self._check_mask_controls(mask)
        return self

    def _check_mask_controls(self, mask: str) -> None:
        """until / mask_file / score_seed need a mask that is searched or given."""
        if mask == "none":
            used = [f for f in ("mask_file", "score_seed") if getattr(self, f) is not None]
            used += ["until"] if self.until == "mask" else []
            if used:
                raise ValueError(f"{', '.join(used)}: variant {self.variant!r} uses no head mask")
        if self.mask_file is not None:
            clash = [f for f in ("finetuned_model", "score_seed") if getattr(self, f) is not None]
            clash += ["until"] if self.until == "mask" else []
            if clash:
                raise ValueError(f"mask_file: the mask is given, so there is no mask search for {', '.join(clash)}")

    def settings(self) -> tuple[str, bool, bool]:
        """(mask, forward_mask, from_scratch) after applying the variant's defaults."""
        mask, forward, scratch = VARIANTS.get(self.variant, ("none", False, False))
        return (self.mask if self.mask is not None else mask,
                self.forward_mask if self.forward_mask is not None else forward,
                self.from_scratch if self.from_scratch is not None else scratch)
