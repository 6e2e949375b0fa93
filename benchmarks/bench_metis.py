"""Benchmark: METIS partition of a synthetic entity graph (300k entities, 4M edges) vs a random partition.

Two graphs: 'communities' (each entity in one of 1000 latent groups, 90% of edges inside a group, as
real KGs cluster by topic) and 'uniform' (edges between uniformly random entities: nothing to find).

    .venv/bin/python -m benchmarks.bench_metis --entities 300000 --edges 4000000 -k 20
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kinject.knowledge.kg.partition import EntityGraph, metis_parts, partition_report


def synthetic(n: int, m: int, kind: str, seed: int = 0) -> EntityGraph:
    rng = np.random.default_rng(seed)
    head = rng.integers(0, n, m)
    if kind == "uniform":
        tail = rng.integers(0, n, m)
    else:
        groups = 1000
        group = rng.permutation(n) % groups  # entity -> latent group (ids shuffled: METIS must find them)
        members = np.argsort(group, kind="stable")
        starts = np.searchsorted(group[members], np.arange(groups))
        sizes = np.bincount(group, minlength=groups)
        g = group[head]
        tail = members[starts[g] + (rng.random(m) * sizes[g]).astype(np.int64)]
        outside = rng.random(m) >= 0.9
        tail[outside] = rng.integers(0, n, outside.sum())
    return EntityGraph([str(i) for i in range(n)], ["r"], head.astype(np.int32), np.zeros(m, np.int32),
                       tail.astype(np.int32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=300_000)
    parser.add_argument("--edges", type=int, default=4_000_000)
    parser.add_argument("-k", type=int, default=20)
    parser.add_argument("--kinds", nargs="+", default=["communities", "uniform"])
    args = parser.parse_args()
    for kind in args.kinds:
        graph = synthetic(args.entities, args.edges, kind)
        start = time.perf_counter()
        parts = metis_parts(graph, args.k)
        seconds = time.perf_counter() - start
        report = partition_report(graph, parts, args.k)
        print(json.dumps({"graph": kind, "entities": args.entities, "edges": report["edges"], "k": args.k,
                          "metis_s": round(seconds, 1), "edge_cut": report["edge_cut"],
                          "random_edge_cut": report["random_edge_cut"],
                          "cut_vs_random": round(report["cut_vs_random"], 3),
                          "imbalance": round(report["imbalance"], 3),
                          "triples_inside_fraction": round(report["triples_inside_fraction"], 3)}), flush=True)


if __name__ == "__main__":
    main()
