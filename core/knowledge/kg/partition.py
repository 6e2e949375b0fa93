"""KG statistics and METIS partitioning of the entity graph (MoP: one sub-graph per knowledge module)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from kinject.api import DataError, SpecError, Triple, atomic_directory
from kinject.knowledge.kg.intern import Vocab, intern_triples


@dataclass
class EntityGraph:
    """Triples interned to ids: heads, relations, tails (int32) and the vocabularies."""

    entities: list[str]
    relations: list[str]
    head: np.ndarray
    relation: np.ndarray
    tail: np.ndarray

    @classmethod
    def from_triples(cls, triples: Iterable[Triple]) -> "EntityGraph":
        vocab = Vocab()
        chunks = list(intern_triples(triples, vocab))
        h, r, t = (np.concatenate([np.frombuffer(c[i], np.int32) for c in chunks]) if chunks
                   else np.zeros(0, np.int32) for i in range(3))
        return cls(list(vocab.entities), list(vocab.relations), h, r, t)

    def undirected_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Unique undirected edges (u < v), self-loops dropped."""
        u = np.minimum(self.head, self.tail).astype(np.int64)
        v = np.maximum(self.head, self.tail).astype(np.int64)
        keep = u != v
        key = np.unique(u[keep] * len(self.entities) + v[keep])
        return key // len(self.entities), key % len(self.entities)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """METIS adjacency (xadj, adjncy) of the undirected simple graph."""
        u, v = self.undirected_edges()
        src = np.concatenate([u, v])
        dst = np.concatenate([v, u])
        order = np.argsort(src, kind="stable")
        counts = np.bincount(src, minlength=len(self.entities))
        xadj = np.zeros(len(self.entities) + 1, np.int64)
        np.cumsum(counts, out=xadj[1:])
        return xadj, dst[order]


def graph_stats(graph: EntityGraph, top: int = 20) -> dict:
    """Entities, relations, triples, per-relation counts, degree distribution of an interned graph."""
    n = len(graph.entities)
    degree = np.bincount(graph.head, minlength=n) + np.bincount(graph.tail, minlength=n)
    counts = np.bincount(graph.relation, minlength=len(graph.relations))
    return _summary(graph.relations, counts, degree, int(len(graph.head)), top)


def stream_stats(triples: Iterable[Triple], top: int = 20, chunk: int = 65_536) -> dict:
    """:func:`graph_stats` of a triple stream without holding its edges: memory grows with the number of
    entities and relations, not of triples."""
    vocab = Vocab()
    degree = np.zeros(0, np.int64)
    counts = np.zeros(0, np.int64)
    rows = 0
    for h, r, t, _ in intern_triples(triples, vocab, chunk=chunk):
        n = len(vocab.entities)
        degree = np.pad(degree, (0, n - len(degree)))
        degree += np.bincount(np.frombuffer(h, np.int32), minlength=n)
        degree += np.bincount(np.frombuffer(t, np.int32), minlength=n)
        counts = np.pad(counts, (0, len(vocab.relations) - len(counts)))
        counts += np.bincount(np.frombuffer(r, np.int32), minlength=len(counts))
        rows += len(h)
    return _summary(list(vocab.relations), counts, degree, rows, top)


def _summary(relations: list[str], counts: np.ndarray, degree: np.ndarray, triples: int, top: int) -> dict:
    n = len(degree)
    order = sorted(range(len(relations)), key=lambda i: -int(counts[i]))[:top]  # stable: first seen first
    qs = [0.5, 0.9, 0.99]
    return {
        "entities": n, "relations": len(relations), "triples": triples,
        "relation_counts": {relations[i]: int(counts[i]) for i in order},
        "degree": {"min": int(degree.min()) if n else 0, "mean": float(degree.mean()) if n else 0.0,
                   **{f"p{int(q * 100)}": float(np.quantile(degree, q)) if n else 0.0 for q in qs},
                   "max": int(degree.max()) if n else 0},
        "degree_histogram": _log_histogram(degree),
    }


def _log_histogram(degree: np.ndarray) -> dict[str, int]:
    out: dict[str, int] = {}
    lo = 1
    while len(degree) and lo <= degree.max():
        hi = lo * 2
        out[f"{lo}-{hi - 1}"] = int(((degree >= lo) & (degree < hi)).sum())
        lo = hi
    return out


def edge_cut(u: np.ndarray, v: np.ndarray, parts: np.ndarray) -> int:
    return int((parts[u] != parts[v]).sum())


def metis_parts(graph: EntityGraph, k: int, seed: int = 0, recursive: bool | None = None) -> np.ndarray:
    """Balanced METIS partition of the entity graph into k parts (pymetis): ``recursive`` True is recursive
    bisection, False k-way (METIS_PartGraphKway), None pymetis's own choice (recursive for k <= 8)."""
    import pymetis

    if k < 2:
        raise SpecError(f"-k: need at least 2 parts, got {k}")
    if k > len(graph.entities):
        raise SpecError(f"-k: {k} parts but only {len(graph.entities)} entities")
    import logging
    import time

    xadj, adjncy = graph.csr()
    options = pymetis.Options(seed=seed)
    started = time.perf_counter()
    logging.getLogger("kinject").info("METIS: partitioning %d entities (%d edges) into %d parts ...",
                                      len(graph.entities), len(adjncy) // 2, k)
    _, parts = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(xadj, adjncy), options=options,
                                  recursive=recursive)
    logging.getLogger("kinject").info("METIS: done in %.1f s", time.perf_counter() - started)
    return np.asarray(parts, dtype=np.int32)


def shuffle_parts(parts: np.ndarray, fraction: float, seed: int = 0) -> np.ndarray:
    """Move a random ``fraction`` of entities, each to a random other part (MoP Table 3 control).
    Moves are swaps between the chosen entities, so part sizes stay the same."""
    if not 0 <= fraction <= 1:
        raise SpecError(f"--shuffle: must be in [0, 1], got {fraction}")
    rng = np.random.default_rng(seed)
    out = parts.copy()
    chosen = rng.choice(len(parts), size=int(round(fraction * len(parts))), replace=False)
    out[chosen] = parts[rng.permutation(chosen)]
    return out


def random_parts(parts: np.ndarray, seed: int = 0) -> np.ndarray:
    """A random assignment with exactly the same part sizes."""
    return np.random.default_rng(seed).permutation(parts)


def partition_report(graph: EntityGraph, parts: np.ndarray, k: int, seed: int = 0) -> dict:
    u, v = graph.undirected_edges()
    inside = parts[graph.head] == parts[graph.tail]
    cut = edge_cut(u, v, parts)
    rand_cut = edge_cut(u, v, random_parts(parts, seed))
    sizes = np.bincount(parts, minlength=k)
    kept = np.bincount(parts[graph.head][inside], minlength=k)
    return {
        "k": k, "entities": len(graph.entities), "triples": int(len(graph.head)), "edges": int(len(u)),
        "edge_cut": cut, "edge_cut_fraction": cut / len(u) if len(u) else 0.0,
        "random_edge_cut": rand_cut, "cut_vs_random": cut / rand_cut if rand_cut else float("nan"),
        "part_sizes": sizes.tolist(), "imbalance": float(sizes.max() / sizes.mean()) if k else 0.0,
        "triples_inside": int(inside.sum()), "triples_inside_fraction": float(inside.mean()) if len(inside) else 0.0,
        "triples_per_part": kept.tolist(),
    }


def write_partition(graph: EntityGraph, parts: np.ndarray, report: dict, output: Path) -> None:
    """part-<i>.tsv (head, relation, tail of triples inside part i), entities.tsv, report.json; atomic."""
    output = Path(output)
    if output.exists() and any(output.iterdir()):
        raise DataError("output folder exists and is not empty", output)
    with atomic_directory(output, replace=True) as tmp:  # replaces at most an empty folder
        handles = [open(tmp / f"part-{i}.tsv", "w", encoding="utf-8") for i in range(report["k"])]
        ph, pt = parts[graph.head], parts[graph.tail]
        for i in np.flatnonzero(ph == pt):
            handles[ph[i]].write(f"{graph.entities[graph.head[i]]}\t{graph.relations[graph.relation[i]]}\t"
                                 f"{graph.entities[graph.tail[i]]}\n")
        for handle in handles:
            handle.close()
        with open(tmp / "entities.tsv", "w", encoding="utf-8") as handle:
            for name, part in zip(graph.entities, parts.tolist()):
                handle.write(f"{name}\t{part}\n")
        (tmp / "report.json").write_text(json.dumps(report, indent=1))
