"""MoP's declared stages: configs (what each key holds) and module-level bodies.

``mop-partition`` (METIS over the KG's entity graph) -> ``mop-adapter-<i>`` (one per part; spread over the
processes of a torchrun launch) -> ``mop-finetune`` (adapters + fusion + task head) -> ``mop-evaluate`` ->
``mop-analysis``. The knowledge side (partition, adapters) holds no task and no run seed, so every task and seed
reuses the same cached adapters.
"""

from __future__ import annotations

import json
import logging

import numpy as np

from kinject.distributed import is_main_process
from kinject.fingerprint import NOT_KEYED
from kinject.interfaces import StageContext
from kinject.refs import ModelRef, SourceRef, TaskRef
from kinject.spec import TrainingSpec
from kinject.stages import EvaluateConfig, StageConfig, plain

from pydantic import Field

log = logging.getLogger("kinject")

PARTITION = "mop-partition"


class KGSettings(StageConfig):
    """The knowledge graph and how its training rows are built (kinject.kg "tail" rows)."""

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


def kg_data(kg: KGSettings, model: ModelRef, ctx: StageContext):
    from kinject.kg.data import KGDataConfig, build_kg_data

    return build_kg_data(kg.source.build(), kg.source.environment(ctx), model.load_tokenizer(),
                         KGDataConfig(tasks=["tail"], max_length=kg.max_length, max_triples=kg.max_triples))


def _columns(data) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(np.asarray(data.triples.data.column(c).to_numpy(), dtype=np.int64)
                 for c in ("head", "relation", "tail"))


# -- 1. partition ------------------------------------------------------------------------------------ #
def partition_body(cfg: PartitionConfig, ctx: StageContext) -> None:
    import torch
    from safetensors.torch import save_file

    from kinject.kg.partition import EntityGraph, metis_parts, partition_report, shuffle_parts

    from .knowledge import assign_triples

    if not is_main_process():  # one process partitions; the others wait for it at the stage barrier
        return
    data = kg_data(cfg.kg, cfg.model, ctx)
    head, relation, tail = _columns(data)
    graph = EntityGraph(data.entities, data.relations, head, relation, tail)
    parts = metis_parts(graph, cfg.partitions, cfg.seed)
    if cfg.shuffle > 0:
        parts = shuffle_parts(parts, cfg.shuffle, cfg.seed)
    report = partition_report(graph, parts, cfg.partitions, cfg.seed)
    triple_part = assign_triples(parts, head, tail, cfg.cross_part)
    assigned = np.bincount(triple_part[triple_part >= 0], minlength=cfg.partitions)
    report.update(shuffle=cfg.shuffle, seed=cfg.seed, cross_part=cfg.cross_part,
                  triples_dropped=int((triple_part < 0).sum()), triples_assigned_per_part=assigned.tolist(),
                  kg=data.stats, kg_data=data.path.name)
    empty = np.flatnonzero(assigned == 0).tolist()
    if empty:
        log.warning("mop: partitions %s hold no triples; their adapters stay untrained", empty)
    save_file({"parts": torch.from_numpy(parts.astype(np.int32)), "triple_part": torch.from_numpy(triple_part)},
              str(ctx.out / "partition.safetensors"))
    (ctx.out / "partition.json").write_text(json.dumps(plain(report), indent=1))
    log.info("mop partition: %d parts, edge cut %.3f of edges (%.3fx random), %d of %d triples kept",
             cfg.partitions, report["edge_cut_fraction"], report["cut_vs_random"], int(assigned.sum()),
             report["triples"])


# -- 2. one adapter per part ------------------------------------------------------------------------ #
def adapter_body(cfg: PartAdapterConfig, ctx: StageContext) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import set_seed

    from kinject.kg.batching import KGCollator
    from kinject.training import train

    from .fusion import adapter_names
    from .knowledge import (EntityPredictor, adapter_encoder, base_digest, head_features, part_classes,
                            ranking_accuracy, split_heldout, tail_features)

    folder = ctx.inputs[PARTITION]
    data = kg_data(cfg.kg, cfg.model, ctx)
    if json.loads((folder / "partition.json").read_text())["kg_data"] != data.path.name:
        raise RuntimeError(f"{ctx.name}: the KG rows differ from those the partition was computed on")
    arrays = load_file(str(folder / "partition.safetensors"))
    parts, triple_part = arrays["parts"].numpy(), arrays["triple_part"].numpy()
    head, _, tail = _columns(data)
    rows = np.flatnonzero(triple_part == cfg.part)
    classes = part_classes(parts, cfg.part, head, tail, rows, cfg.bidirectional)
    train_rows, heldout_rows = split_heldout(rows, cfg.heldout_fraction, cfg.seed + cfg.part)
    tokenizer = cfg.model.load_tokenizer()

    def features(which: np.ndarray) -> list[dict]:
        out = tail_features(data, which, classes)
        if cfg.bidirectional:
            out += head_features(data, which, classes, tokenizer, cfg.kg.max_length)
        return out

    train_features, heldout_features = features(train_rows), features(heldout_rows)
    name = adapter_names(cfg.part + 1)[-1]
    set_seed(cfg.seed + cfg.part)  # adapter and entity-head initialisation
    encoder = adapter_encoder(cfg.model.load_encoder(), name, cfg.adapter)
    model = EntityPredictor(encoder, len(classes))
    before = base_digest(encoder)
    collator = KGCollator(tokenizer)
    stats: dict = {}
    if train_features:
        stats = train(model, train_features, collator, cfg.training, ctx.work, cfg.seed + cfg.part, stage=ctx.name,
                      resume=ctx.resume)
    else:
        log.warning("%s: partition %d has no training triples; its adapter stays untrained", ctx.name, cfg.part)
    after = base_digest(encoder)
    if after != before:
        raise RuntimeError(f"{ctx.name}: adapter training changed base-model weights")
    heldout = ranking_accuracy(model, heldout_features, collator, cfg.eval_batch_size)
    encoder.save_adapter(str(ctx.out / "adapter"), name, use_safetensors=True)
    save_file({"weight": model.head.weight.detach().contiguous(), "bias": model.head.bias.detach().contiguous(),
               "classes": torch.from_numpy(classes)}, str(ctx.out / "entity_head.safetensors"))
    summary = {"part": cfg.part, "adapter": name, "entities": int((parts == cfg.part).sum()),
               "classes": int(len(classes)), "triples": int(len(rows)), "train_rows": len(train_features),
               "heldout_rows": len(heldout_features), "heldout": heldout,
               "train_loss": stats.get("train_loss"), "useful_token_fraction": stats.get("useful_token_fraction"),
               "train_seconds": stats.get("train_runtime"), "train": stats,
               "base_sha256": after, "base_unchanged": after == before}
    (ctx.out / "adapter.json").write_text(json.dumps(plain(summary), indent=1))
    log.info("%s: %d classes, %d training rows, held-out accuracy@1 %.3f", ctx.name, len(classes),
             len(train_features), heldout.get("accuracy@1", float("nan")))


# -- 3. fusion fine-tuning on the task ------------------------------------------------------------------- #
def fusion_body(cfg: FusionConfig, ctx: StageContext) -> None:
    import torch

    from kinject.stages import build_task_model
    from kinject.training import dev_scorer, train

    from .fusion import attach_partition_adapters, mixture_trainer_class, save_fused_model

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    tokenizer = cfg.model.load_tokenizer()
    model = build_task_model(cfg.model.path, task.head(env), cfg.model.attn_implementation, cfg.seed,
                             cfg.model.revision, cfg.model.layers)
    torch.manual_seed(cfg.seed)  # fusion-layer initialisation
    fuse = attach_partition_adapters(model, [ctx.inputs[name] / "adapter" for name in cfg.adapters], cfg.mixture,
                                     cfg.joint)
    features = task.featurize(tokenizer, task.examples(task.train_split, env), cfg.model.max_length, env)
    scorer = dev_scorer(task, env, tokenizer, cfg.model.max_length, cfg.training) if cfg.training.eval_steps else None
    stats = train(model, features, task.collator(tokenizer), cfg.training, ctx.work, cfg.seed, stage=ctx.name,
                  resume=ctx.resume, trainer_cls=mixture_trainer_class(), scorer=scorer)
    stats["trainable_parameters"] = float(sum(p.numel() for p in model.parameters() if p.requires_grad))
    if is_main_process():
        save_fused_model(model, tokenizer, ctx.out / "model", fuse, cfg.mixture)
        (ctx.out / "train.json").write_text(json.dumps(stats, indent=2))


# -- 4. evaluation (the fused model loads through adapters, not plain from_pretrained) ------------------- #
def evaluate_body(cfg: EvaluateConfig, ctx: StageContext) -> None:
    from kinject.models import load_tokenizer
    from kinject.stages import write_predictions

    from .fusion import load_fused_model
    from .scoring import score_splits

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    model_dir = ctx.inputs[cfg.model_stage] / "model"
    model = load_fused_model(model_dir, task.head(env).kind, cfg.attn_implementation)
    metrics, records = score_splits(model, load_tokenizer(str(model_dir)), task, env, cfg.batch_size, cfg.max_length,
                                    ctx.work, tuple(cfg.splits) if cfg.splits else None)
    train_stats = ctx.inputs[cfg.model_stage] / "train.json"
    if train_stats.exists():
        metrics["train"] = json.loads(train_stats.read_text())
    ctx.hooks().kinject_metrics_logged(stage=ctx.name, metrics={f"{s}/{k}": v for s, m in metrics.items()
                                                                for k, v in m.items() if s != "train"}, step=None)
    if is_main_process():
        (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        write_predictions(records, ctx.out / "predictions")


# -- 5. analysis ----------------------------------------------------------------------------------------- #
def analysis_body(cfg: AnalysisConfig, ctx: StageContext) -> None:
    from .analysis import adapter_summary, mixture_summary, plot_adapters, plot_mixture, write_json
    from .scoring import mixture_weights

    if not is_main_process():
        return
    summary = adapter_summary([json.loads((ctx.inputs[name] / "adapter.json").read_text()) for name in cfg.adapters])
    write_json(ctx.out / "partition-adapters.json", summary)
    plot_adapters(summary, ctx.out / "partition-adapters.png")
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    layer, weights, ids = mixture_weights(ctx.inputs[cfg.model_stage] / "model", task, env, cfg.split, cfg.examples,
                                          cfg.max_length, cfg.batch_size, cfg.attn_implementation)
    mixture = mixture_summary(weights, ids, layer, cfg.split)
    write_json(ctx.out / "mixture.json", mixture)
    plot_mixture(mixture, ctx.out / "mixture.png")
