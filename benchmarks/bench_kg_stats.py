"""Benchmark: peak RSS of `kinject kg stats` (streamed) against holding every edge (EntityGraph + graph_stats).

Writes a synthetic triples file (bench_kg_ingest's biomedical-length names; a fixed pool of entities, so
every size holds the same vocabulary and only the number of triples grows), then measures each size and
method in a fresh child process (peak RSS = the child's VmHWM from /proc, Linux):

    .venv/bin/python -m benchmarks.bench_kg_stats --rows 200000 1000000

Prints one JSON line per run and, per method, the ratio peak RSS(largest) / peak RSS(smallest).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_kg_ingest import write_synthetic

ROOT = Path(__file__).resolve().parents[1]

CHILD = {
    "streamed": ("from kinject.cli.app import main\n"
                 "try:\n    main(['kg', 'stats', PATH, '--json'])\nexcept SystemExit as exc:\n"
                 "    assert not exc.code, exc.code\n"),
    "in_memory": ("import json\nfrom kinject.knowledge.kg.partition import EntityGraph, graph_stats\n"
                  "from kinject.knowledge.sources.triples import TriplesSource\nfrom kinject.interfaces import Environment\n"
                  "env = Environment(data_dir='.', cache_dir='.')\n"
                  "print(json.dumps(graph_stats(EntityGraph.from_triples(TriplesSource(path=PATH)"
                  ".iter_triples(env)))))\n"),
}
TAIL = "import sys\nfrom benchmarks.bench_kg_ingest import peak_rss_mib\nprint('PEAK_MIB', peak_rss_mib(), file=sys.stderr)\n"


def measure(method: str, path: Path) -> dict:
    head = f"PATH = {str(path)!r}\n"
    code = head + CHILD[method] + TAIL
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT)  # the repository root: `-c` imports benchmarks from the working directory
    seconds = time.perf_counter() - start
    stats = json.loads(done.stdout[done.stdout.index("{"):])
    peak = float(done.stderr.rsplit("PEAK_MIB", 1)[1].split()[0])
    return {"method": method, "rows": stats["triples"], "entities": stats["entities"],
            "seconds": round(seconds, 1), "peak_rss_mib": round(peak, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--entities", type=int, default=20_000, help="Entity pool (all appear at every size)")
    parser.add_argument("--methods", nargs="+", default=list(CHILD), choices=list(CHILD))
    args = parser.parse_args()
    peaks: dict[str, list[float]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory(prefix="kinject-bench-kg-stats-") as tmp:
        for rows in sorted(args.rows):
            path = Path(tmp) / f"kg-{rows}.tsv"
            write_synthetic(path, rows, entities=args.entities)
            for method in args.methods:
                result = measure(method, path)
                peaks[method].append(result["peak_rss_mib"])
                print(json.dumps(result), flush=True)
            path.unlink()
    for method, values in peaks.items():
        print(json.dumps({"method": method, "rows": sorted(args.rows),
                          "peak_rss_ratio_largest_to_smallest": round(values[-1] / values[0], 3)}))


if __name__ == "__main__":
    main()
