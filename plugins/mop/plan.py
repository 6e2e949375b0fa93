"""MoP's plan: what validation resolves (the knowledge graph, the adapter config) and counts, and the builders of
each stage from the strategy's config. Strategy-side code: no stage's key covers this module."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kinject.api import SourceRef, Stage, TrainingSpec, evaluate_stage, finetune_stage

from .config import MopConfig
from .entity_prediction import adapter_body
from .fusion import FusedEvaluateConfig, FusionConfig
from .partition import partition_body
from .report import analysis_body
from .stages import AnalysisConfig, KGSettings, PartAdapterConfig, PartitionConfig

LIBRARIES = ("torch", "transformers", "tokenizers", "adapters")
PARTITION, FUSION, EVALUATE = "mop-partition", "mop-finetune", "mop-evaluate"


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``MopStrategy.validate`` resolved for its stages: the KG and the adapters config (a dict)."""

    source: SourceRef
    adapter: dict


_COUNTS: dict[tuple, tuple[int, int]] = {}


def count_graph(ref: SourceRef, env, cap: int | None) -> tuple[int, int]:
    """(entities, triples) of a source reference's KG under ``cap`` - what the partition stage will see. Streamed
    (only the entity vocabulary is held); remembered per source fingerprint for the process (``--repeats``)."""
    from kinject.plugins.knowledge.kg.intern import Vocab, intern_triples

    key = (ref.name, ref.fingerprint, cap)
    if key not in _COUNTS:
        vocab = Vocab()
        source_env = dataclasses.replace(env, data_dir=Path(ref.data_dir), limit=None)
        rows = sum(len(chunk[0]) for chunk in intern_triples(ref.build().iter_triples(source_env), vocab, cap=cap))
        _COUNTS[key] = (len(vocab.entities), rows)
    return _COUNTS[key]


def knowledge_stages(run, cfg: MopConfig, resolved: Resolved) -> list[Stage]:
    """``mop-partition`` and one spread ``mop-adapter-<i>`` per part. They read the model's weights and tokenizer
    only: the task's pooling and max length (and the run seed) would re-key, and retrain, identical adapters."""
    model = run.model_ref().model_copy(update={"pooling": "cls", "max_length": cfg.kg_max_length})
    kg = KGSettings(source=resolved.source, max_length=cfg.kg_max_length, max_triples=cfg.kg_max_triples)
    partition = Stage(name=PARTITION, body=partition_body, artifacts=("partition.json",), config=PartitionConfig(
        model=model, kg=kg, partitions=cfg.partitions, seed=cfg.kg_seed, shuffle=cfg.shuffle,
        cross_part=cfg.cross_part))
    training = adapter_training(run, cfg)
    return [partition, *(Stage(name=f"mop-adapter-{i}", body=adapter_body, inputs=(PARTITION,), libraries=LIBRARIES,
                               spread=True, config=PartAdapterConfig(
                                   model=model, kg=kg, partition_stage=PARTITION, part=i, adapter=resolved.adapter,
                                   training=training, seed=cfg.kg_seed, heldout_fraction=cfg.heldout_fraction,
                                   bidirectional=cfg.bidirectional, entity_head=cfg.entity_head))
                         for i in range(cfg.partitions))]


def adapter_training(run, cfg: MopConfig) -> TrainingSpec:
    """Partition-adapter optimisation (reference: AdamW, weight decay 0.01, warm-up 0.1); the run's training
    settings are for the task, so they do not reach (or key) the knowledge side, except how often to log
    and checkpoint."""
    task = run.spec.training
    return TrainingSpec(epochs=cfg.adapter_epochs, max_steps=cfg.adapter_max_steps,
                        learning_rate=cfg.adapter_learning_rate, batch_size=cfg.adapter_batch_size,
                        weight_decay=0.01, warmup_ratio=0.1, group_by_length=True, save_steps=task.save_steps,
                        logging_steps=task.logging_steps, bf16=task.bf16, selection="last")


def fusion_stages(run, cfg: MopConfig, adapters: list[str]) -> list[Stage]:
    """``mop-finetune`` (the kernel's fine-tune body, :class:`FusionConfig`) and ``mop-evaluate`` (the kernel's
    evaluate body loading the fused model, :class:`FusedEvaluateConfig`)."""
    mixture = {"mixture": cfg.mixture, "tau": cfg.tau, "top_k": cfg.top_k, "loss_coef": cfg.moe_loss_coef}
    finetune = finetune_stage(run, name=FUSION)
    config = FusionConfig(**dict(finetune.config), adapters=adapters, mixture=mixture, joint=cfg.finetune == "joint")
    evaluate = evaluate_stage(run, FUSION, name=EVALUATE)
    return [dataclasses.replace(finetune, config=config, inputs=tuple(adapters), libraries=LIBRARIES),
            dataclasses.replace(evaluate, config=FusedEvaluateConfig(**dict(evaluate.config)), libraries=LIBRARIES)]


def analysis_stage(run, cfg: MopConfig, adapters: list[str], evaluate: Stage) -> Stage:
    """``mop-analysis``: the adapters' accuracy per part and the mixture weights on the test split (else the last
    evaluation split)."""
    splits = evaluate.config.splits or list(run.task.eval_splits)
    return Stage(name="mop-analysis", body=analysis_body, inputs=(*adapters, FUSION), libraries=LIBRARIES,
                 artifacts=("partition-adapters.json", "partition-adapters.png", "mixture.json", "mixture.png"),
                 config=AnalysisConfig(task=run.task_ref(), model_stage=FUSION, adapters=adapters,
                                       split="test" if "test" in splits else splits[-1],
                                       examples=cfg.mixture_examples, max_length=run.spec.model.max_length,
                                       attn_implementation=run.spec.model.attn_implementation,
                                       batch_size=run.spec.training.eval_batch_size))
