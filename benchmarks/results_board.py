"""The study's leaderboard (issue #53), regenerated from run folders: one row per method arm and task of the study's
grid files, with its variant (the arm's name as comparisons give it), knowledge dose, seeds, knowledge draws, paired
difference against its grid's baseline with the interval, verdict and cost. An arm with no finished cell says
"waits for a GPU" and the command that runs it. Rows are computed exactly as `kinject grid report` computes them.

    python -m benchmarks.results_board                     # prints the table (Markdown)
    python -m benchmarks.results_board --docs docs/results.md   # and rewrites the block at the top of that page

``--runs``: the folder the grids' outputs are under (default: each grid file's own ``output``, as run from the
repository root).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = ("study-hpo-isa", "study-hpo-isa-doktra", "study-capr")  # benchmarks/grids/<name>.yaml, in this order
#: the knowledge stage whose key says which draw a seed used (distinct keys over seeds = draws)
DRAW_STAGES = {"kimera": "kimera-retrain", "mop": "mop-adapter-0", "pretrain": "pretrain-mlm",
               "doktra": "doktra-teacher", "stilt": "stilt-intermediate-1"}
BEGIN, END = "<!-- results-board: begin (python -m benchmarks.results_board --docs docs/results.md) -->", \
    "<!-- results-board: end -->"
HEADERS = ["method", "task", "arm", "variant", "dose", "seeds", "draws", "Δ vs baseline [95% interval]", "verdict",
           "cost (wall s / cell)"]


def variant(cell_data: dict) -> str:
    """The arm's name as its comparison gives it: the strategy's ``label`` of a cell's settings (over its
    protocol's)."""
    from kinject.api import registry

    settings = dict(cell_data["strategy"])
    cls = registry("strategies").get(settings.pop("name"))
    protocol = cls.protocols.get(cell_data.get("protocol") or "", {}).get("strategy", {})
    return cls.label(cls.Config.model_validate({**protocol, **settings}))


def draws(strategy: str, folders: list[Path]) -> str:
    """How many distinct draws of the arm's knowledge stage its seeds used (1: every seed shares one)."""
    stage = DRAW_STAGES.get(strategy)
    if stage is None:
        return "-"
    keys = set()
    for folder in folders:
        try:
            stages = json.loads((folder / "run.json").read_text())["stages"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        keys |= {s.get("key") for s in stages if isinstance(s, dict) and s.get("name") == stage}
    return str(len(keys)) if keys else "-"


def grid_rows(path: Path, runs: Path | None) -> list[dict]:
    """The rows of one grid file: every arm but the baseline, finished or waiting."""
    from kinject.experiments.grid import load_grid
    from kinject.experiments.grid_board import dose_text, task_boards
    from kinject.experiments.grid_state import states

    grid = load_grid(path)
    if runs is not None:
        grid = load_grid(path, output=runs / grid.output.name)
    found = states(grid.cells)
    headline = grid.headline()  # the grid file's declared comparison (docs/evidence.md)
    boards = {b["task"]: b for b in task_boards(grid, grid.cells, found, grid.file.split, grid.file.metric)}
    rows = []
    for cell in grid.cells:
        if cell.strategy == grid.file.baseline or any(r["_key"] == (cell.task, cell.system) for r in rows):
            continue
        system = [c for c in grid.cells if (c.task, c.system) == (cell.task, cell.system)]
        done = [c for c in system if found[c.id].state == "done"]
        row = {"_key": (cell.task, cell.system), "method": cell.data["strategy"]["name"], "task": cell.task,
               "arm": cell.system + (" (headline)" if headline == (cell.task, cell.system) else ""),
               "variant": variant(cell.data), "seeds": f"{len(done)} of {len(system)}",
               "draws": draws(cell.data["strategy"]["name"], [c.run_dir for c in done])}
        board = next((r for r in (boards.get(cell.task) or {}).get("rows", []) if r["system"] == cell.system), None)
        if board is None or "difference" not in board:
            command = f"bash benchmarks/gpu_study.sh --run --only '{cell.task}/{cell.system}/*'"
            rows.append({**row, "dose": "-", "delta": f"waits for a GPU: `{command}`", "verdict": "-", "cost": "-"})
            continue
        from kinject.evidence.tables import shown_verdict

        rows.append({**row, "dose": dose_text(board.get("dose")),
                     "delta": f"{board['difference']:+.3f} [{board['ci_low']:+.3f}, {board['ci_high']:+.3f}]",
                     "verdict": shown_verdict(board),
                     "cost": "-" if board["wall_seconds"] is None else f"{board['wall_seconds']:.0f}"})
    return rows


def table(rows: list[dict]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    keys = ("method", "task", "arm", "variant", "dose", "seeds", "draws", "delta", "verdict", "cost")
    lines += ["| " + " | ".join(cell(row[k]) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def board(runs: Path | None, grids: tuple[Path, ...] | None = None) -> str:
    """The board's Markdown block: the rows of ``grids`` (default: the study's)."""
    grids = grids or tuple(ROOT / "benchmarks" / "grids" / f"{name}.yaml" for name in STUDY)
    rows = [row for path in grids for row in grid_rows(path, runs)]
    return (f"{BEGIN}\n\n{table(rows)}\n\nEach arm against its grid's `finetune`, paired by seed and test example "
            "(`kinject grid report` on the grid file gives the same rows, and the interval's kind). Draws: distinct "
            "knowledge stages over the seeds (1: every seed shares one). Grid files: "
            + ", ".join(f"`{_shown(path)}`" for path in grids) + f".\n\n{END}")


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def rewrite(page: Path, block: str) -> None:
    """Replace the board's block in ``page`` (or put it after the page's title)."""
    text = page.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, count=1, flags=re.S)
    else:
        title, _, rest = text.partition("\n")
        text = f"{title}\n\n{block}\n{rest}"
    page.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="folder holding the grids' output folders")
    parser.add_argument("--docs", type=Path, help="page whose board block to rewrite (docs/results.md)")
    parser.add_argument("--output", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    block = board(args.runs)
    print(block)
    if args.output:
        args.output.write_text(block + "\n", encoding="utf-8")
    if args.docs:
        rewrite(args.docs, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
