"""MoP's config: the partition (K, shuffle control, cross-part triples), the knowledge adapters (config, entity head,
budget) and the downstream mixture (softmax / Gumbel / MoE, joint or fusion-only fine-tuning, which adapters)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from kinject.api import PluginConfig

Mixture = Literal["softmax", "gumbel", "moe"]


class MopConfig(PluginConfig):
    partitions: int = Field(20, ge=2, description="K: METIS parts of the entity graph, one adapter each (paper: "
                            "5/10/20/40, 20 best).")
    mixture: Mixture = Field("softmax", description="How the K adapters are mixed in every layer: softmax "
                             "(AdapterFusion, the paper's default), gumbel (Gumbel-softmax at temperature tau; "
                             "deterministic softmax(scores/tau) at evaluation) or moe (noisy top-k with a "
                             "load-balancing loss; no noise at evaluation).")
    tau: float = Field(0.5, gt=0, description="Gumbel-softmax temperature (mixture: gumbel; paper: 0.1-0.75).")
    top_k: int = Field(2, ge=1, description="Adapters mixed per token (mixture: moe; paper: 2-15). At most K.")
    moe_loss_coef: float = Field(0.01, ge=0, description="Weight of the MoE load-balancing loss "
                                 "(cv^2 of importance + cv^2 of load, Shazeer et al. 2017).")
    finetune: Literal["joint", "fusion"] = Field(
        "joint", description="Downstream training: joint (base model, adapters and fusion together, as the paper "
        "did) or fusion (base and adapters frozen; fusion layers and the task head train; with one adapter in "
        "adapters_used, the task head alone). With adapter_max_steps=0: fusion over untrained adapters.")
    fusion_regularization: bool = Field(
        True, description="Add the \"dynamic\" fusion's value regulariser, 0.01 |I - W_v|^2 per layer, to the "
        "training loss (AdapterFusion's; the MoP reference code never adds it).")
    adapters_used: list[int] | None = Field(
        None, description="Partition adapters the task model uses (None: all K). One part [i]: that adapter alone, no "
        "fusion (the paper's Fig. 2); several [i, j, ...]: fusion of those parts only (its Tables 7/8). Sorted; the "
        "adapter stages are the same cache entries whichever parts a run uses.")
    shuffle: float = Field(0.0, ge=0, le=1, description="Move this fraction of entities to random parts after "
                           "METIS (the paper's Table 3 control; part sizes kept).")
    cross_part: Literal["drop", "head"] = Field(
        "drop", description="Triples whose head and tail fall in different parts: drop (the reference code) or "
        "keep them in the head's part (its classifier then also covers those foreign tails).")
    bidirectional: bool = Field(False, description="Also train head prediction: [CLS] r [SEP] t [SEP] -> h "
                                "(the reference's --bi_direction).")
    entity_head: Literal["names", "linear", "frozen-random"] = Field(
        "names", description="How the adapter's training head scores a part's entities: names (from [CLS]: cosine "
        "to each entity's name embedding by the frozen base model, learned projection, scale and per-entity bias), "
        "linear (from [CLS]: one free softmax row per entity, trained with the adapter; at our scale it learns only "
        "the tail prior, see docs/mop.md) or frozen-random (the reference code's: dropout and a random linear map "
        "from the pooler output that never trains, so only the adapter learns). Only the adapters carry on to the "
        "fusion; the head is discarded.")
    kg_seed: int = Field(1, description="Seed of the knowledge side: METIS, the shuffle, held-out triples and "
                         "adapter training (reference: METIS seed 1). Independent of the run seed, so every task "
                         "and seed reuses the same cached adapters.")
    kg_max_triples: int | None = Field(None, ge=1, description="Use a seeded sample of about N triples of the "
                                       "default HPO graph, or the first N of a configured source (None: all).")
    kg_max_length: int = Field(64, ge=16, description="Tokens per KG sequence (reference: 64).")
    adapter: str | dict[str, Any] = Field(
        "seq_bn", description="Adapter config: an `adapters` bottleneck config name (seq_bn = Pfeiffer, "
        "double_seq_bn = Houlsby, par_bn, ...) or a dict of its fields (e.g. {architecture: bottleneck, ...}).")
    reduction_factor: float | None = Field(8, gt=0, description="Bottleneck reduction factor (reference: 8); "
                                           "None keeps the adapter config's own.")
    adapter_epochs: float = Field(2.0, gt=0, description="Epochs over each part's triples (reference: 1-2).")
    adapter_max_steps: int = Field(-1, ge=-1, description="Cap on optimiser steps per part (-1: by epochs; 0: no "
                                   "training at all, adapters stay at their initialisation: a no-knowledge control).")
    adapter_learning_rate: float = Field(1e-4, gt=0, description="Adapter training peak learning rate (reference: "
                                         "1e-4, AdamW, weight decay 0.01, no warm-up).")
    adapter_warmup_ratio: float = Field(0.1, ge=0, le=1, description="Fraction of each part's adapter steps for "
                                        "linear warm-up (kinject's default 0.1; the reference: 0, linear decay only).")
    adapter_batch_size: int = Field(64, ge=1, description="Adapter training batch size (reference: 256 on KGs "
                                    "with ~100k triples per part; smaller here so small parts get enough steps).")
    heldout_fraction: float = Field(0.1, ge=0, lt=1, description="Fraction of each part's triples held out to "
                                    "measure its adapter's entity prediction on unseen triples (kinject's "
                                    "diagnostic; the reference trains on all of them). The paper's Fig. 2 is the "
                                    "downstream score of each adapter alone: adapters_used=[i].")
    baseline: bool = Field(True, description="Also fine-tune and evaluate the plain model (the `finetune` "
                           "strategy's stages, shared cache) and compare MoP against it, paired.")
    analysis: bool = Field(True, description="Write per-partition adapter accuracy and per-example mixture "
                           "weights (JSON + PNG).")
    mixture_examples: int = Field(200, ge=1, description="Evaluation examples whose mixture weights are recorded.")

    @field_validator("adapters_used")
    @classmethod
    def _distinct_sorted(cls, parts: list[int] | None) -> list[int] | None:
        if parts is None:
            return None
        if not parts:
            raise ValueError("name at least one part (None: all K)")
        if len(set(parts)) < len(parts) or min(parts) < 0:
            raise ValueError(f"parts must be distinct and >= 0 (got {parts})")
        return sorted(parts)
