"""MoP's stage configs (what each key holds) for the knowledge side and the report.

``mop-partition`` (METIS over the KG's entity graph, :mod:`.partition`) -> ``mop-adapter-<i>`` (one adapter per part
learns to predict the part's entities, :mod:`.entity_prediction`; spread over the processes of a torchrun launch)
-> ``mop-finetune`` -> ``mop-evaluate`` (:mod:`.fusion`) -> ``mop-report`` (:mod:`.report`). The knowledge side
holds no task and no run seed, so every task and seed reuses the same cached adapters.

The fused fine-tune and its evaluation subclass the kernel's ``FinetuneConfig`` / ``EvaluateConfig`` in
:mod:`.fusion` (``FusionConfig``, ``FusedEvaluateConfig``), not here: a config class's module joins the key of every
stage configured from it, with all it imports, so the fusion code kept here would re-key (and retrain) the K
adapters whenever the mixture is edited.
"""

from __future__ import annotations

from pydantic import Field

from kinject.api import NOT_KEYED, ModelRef, SourceRef, StageConfig, TaskRef, TrainingSpec


class KGSettings(StageConfig):
    """The knowledge graph and how its training rows are built (the knowledge library's build_kg_data "tail" rows)."""

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
    partition_stage: str  # the input stage whose partition.json / partition.safetensors say which rows are part i
    part: int
    adapter: dict  # the resolved adapters config (AdapterConfig.to_dict())
    training: TrainingSpec
    seed: int
    heldout_fraction: float
    bidirectional: bool
    entity_head: str  # "names", "linear" or "frozen-random" (MopConfig.entity_head)
    eval_batch_size: int = Field(256, json_schema_extra=NOT_KEYED)


class ReportConfig(StageConfig):
    task: TaskRef
    model_stage: str
    adapters: list[str]
    split: str
    examples: int
    max_length: int
    attn_implementation: str = "sdpa"
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)
