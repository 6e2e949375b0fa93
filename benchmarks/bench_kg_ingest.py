"""Benchmark: KG ingest (read + filter + tokenize + cache) throughput and peak RSS, cache reload speed.

Writes a synthetic triples file with biomedical-length names (300k entities, 50 relations), then builds
KG training data from its first N rows in a fresh child process per size (so peak RSS is per build):

    .venv/bin/python -m benchmarks.bench_kg_ingest --rows 1000000 4000000 --tasks entity --num-proc 2

Each child prints one JSON line: rows, seconds, triples/s, peak RSS (MiB), reload figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WORDS = ("acute chronic hereditary familial congenital juvenile primary secondary idiopathic malignant benign "
         "neoplasm carcinoma syndrome deficiency disorder disease infection inflammation fibrosis stenosis "
         "hypertrophy dysplasia atrophy of the left right lower upper renal hepatic cardiac pulmonary cerebral "
         "spinal retinal cortical medullary lymphocytic myeloid epithelial mesenchymal neuronal vascular arterial "
         "venous protein receptor kinase factor gene type alpha beta gamma 1 2 3 4 5 6 7 8 9 10 11 12 "
         "mitochondrial lysosomal peroxisomal metabolic autoimmune degenerative progressive").split()


def write_synthetic(path: Path, rows: int, entities: int = 300_000, relations: int = 50, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    lengths = rng.integers(2, 9, entities)  # 2-8 words, like UMLS preferred names
    picks = rng.integers(0, len(words), (entities, 8))
    names = [" ".join(words[picks[i, :lengths[i]]]) + f" {i}" for i in range(entities)]
    rels = [f"has {words[i % len(words)]} {words[(3 * i) % len(words)]}" for i in range(relations)]
    rel_p = 1 / np.arange(1, relations + 1)
    rel_p /= rel_p.sum()
    with open(path, "w", encoding="utf-8") as out:
        for lo in range(0, rows, 500_000):
            n = min(500_000, rows - lo)
            h = rng.integers(0, entities, n)
            t = rng.integers(0, entities, n)
            r = rng.choice(relations, n, p=rel_p)
            out.write("".join(f"{names[a]}\t{rels[b]}\t{names[c]}\n" for a, b, c in zip(h, r, t)))


def peak_rss_mib() -> float:
    """This process image's peak RSS (VmHWM, Linux). Not ru_maxrss: that keeps the peak of the parent that
    forked this child (here: the process that wrote the synthetic file) across exec."""
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM")).split()[1]) / 1024


def child(args) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from kinject.interfaces import Environment
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data, lengths_of, load_kg_data
    from kinject.training import length_grouped_batches, useful_token_fraction
    from kinject.api import resolve_model
    from kinject.api import load_tokenizer
    from kinject.knowledge.sources.triples import TriplesSource

    env = Environment(data_dir=Path(args.cache), cache_dir=Path(args.cache))
    tokenizer = load_tokenizer(resolve_model(args.model, env.cache_dir))
    source = TriplesSource(path=args.file, max_triples=args.child_rows)
    config = KGDataConfig(tasks=args.tasks.split(","), num_proc=args.num_proc)
    start = time.perf_counter()
    data = build_kg_data(source, env, tokenizer, config)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    first = getattr(data, config.tasks[0])
    start = time.perf_counter()
    reopened = load_kg_data(data.path)
    open_s = time.perf_counter() - start
    ds = getattr(reopened, config.tasks[0])
    start = time.perf_counter()
    scanned = sum(batch.num_rows for batch in ds.with_format("arrow").iter(batch_size=100_000))
    scan_s = time.perf_counter() - start
    idx = np.random.default_rng(0).integers(0, len(ds), 20_000)
    start = time.perf_counter()
    for lo in range(0, len(idx), 1000):
        ds[idx[lo:lo + 1000].tolist()]
    rand_s = time.perf_counter() - start
    lengths = lengths_of(first)
    batches = length_grouped_batches(lengths, 32, seed=0)
    print(json.dumps({"rows": data.stats["triples"], "sequences": len(first), "tasks": config.tasks,
                      "entities": data.stats["entities"], "seconds": round(seconds, 1),
                      "triples_per_s": round(data.stats["triples"] / seconds),
                      "peak_rss_mib": round(peak), "reload_open_s": round(open_s, 3),
                      "reload_scan_rows_per_s": round(scanned / scan_s),
                      "reload_random_rows_per_s": round(len(idx) / rand_s),
                      "useful_token_fraction_bs32": round(useful_token_fraction(lengths, batches), 4),
                      "cache_mib": round(sum(p.stat().st_size for p in data.path.iterdir()) / 2**20)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--tasks", default="entity")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--child-rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rows:
        child(args)
        return
    work = Path(tempfile.mkdtemp(prefix="kinject-bench-kg-"))
    try:
        path = work / "synthetic.tsv"
        start = time.perf_counter()
        write_synthetic(path, max(args.rows))
        print(f"# wrote {max(args.rows)} rows ({path.stat().st_size / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        for rows in args.rows:
            cache = work / f"cache-{rows}"
            subprocess.run([sys.executable, "-m", "benchmarks.bench_kg_ingest", "--child-rows", str(rows),
                            "--file", str(path), "--cache", str(cache), "--tasks", args.tasks, "--model", args.model,
                            "--num-proc", str(args.num_proc)], check=True)
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
