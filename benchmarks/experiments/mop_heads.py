"""Do MoP's partition adapters learn facts? Part 0 of a K=4 partition, trained with the linear entity head (the
reference code) or the name-scoring head (kinject's default), against the tail prior (always answering the
part's most frequent training tails) and an untrained adapter, on two graphs:

* ``hpo-20k``: a seeded 20,000-triple sample of the whole HPO graph (mostly disease -> phenotype and gene ->
  phenotype: ~20-50 tails per head, so one triple's tail is one of many right answers);
* ``hpo-isa``: the HPO is-a hierarchy (23,392 triples; a term has 1.2 parents on average).

Held-out rows test generalisation to unseen triples; the training-row probe (2,000 rows) tests what the adapter
stored. Only the knowledge stages run (``mop-partition``, ``mop-adapter-0``), cached like any run's.

Usage (one core, ~15 min cold):
  HF_HUB_OFFLINE=1 KINJECT_CACHE_DIR=... python -m benchmarks.experiments.mop_heads [--csv heads.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

GRAPHS = {"hpo-20k": ({"kg_max_triples": 20000}, []),
          "hpo-isa": ({}, [{"name": "hpo", "include": ["isa"]}])}
CELLS = [("hpo-20k", "linear", 2), ("hpo-20k", "names", 0), ("hpo-20k", "names", 2), ("hpo-20k", "names", 10),
         ("hpo-isa", "linear", 3), ("hpo-isa", "names", 0), ("hpo-isa", "names", 3)]
COLUMNS = ["graph", "head", "epochs", "classes", "train rows", "held-out acc@1", "held-out acc@10", "prior acc@1",
           "prior acc@10", "train-probe acc@1", "train-probe acc@10", "probe prior acc@10", "distinct top-1",
           "seconds"]


def adapter_stats(graph: str, head: str, epochs: float, cache_dir: str, data_dir: str) -> dict:
    """Run (or reuse) the partition and part 0's adapter stage; its adapter.json."""
    from kinject.keys import plan
    from kinject.stage_runner import run_stage
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    strategy, sources = GRAPHS[graph]
    budget = {"adapter_epochs": epochs} if epochs else {"adapter_max_steps": 0}
    spec = {"model": {"name": "minilm"}, "task": {"name": "ncbi-disease"}, "sources": sources,
            "strategy": {"name": "mop", "partitions": 4, "baseline": False, "entity_head": head,
                         "adapter_learning_rate": 1e-3, "adapter_batch_size": 64, **budget, **strategy},
            "cache_dir": cache_dir, "data_dir": data_dir}
    run = prepare(build_spec(spec))
    dirs: dict = {}
    for planned in plan(run):
        if planned.stage.name in ("mop-partition", "mop-adapter-0"):
            run_stage(run, planned, dirs)
            dirs[planned.stage.name] = planned.folder
    return json.loads((dirs["mop-adapter-0"] / "adapter.json").read_text())


def row(graph: str, head: str, epochs: float, stats: dict) -> list:
    held, prior, probe = stats["heldout"], stats["heldout_prior"], stats["train_probe"]
    return [graph, head, epochs, stats["classes"], stats["train_rows"], *(f"{v:.3f}" for v in (
        held["accuracy@1"], held["accuracy@10"], prior["accuracy@1"], prior["accuracy@10"], probe["accuracy@1"],
        probe["accuracy@10"], stats["train_probe_prior"]["accuracy@10"])), held["distinct_top1"],
        round(stats["train_seconds"] or 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="also write the table here (docs/results.yaml renders it)")
    parser.add_argument("--cache-dir", default=os.environ.get("KINJECT_CACHE_DIR", ".kinject-cache"))
    parser.add_argument("--data-dir", default=os.environ.get("KINJECT_DATA_DIR", "../shared/data"))
    args = parser.parse_args()
    rows = []
    for graph, head, epochs in CELLS:
        start = time.time()
        rows.append(row(graph, head, epochs, adapter_stats(graph, head, epochs, args.cache_dir, args.data_dir)))
        print(" | ".join(map(str, rows[-1])), f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
    for values in rows:
        print("| " + " | ".join(map(str, values)) + " |")
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            csv.writer(handle).writerows([COLUMNS, *rows])


if __name__ == "__main__":
    main()
