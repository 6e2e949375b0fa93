"""MoP step 1: the knowledge graph's training rows (the knowledge library's build_kg_data "tail" rows, Arrow
memory-mapped), their entity graph split into K parts by METIS (optionally shuffled: the paper's control), and which
triple trains in which part; the ``mop-partition`` body and its config."""

from __future__ import annotations

import json
import logging
from typing import Literal

import numpy as np
import torch

from kinject.api import ModelRef, SourceRef, StageConfig, StageContext, is_main_process
from kinject.training import plain

log = logging.getLogger("kinject")

PART_DROPPED = -1  # triple_part value of a cross-part triple that no part keeps


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
    metis: Literal["kway", "recursive"] = "kway"  # METIS's k-way partitioning (the reference's), or recursive bisection


def kg_data(kg: KGSettings, model: ModelRef, ctx: StageContext):
    """The KG's "tail" rows built with the model's tokenizer (one cache entry: the same entity ids everywhere)."""
    from kinject.knowledge import KGDataConfig, build_kg_data

    return build_kg_data(kg.source.build(), kg.source.environment(ctx), model.load_tokenizer(),
                         KGDataConfig(tasks=["tail"], max_length=kg.max_length, max_triples=kg.max_triples))


def kg_columns(data) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, relation, tail) entity / relation ids of every triple."""
    return tuple(np.asarray(data.triples.data.column(c).to_numpy(), dtype=np.int64)
                 for c in ("head", "relation", "tail"))


def assign_triples(parts: np.ndarray, head: np.ndarray, tail: np.ndarray, cross_part: str) -> np.ndarray:
    """The part each triple trains in: its parts' common part, else the head's (``cross_part='head'``) or
    :data:`PART_DROPPED`."""
    ph, pt = parts[head], parts[tail]
    return ph.astype(np.int32) if cross_part == "head" else np.where(ph == pt, ph, PART_DROPPED).astype(np.int32)


def partition_body(cfg: PartitionConfig, ctx: StageContext) -> None:
    from safetensors.torch import save_file

    from kinject.knowledge import EntityGraph, metis_parts, partition_report, shuffle_parts

    if not is_main_process():  # one process partitions; the others wait for it at the stage barrier
        return
    data = kg_data(cfg.kg, cfg.model, ctx)
    head, relation, tail = kg_columns(data)
    graph = EntityGraph(data.entities, data.relations, head, relation, tail)
    parts = metis_parts(graph, cfg.partitions, cfg.seed, recursive=cfg.metis == "recursive")
    if cfg.shuffle > 0:
        parts = shuffle_parts(parts, cfg.shuffle, cfg.seed)
    report = partition_report(graph, parts, cfg.partitions, cfg.seed)
    triple_part = assign_triples(parts, head, tail, cfg.cross_part)
    assigned = np.bincount(triple_part[triple_part >= 0], minlength=cfg.partitions)
    report.update(metis=cfg.metis, shuffle=cfg.shuffle, seed=cfg.seed, cross_part=cfg.cross_part,
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

