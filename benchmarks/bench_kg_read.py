"""Reading a knowledge graph once parsed (``kinject.knowledge.sources.parsed``): one pass over a triples source by
parsing its files, by parsing them and keeping the parse (the first pass with a cache), and by reading the kept parse
back (every later pass: another stage, the knowledge probe, a later run). The triples must be the same. CPU time of
this process (the machine is shared) and wall time; figures in docs/benchmarks.md.

Usage: .venv/bin/python -m benchmarks.bench_kg_read [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def sources():
    from kinject.knowledge.sources.hpo import HpoSource, default_source

    return {"the headline's graph (HPO, all edges, sampled to ~2,000 of 535k)": default_source(2000),
            "the probe's graph (HPO is-a, 23k)": HpoSource(include=["isa"])}


def one_pass(source, cache: Path | None) -> tuple[list, float, float]:
    from kinject.api import Environment

    env = Environment(data_dir=Path("."), cache_dir=cache or Path("."))
    start, start_cpu = time.perf_counter(), time.process_time()
    triples = list(source.iter_triples(env))
    return triples, time.perf_counter() - start, time.process_time() - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from benchmarks.machine_class import label

    print(f"machine: {label()}; load average {os.getloadavg()[0]:.1f}\n")
    print("| source | triples | parse: CPU s (wall) | parse + keep | kept parse read back | parse / kept | "
          "same triples |")
    print("|---|---|---|---|---|---|---|")
    for name, source in sources().items():
        found: dict[str, list[tuple[float, float]]] = {"parse": [], "keep": [], "kept": []}
        same = True
        for _ in range(args.rounds):
            cache = Path(tempfile.mkdtemp(prefix="bench-kg-read-"))
            try:
                parsed, *t = one_pass(source, None)
                found["parse"].append(tuple(t))
                kept, *t = one_pass(source, cache)
                found["keep"].append(tuple(t))
                again, *t = one_pass(source, cache)
                found["kept"].append(tuple(t))
                same = same and parsed == kept == again
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        cpu = {k: statistics.median(c for _, c in v) for k, v in found.items()}
        wall = {k: statistics.median(w for w, _ in v) for k, v in found.items()}
        cells = " | ".join(f"{cpu[k]:.2f} ({wall[k]:.2f})" for k in ("parse", "keep", "kept"))
        print(f"| {name} | {len(parsed):,} | {cells} | {cpu['parse'] / cpu['kept']:.1f}x | {same} |", flush=True)


if __name__ == "__main__":
    main()
