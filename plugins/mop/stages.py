"""MoP's declared stages: their configs (what each key holds). The bodies live beside what they use, so a stage's
code fingerprint covers only its own code: :mod:`.knowledge` (partition, adapters), :mod:`.fusion` (fine-tune),
:mod:`.scoring` (evaluate, analysis); editing the analysis does not retrain the adapters.

``mop-partition`` (METIS over the KG's entity graph) -> ``mop-adapter-<i>`` (one per part; spread over the
processes of a torchrun launch) -> ``mop-finetune`` (adapters + fusion + task head) -> ``mop-evaluate`` ->
``mop-analysis``. The knowledge side (partition, adapters) holds no task and no run seed, so every task and seed
reuses the same cached adapters.
"""

from __future__ import annotations

from pydantic import Field

from kinject.api import ModelRef, NOT_KEYED, SourceRef, StageConfig, TaskRef, TrainingSpec

PARTITION = "mop-partition"


class KGSettings(StageConfig):
    """The knowledge graph and how its training rows are built (kinject.plugins.knowledge.kg "tail" rows)."""

    source: SourceRef
    max_length: int
    max_triples: int | None = None


class PartitionConfig(StageConfig):
    model: ModelRef  # its tokenizer builds the KG rows the adapters train on (same cache entry, same entity ids)
    kg: KGSettings
    partitions: int
    seed: int
    shuffle: float
    cross_part: str


class PartAdapterConfig(StageConfig):
    model: ModelRef
    kg: KGSettings
    part: int
    adapter: dict  # the resolved adapters config (AdapterConfig.to_dict())
    training: TrainingSpec
    seed: int
    heldout_fraction: float
    bidirectional: bool
    entity_head: str  # "names" or "linear" (MopConfig.entity_head)
    eval_batch_size: int = Field(256, json_schema_extra=NOT_KEYED)


class FusionConfig(StageConfig):
    model: ModelRef
    task: TaskRef
    training: TrainingSpec
    seed: int
    adapters: list[str]  # the adapter stages, in partition order
    mixture: dict  # mixture, tau, top_k, loss_coef (see fusion.install_mixture)
    joint: bool


class AnalysisConfig(StageConfig):
    task: TaskRef
    model_stage: str
    adapters: list[str]
    split: str
    examples: int
    max_length: int
    attn_implementation: str = "sdpa"
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)
