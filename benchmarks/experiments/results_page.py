"""Regenerate the numbers of docs/results.md from the run directories: every block between
``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->`` is rewritten from the runs that docs/results.yaml
lists for NAME (``kinject.plugins.evidence.report.comparison_markdown``: each run's mean ± std and per-seed values, the
paired difference to the first run with its bootstrap interval, per-seed p-values). The prose around the blocks
is written by hand; the numbers inside them are not.

Usage:
  python benchmarks/experiments/results_page.py --runs /path/to/runs            # rewrite docs/results.md
  python benchmarks/experiments/results_page.py --runs /path/to/runs --only mop-ncbi
  python benchmarks/experiments/results_page.py --runs /path/to/runs --check    # exit 1 if the page is stale
docs/results.yaml: ``blocks: {NAME: {runs: [paths relative to --runs, baseline first], split: test,
metrics: [entity_f1], resamples: 2000}}``; ``kind: metrics`` makes a plain table of metrics.json values per run
(mean ± std over seeds, per-seed values) instead of a comparison; ``kind: csv`` with ``path:`` renders a CSV file
a command wrote (``kinject vocab compare --csv``).
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
    from kinject.plugins.evidence.report import comparison_markdown, metrics_markdown

    if block.get("kind") == "csv":  # a table a command wrote (e.g. kinject vocab compare --csv)
        import csv

        from kinject.plugins.evidence.render import TableBlock, to_markdown

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
