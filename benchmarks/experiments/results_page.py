"""Regenerate the numbers of docs/results.md from the run directories: every block between
``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->`` is rewritten from the runs that docs/results.yaml
lists for NAME (``kinject.evidence.report.comparison_markdown``: each run's mean ± std and per-seed values, the
paired difference to the first run with its bootstrap interval, per-seed p-values). The prose around the blocks
is written by hand; the numbers inside them are not.

Usage:
  python -m benchmarks.experiments.results_page --runs /path/to/runs            # rewrite docs/results.md
  python -m benchmarks.experiments.results_page --runs /path/to/runs --only mop-ncbi
  python -m benchmarks.experiments.results_page --runs /path/to/runs --check    # exit 1 if the page is stale
docs/results.yaml: ``blocks: {NAME: {runs: [paths relative to --runs, baseline first], split: test,
metrics: [entity_f1], resamples: 2000}}``; ``kind: metrics`` makes a plain table of metrics.json values per run
(mean ± std over seeds, per-seed values) instead of a comparison; ``kind: csv`` with ``path:`` renders a CSV file
a command wrote (``kinject vocab compare --csv``); ``kind: seed-reading`` with ``of: NAME`` turns block NAME's printed
per-seed values into the seed-level reading (per-seed differences, a t-interval over seeds, the verdict): for blocks
whose run folders are no longer at hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def render(name: str, block: dict, runs: Path) -> str:
    """A ``comparison`` block (default: paired comparison to the first run) or a ``metrics`` block (a table of
    metrics.json values per run; ``split: null`` reads top-level entries such as ``comparison``)."""
    from kinject.evidence.report import comparison_markdown, metrics_markdown

    if block.get("kind") == "csv":  # a table a command wrote (e.g. kinject vocab compare --csv)
        import csv

        from kinject.evidence.render import TableBlock, to_markdown

        with open(runs / block["path"], newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        prefixes = sorted({f"{runs}/", f"{runs.resolve()}/"}, key=len, reverse=True)
        for prefix in prefixes:  # paths under --runs are shown relative to it (no machine's folders in the docs)
            rows = [[cell.replace(prefix, "") for cell in row] for row in rows]
        return to_markdown([TableBlock(rows[0], rows[1:])])
    paths = [str(runs / p) for p in block["runs"]]
    if block.get("kind") == "metrics":
        return metrics_markdown(paths, block.get("split", "test"), block["metrics"], root=runs)
    return comparison_markdown(paths, block.get("split", "test"), block.get("metrics"),
                               n_resamples=int(block.get("resamples", 2000)), seed=int(block.get("seed", 0)),
                               root=runs)


def seed_reading(page: str, of: str) -> str:
    """The seed-level reading of generated comparison block ``of``, computed from the per-seed values the page
    prints (for blocks whose run folders are no longer at hand): each arm's per-seed differences to the baseline
    (paired by seed order, over the seeds both have), their mean, a 95% t-interval over those seeds (k - 1 degrees
    of freedom) and the verdict it gives. An interval over seeds is what "does the method help" needs; the page's
    intervals over examples hold the trained models fixed."""
    import numpy as np
    from scipy import stats

    from kinject.evidence.bootstrap import verdict
    from kinject.evidence.comparison import FEW_SEEDS, metric_direction
    from kinject.evidence.render import TableBlock, to_markdown

    found = re.search(rf"<!-- generated:{re.escape(of)} -->\n(.*?)<!-- /generated:{re.escape(of)} -->", page, re.S)
    if not found:
        raise KeyError(f"seed reading of {of!r}: no such generated block")
    out = []
    for title, table in re.findall(r"(\*\*[^\n]*\*\*)[^\n]*\n\n((?:\|[^\n]*\n)+)", found.group(1)):
        lines = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]
        header, rows = lines[0], [r for r in lines[2:] if len(r) == len(lines[0])]
        if "per seed" not in header or not rows:
            continue
        metric = title.strip("*").split(",")[-1].strip()
        better = metric_direction(metric)
        column = header.index("per seed")
        base = [float(v) for v in rows[0][column].split(",")]
        cells = []
        for row in rows[1:]:
            values = [float(v) for v in row[column].split(",")]
            paired = re.search(r"\((\d+) paired\)", row[1])
            k = int(paired.group(1)) if paired else min(len(base), len(values))
            if not paired and len(base) != len(values):
                continue
            diff = np.array(values[:k]) - np.array(base[:k])
            mean = float(diff.mean())
            if k >= 2 and diff.std(ddof=1) > 0:
                half = float(stats.t.ppf(0.975, k - 1) * diff.std(ddof=1) / np.sqrt(k))
                low, high = mean - half, mean + half
                ci, call = f"[{low:+.4f}, {high:+.4f}]", verdict(low, high, better)
            else:
                ci, call = "-", "one seed" if k < 2 else verdict(mean, mean, better)
            cells.append([row[0], f"{k}{' †' if k < FEW_SEEDS else ''}", ", ".join(f"{d:+.3f}" for d in diff),
                          f"{mean:+.4f}", ci, call])
        if cells:
            out += [f"{title} - over seeds:", "",
                    to_markdown([TableBlock(["run", "paired seeds", "Δ per seed", "mean Δ",
                                             "95% CI over seeds (t)", "verdict"], cells)]).strip(), ""]
    return "\n".join(out) if out else "(no per-seed values in the block)"


def fill(page: str, name: str, body: str) -> str:
    """``page`` with the text between NAME's markers replaced by ``body`` (KeyError if the markers are missing)."""
    pattern = re.compile(rf"(<!-- generated:{re.escape(name)} -->\n).*?(<!-- /generated:{re.escape(name)} -->)", re.S)
    if not pattern.search(page):
        raise KeyError(f"docs/results.md has no <!-- generated:{name} --> ... <!-- /generated:{name} --> block")
    return pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), page, count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder the run paths of docs/results.yaml are in")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "results.md")
    parser.add_argument("--manifest", type=Path, default=ROOT / "docs" / "results.yaml")
    parser.add_argument("--only", action="append", help="regenerate only these blocks")
    parser.add_argument("--check", action="store_true", help="compare, do not write: exit 1 when stale")
    args = parser.parse_args()
    blocks = (yaml.safe_load(args.manifest.read_text()) or {}).get("blocks") or {}
    page = original = args.page.read_text(encoding="utf-8")
    for name, block in blocks.items():
        if args.only and name not in args.only:
            continue
        if block.get("kind") == "seed-reading":  # from the page's own per-seed values (after its source block)
            page = fill(page, name, seed_reading(page, block["of"]))
            continue
        missing = [p for p in block.get("runs", [block.get("path")]) if not (args.runs / p).exists()]
        if missing:
            print(f"{name}: skipped, runs not found: {', '.join(missing)}", file=sys.stderr)
            continue
        page = fill(page, name, render(name, block, args.runs))
        print(f"{name}: {len(block.get('runs', [1]))} source(s)", file=sys.stderr)
    if args.check:
        return int(page != original)
    if page != original:
        args.page.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
