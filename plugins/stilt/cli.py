"""`kinject stilt ...`: STILT transfer matrices (light at import: no torch, no kinject.engine)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="STILT: intermediate-task transfer (seed: Jeong & Hwang).")


@app.callback()
def _group() -> None:
    """STILT: intermediate-task transfer matrices."""


@app.command()
def matrix(targets: str = typer.Option(..., "--targets", help="Target tasks, comma-separated (names or "
                                                                "--define labels)"),
           intermediates: str = typer.Option(..., "--intermediates", help="Intermediate tasks, comma-separated"),
           seeds: int = typer.Option(3, "--seeds", min=1, help="Runs per cell (seeds seed, seed+1, ...)"),
           seed: int = typer.Option(42, "--seed", help="First seed"),
           model: Optional[str] = typer.Option(None, "--model", "-m", help="HF id, directory, minilm or tiny"),
           limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Cap every split at N examples"),
           output: Path = typer.Option(Path("runs/stilt-matrix"), "--output", "-o", help="Matrix folder"),
           sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a spec field of every run: "
                                                    "a.b=c (strategy.* only reaches the STILT runs)"),
           defines: Optional[List[str]] = typer.Option(None, "--define", help="LABEL={name: TASK, <options>}: "
                                                       "a configured task usable by LABEL in the lists"),
           split: Optional[str] = typer.Option(None, "--split", help="Split scored (default: test)"),
           data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Datasets folder"),
           cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Stage cache folder"),
           dry_run: bool = typer.Option(False, "--dry-run", help="List the cells and which are done; run nothing"),
           report_only: bool = typer.Option(False, "--report-only", help="Summarise the finished cells (CSV, JSON, "
                                            "PNG); run nothing"),
           debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Every target x intermediate pair plus each target's baseline: CSV, JSON, heatmap PNG; resumable."""
    from rich.console import Console

    from kinject.plugins.stilt import matrix as mx

    console = Console()
    if not debug:  # each cell's run log is in its run dir (kinject.log); keep the console to one line a cell
        import logging

        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:
                handler.setLevel(logging.WARNING)
    defined = mx.parse_defines(defines or [])
    target_defs = mx.parse_task_list(targets, defined, "--targets")
    inter_defs = mx.parse_task_list(intermediates, defined, "--intermediates")
    base: dict = {"seed": seed}
    if model:
        base["model"] = {"name": model}
    if limit is not None:
        base["training"] = {"limit": limit}
    for key, value in (("data_dir", data_dir), ("cache_dir", cache_dir)):
        if value is not None:
            base[key] = str(value)
    if dry_run:
        cells = mx.plan_cells(target_defs, inter_defs, seeds)
        cell_seeds = [mx.cell_spec(cell, base, list(sets or [])).seed for cell in cells]  # as a real run (--set seed=)
        done = [mx.is_done(cell, output, cell_seed) for cell, cell_seed in zip(cells, cell_seeds)]
        for cell, cell_seed, finished in zip(cells, cell_seeds, done):
            console.print(f"{cell.target.label:<16} <- {cell.column:<16} seed {cell_seed}  "
                          f"{'[green]done[/]' if finished else 'to run'}")
        console.print(f"{len(cells)} cells, {sum(done)} done")
        return
    result = mx.run_matrix(target_defs, inter_defs, seeds, base, list(sets or []), output, split,
                           report=console.print, run_missing=not report_only)
    console.print(f"{len(result.executed)} cells run, {len(result.skipped)} reused; "
                  + ", ".join(str(p) for p in result.files.values()))
    _print_summary(console, result.summary)


def _print_summary(console, summary: dict) -> None:
    from rich.table import Table

    table = Table(title="target x intermediate (mean ± std, delta vs baseline)", title_justify="left")
    columns = ["baseline", *summary["intermediates"]]
    table.add_column("target")
    for column in columns:
        table.add_column(column, justify="right")
    for label, row in summary["rows"].items():
        shown = []
        for column in columns:
            stats = row["cells"].get(column)
            if stats is None:
                shown.append("-")
                continue
            delta = "" if stats["delta"] is None else f" ({stats['delta']:+.3f})"
            spread = f" ± {stats['std']:.3f}" if stats["n"] > 1 else f" (n={stats['n']})"
            shown.append(f"{stats['mean']:.3f}{spread}{delta}")
        table.add_row(f"{label} ({row['metric']})", *shown)
    console.print(table)
