"""MoP speed figures (docs/benchmarks.md, docs/mop.md). Each sub-command measures its ratio within one run.

  step    adapter-training step / full fine-tuning step: the same entity-prediction model (linear head on [CLS])
          and the same batch of embedded-HPO tail rows, AdamW; interleaved repeats, medians. Target <= 0.6.
  fusion  downstream cost: a joint fine-tuning step with K adapters + fusion / a plain fine-tuning step.
  tokens  useful-token fraction of adapter-training batches (the trainer's length-bucketed sampler) over every
          part of a K-part METIS partition of the embedded HPO graph. Target >= 0.9.
  parts   the parts stage (K adapter stages) with 1 process vs `torchrun --nproc_per_node 2`, from the stages'
          own stage.json seconds (per process: the sum of its stages; the group: the slowest process). Target
          >= 1.7x.
  e2e     `kinject run mop` on the embedded HPO graph with K parts, end to end, with its wall time per stage.

Usage: .venv/bin/python -m benchmarks.bench_mop step|tokens|parts|e2e [options]  (--help per command)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CACHE = Path(os.environ.get("KINJECT_CACHE_DIR", Path(tempfile.gettempdir()) / "kinject-bench-cache"))


def hpo_rows(model: str, max_triples: int | None):
    """The embedded HPO graph's tail rows for ``model``'s tokenizer (cached Arrow)."""
    from kinject.interfaces import Environment
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data
    from kinject.api import resolve_model
    from kinject.api import load_tokenizer
    from kinject.knowledge.sources.hpo import default_source

    tokenizer = load_tokenizer(resolve_model(model, CACHE))
    data = build_kg_data(default_source(max_triples), Environment(Path("."), CACHE), tokenizer,
                         KGDataConfig(tasks=["tail"], max_length=64, max_triples=max_triples))
    return tokenizer, data


def step(args) -> dict:
    import torch
    from adapters import SeqBnConfig

    from kinject.knowledge.kg.batching import KGCollator
    from kinject.api import resolve_model
    from kinject.api import load_encoder
    from kinject.plugins.mop.entity_prediction import EntityPredictor
    from kinject.plugins.mop.part_adapters import adapter_encoder

    torch.manual_seed(0)
    tokenizer, data = hpo_rows(args.model, None)
    rows = data.tail.select(range(0, len(data.tail), max(1, len(data.tail) // args.batch))[: args.batch]).to_list()
    batch = KGCollator(tokenizer)([{**r, "labels": i % args.classes} for i, r in enumerate(rows)])
    path = resolve_model(args.model, CACHE)
    full = EntityPredictor(load_encoder(path), args.classes).train()
    adapted = EntityPredictor(adapter_encoder(load_encoder(path), "part-0",
                                              SeqBnConfig(reduction_factor=8).to_dict()), args.classes).train()
    runs = {}
    for name, model in (("full", full), ("adapter", adapted)):
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.01)

        def one(model=model, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            model(**batch).loss.backward()
            optimizer.step()

        runs[name] = (one, [], sum(p.numel() for p in model.parameters() if p.requires_grad))
        for _ in range(3):
            one()  # warm-up
    for _ in range(args.repeats):  # interleaved, so load changes hit both alike
        for one, times, _ in runs.values():
            start = time.perf_counter()
            one()
            times.append(time.perf_counter() - start)
    medians = {name: statistics.median(times) for name, (_, times, _) in runs.items()}
    return {"model": args.model, "batch": args.batch, "tokens": int(batch["attention_mask"].sum()),
            "classes": args.classes, "threads": torch.get_num_threads(), "repeats": args.repeats,
            "full_step_s": medians["full"], "adapter_step_s": medians["adapter"],
            "ratio": medians["adapter"] / medians["full"],
            "trainable": {name: n for name, (_, _, n) in runs.items()}}


def fusion(args) -> dict:
    """Downstream cost: a joint fine-tuning step of the task model with K adapters + softmax fusion vs the plain
    task model (token head, 16 x 48 tokens, AdamW), interleaved, medians."""
    import adapters
    import torch
    from adapters import SeqBnConfig

    from kinject.interfaces import Head
    from kinject.api import resolve_model
    from kinject.api import load_encoder
    from kinject.plugins.mop.fusion import attach_partition_adapters
    from kinject.training import build_task_model

    path = resolve_model(args.model, CACHE)
    folder = Path(tempfile.mkdtemp(prefix="bench-mop-adapters-"))
    encoder = load_encoder(path)
    adapters.init(encoder)
    for i in range(max(args.ks)):
        encoder.add_adapter(f"part-{i}", config=SeqBnConfig(reduction_factor=8))
        encoder.save_adapter(str(folder / f"part-{i}"), f"part-{i}", use_safetensors=True)
    torch.manual_seed(0)
    ids = torch.randint(1000, 20000, (16, 48))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 3, (16, 48))}
    setups = {"plain": build_task_model(path, Head("token", 3))}
    for k in args.ks:
        model = build_task_model(path, Head("token", 3))
        attach_partition_adapters(model, [folder / f"part-{i}" for i in range(k)],
                                  {"mixture": "softmax", "tau": 1.0, "top_k": 1, "loss_coef": 0.0}, joint=True)
        setups[f"K={k}"] = model
    runs = {}
    for name, model in setups.items():
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def one(model=model, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            model(**batch).loss.backward()
            optimizer.step()

        one()
        runs[name] = (one, [])
    for _ in range(args.repeats):
        for one, times in runs.values():
            start = time.perf_counter()
            one()
            times.append(time.perf_counter() - start)
    plain = statistics.median(runs["plain"][1])
    return {"model": args.model, "batch": "16 x 48 tokens", "threads": torch.get_num_threads(),
            "step_s": {name: statistics.median(times) for name, (_, times) in runs.items()},
            "vs_plain": {name: statistics.median(times) / plain for name, (_, times) in runs.items()}}


def tokens(args) -> dict:
    import numpy as np
    import torch

    from kinject.knowledge.kg.partition import EntityGraph, metis_parts
    from kinject.plugins.mop.partition import assign_triples
    from kinject.training.batching import LengthBucketSampler

    _, data = hpo_rows(args.model, args.max_triples)
    h, r, t = (np.asarray(data.triples.data.column(c).to_numpy()) for c in ("head", "relation", "tail"))
    parts = metis_parts(EntityGraph(data.entities, data.relations, h, r, t), args.k, seed=1)
    triple_part = assign_triples(parts, h, t, "drop")
    lengths = data.tail.data.column("length").to_numpy()
    useful = total = 0
    per_part = []
    torch.manual_seed(0)
    for part in range(args.k):
        rows = lengths[triple_part == part]
        order = list(LengthBucketSampler(rows.tolist(), args.batch))
        batches = [order[i:i + args.batch] for i in range(0, len(order), args.batch)]
        u = sum(int(rows[b].sum()) for b in batches)
        a = sum(int(rows[b].max()) * len(b) for b in batches)
        per_part.append(u / a if a else float("nan"))
        useful, total = useful + u, total + a
    return {"k": args.k, "batch": args.batch, "rows": int((triple_part >= 0).sum()), "useful_token_fraction":
            useful / total, "min_part": min(per_part), "max_part": max(per_part)}


def mop_args(args, output: Path, cache: Path) -> list[str]:
    out = ["run", "mop", "--task", args.task, "--model", args.model, "--limit", str(args.limit),
           "--set", f"strategy.partitions={args.k}", "--set", "strategy.baseline=false",
           "--set", f"strategy.analysis={str(args.analysis).lower()}",
           "--set", f"strategy.adapter_max_steps={args.steps}", "--set", f"strategy.adapter_batch_size={args.batch}",
           "--set", "training.epochs=1", "--cache-dir", str(cache), "-o", str(output)]
    if args.max_triples:
        out += ["--set", f"strategy.kg_max_triples={args.max_triples}"]
    if args.data_dir:
        out += ["--data-dir", args.data_dir]
    return out


def parts_seconds(run_dir: Path) -> dict:
    """Per-process sums of the adapter stages' own seconds (stage.json) and the group's wall (slowest process)."""
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    per_rank: dict[int, float] = {}
    for s in stages:
        if s["name"].startswith("mop-adapter-"):
            record = json.loads((Path(s["dir"]) / "stage.json").read_text())
            per_rank[record["rank"]] = per_rank.get(record["rank"], 0.0) + record["seconds"]
    return {"per_process": per_rank, "group_s": max(per_rank.values())}


def parts(args) -> dict:
    base = Path(tempfile.mkdtemp(prefix="bench-mop-"))
    env = dict(os.environ, KINJECT_PROGRESS="0")
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    launches = {"1 process": [sys.executable, "-m", "kinject"],
                "2 processes": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                "--master_port", "29561", "-m", "kinject"]}
    out = {"k": args.k, "steps_per_part": args.steps, "batch": args.batch, "threads": args.threads or "default"}
    for name, launch in launches.items():
        cache = base / f"cache-{name[0]}"
        start = time.perf_counter()
        subprocess.run([*launch, *mop_args(args, base / f"run-{name[0]}", cache)], check=True, env=env)
        out[name] = {"run_s": time.perf_counter() - start, **parts_seconds(base / f"run-{name[0]}")}
        out[name]["load_after"] = os.getloadavg()[0]
    out["speedup"] = out["1 process"]["group_s"] / out["2 processes"]["group_s"]
    return out


def e2e(args) -> dict:
    output = Path(tempfile.mkdtemp(prefix="bench-mop-e2e-")) / "run"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kinject", *mop_args(args, output, CACHE)], check=True,
                   env=dict(os.environ, KINJECT_PROGRESS="0"))
    wall = time.perf_counter() - start
    info = json.loads((output / "run.json").read_text())
    report = json.loads((output / "partition.json").read_text())
    adapters = [s for s in info["stages"] if s["name"].startswith("mop-adapter-")]
    return {"k": args.k, "steps_per_part": args.steps, "batch": args.batch, "wall_s": wall,
            "stages_s": {s["name"]: s["seconds"] for s in info["stages"] if not s["name"].startswith("mop-adapter-")},
            "adapters_s": sum(s["seconds"] for s in adapters), "cached": [s["name"] for s in info["stages"] if s["cached"]],
            "triples": report["triples"], "triples_kept": report["triples"] - report["triples_dropped"],
            "edge_cut_fraction": report["edge_cut_fraction"], "cut_vs_random": report["cut_vs_random"],
            "run_dir": str(output)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("step", "tokens", "fusion", "parts", "e2e"):
        p = sub.add_parser(name)
        p.add_argument("--model", default="minilm")
        p.add_argument("--batch", type=int, default=64)
        p.add_argument("--k", type=int, default=20)
        p.add_argument("--max-triples", type=int, default=None, help="KG sample (default: the whole HPO graph)")
        if name == "step":
            p.add_argument("--classes", type=int, default=1800, help="entities per part (K=20 on HPO: ~1,800)")
        if name in ("step", "fusion"):
            p.add_argument("--repeats", type=int, default=20)
        if name == "fusion":
            p.add_argument("--ks", type=int, nargs="+", default=[4, 8, 20])
        if name in ("parts", "e2e"):
            p.add_argument("--task", default="ncbi-disease")
            p.add_argument("--data-dir", default=os.environ.get("KINJECT_DATA_DIR"))
            p.add_argument("--limit", type=int, default=200, help="task examples per split (the task side is "
                           "not what is measured)")
            p.add_argument("--steps", type=int, default=40, help="optimiser steps per part")
            p.add_argument("--analysis", action="store_true")
            p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for every process")
    args = parser.parse_args()
    result = {"step": step, "tokens": tokens, "fusion": fusion, "parts": parts, "e2e": e2e}[args.command](args)
    result["load_average"] = os.getloadavg()
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
