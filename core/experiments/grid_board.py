"""The leaderboard of a grid: per task, every system (strategy label + varied values) against the baseline
(``finetune`` unless the grid file says otherwise) on the task's primary metric, with the paired difference and
its bootstrap interval exactly as ``kinject compare <baseline folder> <system folder>`` computes them, the wall
time per cell and the trainable parameters. Written as ``leaderboard.md``, ``leaderboard.html`` (the report
machinery) and ``leaderboard.json`` in the grid's output folder.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from kinject.api import KinjectError
from kinject.evidence.comparison import compare_runs, default_metric
from kinject.experiments.grid_file import Cell, Grid
from kinject.experiments.grid_state import CellState, counts
from kinject.evidence.render import Block, Heading, Para, TableBlock, to_html, to_markdown
from kinject.evidence.runs import Run, RunSet, smoke_reasons


HEADERS = ["system", "strategy", "seeds", "{metric}", "Δ vs {baseline}", "{interval}", "verdict",
           "verdict's p (Holm)", "verdict (Holm)", "dose", "probe AUROC", "wall s / cell", "trainable params"]


def _dose(run_set: RunSet) -> dict | None:
    """The system's knowledge dose (metrics.json ``dose`` of its first run: the same knowledge for every seed where
    the knowledge stages are shared) and its probe."""
    dose = run_set.first.metrics.get("dose")
    return dose if isinstance(dose, dict) else None


def dose_text(dose: dict | None) -> str:
    if not dose:
        return "-"
    text = f"{dose.get('epochs', 0):.3g} ep, {dose.get('distinct', 0):,} {dose.get('unit', '')}"
    return text + (f" ({dose['coverage']:.0%})" if dose.get("coverage") is not None else "")


def _systems(grid: Grid, cells: list[Cell], found: dict[str, CellState]) -> dict[str, dict[str, dict]]:
    """task label -> system -> {cells, set (RunSet of its done cells), strategy, values}."""
    out: dict[str, dict[str, dict]] = {}
    for cell in cells:
        entry = out.setdefault(cell.task, {}).setdefault(cell.system, {
            "cells": [], "strategy": cell.strategy, "name": cell.data["strategy"]["name"], "values": cell.values,
            "set": None})
        entry["cells"].append(cell)
        if found[cell.id].state == "done":
            folder = cell.run_dir.parent
            entry["set"] = entry["set"] or RunSet(cell.system, folder, {})
            entry["set"].runs[cell.seed] = Run(cell.run_dir)
    return out


def _baseline(grid: Grid, systems: dict[str, dict], system: str) -> str | None:
    """The baseline system a system is paired with: the baseline strategy's system whose varied values agree with
    this system's on the fields both vary (e.g. the same learning rate); None when there is no single one."""
    label = grid.file.baseline
    found = [name for name, s in systems.items() if s["strategy"] == label and s["set"] is not None]
    values = systems[system]["values"]
    agree = [name for name in found if all(values.get(k, v) == v for k, v in systems[name]["values"].items())]
    return agree[0] if len(agree) == 1 else None


def _wall(entry: dict, found: dict[str, CellState]) -> float | None:
    """Mean wall seconds of the system's done cells (the grid's record; else the run's stage seconds)."""
    values = []
    for cell in entry["cells"]:
        state = found[cell.id]
        if state.state != "done":
            continue
        seconds = state.record.get("seconds")
        if not isinstance(seconds, (int, float)):
            try:
                stages = json.loads((cell.run_dir / "run.json").read_text()).get("stages") or []
                seconds = sum(float(s.get("seconds", 0)) for s in stages)
            except (OSError, ValueError):
                continue
        values.append(float(seconds))
    return statistics.fmean(values) if values else None


def _trainable(run_set: RunSet) -> int | None:
    """Trainable parameters of the system's fine-tuning (metrics.json train.trainable_parameters), else None."""
    value = (run_set.first.metrics.get("train") or {}).get("trainable_parameters")
    return int(value) if isinstance(value, (int, float)) else None


def _value(run_set: RunSet, split: str, metric: str) -> float | None:
    values = [(r.metrics.get(split) or {}).get(metric) for r in run_set.runs.values()]
    values = [float(v) for v in values if isinstance(v, (int, float))]
    return statistics.fmean(values) if values else None


def task_board(grid: Grid, task: str, systems: dict[str, dict], found: dict[str, CellState], split: str,
               metric: str | None, n_resamples: int, seed: int) -> dict[str, Any]:
    """One task's rows: each system with its value, and, against its baseline, ``kinject compare``'s pair row."""
    done = {name: s for name, s in systems.items() if s["set"] is not None}
    rows, warnings = [], []
    if not done:
        return {"task": task, "metric": metric, "rows": [], "warnings": [], "missing": sorted(systems)}
    metric = metric or default_metric(next(iter(done.values()))["set"].first, split)
    for name, entry in done.items():
        run_set = entry["set"]
        row = {"system": name, "strategy": entry["name"], "label": entry["strategy"], "values": entry["values"],
               "seeds": sorted(run_set.runs), "folder": str(run_set.path), "value": _value(run_set, split, metric), "baseline": None,
               "wall_seconds": _wall(entry, found), "trainable_parameters": _trainable(run_set),
               "dose": _dose(run_set), "probe": (run_set.probe() or {}).get("model"), "smoke": smoke_reasons(run_set)}
        if isinstance(row["probe"], dict):
            row["probe"] = sum(row["probe"].values()) / len(row["probe"])
        base = _baseline(grid, done, name)
        if base is not None and base != name:
            row["baseline"] = base
            try:
                result = compare_runs([done[base]["set"], run_set], split, [metric], n_resamples=n_resamples,
                                      seed=seed)
            except KinjectError as exc:
                row["error"] = str(exc)
            else:
                pair = result["metrics"][0]["rows"][1]
                row.update(value=pair["value"], difference=pair["difference"], ci_low=pair["ci_low"],
                           interval=pair["interval"], interval_kind=pair["interval_kind"],
                           seeds_paired=pair["seeds_paired"], unpaired=pair.get("unpaired"),
                           not_learned=pair["not_learned"], paired_baseline_value=pair["baseline_value"],
                           baseline_not_learned=result["metrics"][0]["rows"][0]["not_learned"],
                           ci_high=pair["ci_high"], ci_low_examples=pair.get("ci_low_examples"),
                           ci_high_examples=pair.get("ci_high_examples"), verdict=pair.get("verdict"),
                           identical=pair.get("identical"), greater_is_better=result["metrics"][0].get(
                               "greater_is_better", True), paired_seeds=pair.get("paired_seeds"),
                           seed_tests=pair.get("seed_tests"), examples=result["examples"],
                           confidence=result["confidence"], baseline_value=result["metrics"][0]["rows"][0]["value"],
                           p_value=pair.get("p_value"), collapsed=pair.get("collapsed"),
                           shared_stages=pair.get("shared_stages"),
                           smoke=row["smoke"] or result["metrics"][0]["rows"][0].get("smoke"))
                warnings += [w for w in result["warnings"] if w not in warnings]
        elif base == name:
            row["is_baseline"] = True
        rows.append(row)
    for row in rows:  # the baseline's value as compare recomputes it from predictions
        paired = [r for r in rows if r.get("baseline") == row["system"] and "baseline_value" in r]
        if row.get("is_baseline") and paired:
            row["value"] = paired[0]["baseline_value"]
            row["not_learned"] = paired[0]["baseline_not_learned"]
    sign = -1 if any(r.get("greater_is_better") is False for r in rows) else 1  # best first, in the metric's direction
    rows.sort(key=lambda r: (not r.get("is_baseline"),
                             -sign * (r["value"] if r["value"] is not None else -sign * float("inf"))))
    return {"task": task, "metric": metric, "split": split, "rows": rows, "warnings": warnings,
            "missing": sorted(set(systems) - set(done))}


def _cells_text(row: dict, each: bool) -> list[str]:
    from kinject.evidence.multiplicity import HEADLINE, p_cell
    from kinject.evidence.tables import difference_cell, interval_cell, seeds_cell, shown_verdict

    value = "-" if row["value"] is None else f"{row['value']:.4f}"
    verdict, p, adjusted = "", "", ""
    if row.get("is_baseline"):
        diff, ci = "baseline", ""
        verdict = "not learned" if row.get("not_learned") else ""
    elif "difference" in row:
        diff, ci = difference_cell({**row, "baseline_value": row.get("paired_baseline_value")},
                                   row.get("baseline_value")), interval_cell(row, each)
        verdict = shown_verdict(row)
        p = p_cell(row)
        adjusted = HEADLINE if row.get("headline") else shown_verdict(row, "verdict_holm") \
            if row.get("verdict_holm") else "-"
    else:
        diff, ci = ("not compared", row["error"]) if "error" in row else ("-", "no baseline")
    wall = "-" if row["wall_seconds"] is None else f"{row['wall_seconds']:.1f}"
    params = "n/a" if row["trainable_parameters"] is None else f"{row['trainable_parameters']:,}"
    probe = "-" if row.get("probe") is None else f"{row['probe']:.4f}"
    return [row["system"], row["strategy"], seeds_cell(row, "difference" in row), value, diff, ci, verdict, p, adjusted,
            dose_text(row.get("dose")), probe, wall, params]


def board_table(board: dict[str, Any], baseline: str | None, confidence: float = 0.95) -> tuple[list[str], list]:
    from kinject.evidence.tables import interval_heading

    level = f"{confidence * 100:g}%"
    heading, each = interval_heading([r for r in board["rows"] if "difference" in r], level)
    headers = [h.format(metric=board["metric"], baseline=baseline or "baseline", interval=heading) for h in HEADERS]
    return headers, [_cells_text(row, each) for row in board["rows"]]


def task_boards(grid: Grid, cells: list[Cell], found: dict[str, CellState], split: str, metric: str | None,
                n_resamples: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Every task's :func:`task_board` (the leaderboard's rows, before any file is written)."""
    return [task_board(grid, task, systems, found, split, metric, n_resamples, seed)
            for task, systems in _systems(grid, cells, found).items()]


def build_leaderboard(grid: Grid, cells: list[Cell], found: dict[str, CellState], split: str | None = None,
                      metric: str | None = None, n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Write ``leaderboard.md``, ``leaderboard.html`` and ``leaderboard.json`` into the grid's output folder."""
    from kinject.api import __version__, atomic_write_text

    split = split or grid.file.split
    metric = metric or grid.file.metric
    boards = task_boards(grid, cells, found, split, metric, n_resamples, seed)
    headline = _adjust(grid, boards)
    blocks: list[Block] = [
        Heading(1, f"kinject grid {grid.name}: leaderboard"),
        Para(f"Grid file {grid.path}, output {grid.output}; {counts({c.id: found[c.id] for c in cells})}; "
             f"split {split}; made "
             f"{time.strftime('%Y-%m-%d %H:%M:%S %z')} by kinject {__version__}."),
        Para(f"Each system against {grid.file.baseline or 'no baseline'} (the same varied values where both vary "
             f"them), paired by seed and test example: the difference, its 95% interval over seeds and test units "
             f"({n_resamples} resamples, seed {seed}; over test units only where one seed is paired, and then no "
             "verdict) and the verdict it gives (gain / loss / no evidence; 'not learned: X' where the baseline "
             "predicts one value everywhere or does not beat the best input-free predictor for the metric, which "
             "voids the comparison; 'k of S seeds collapsed' where an arm's seeds did, counted as harm; "
             "'conditional on one STAGE' where the paired seeds share one draw of a stage) are those of `kinject "
             "compare BASELINE SYSTEM` on the two folders († 2-4 paired seeds: provisional; docs/evidence.md). "
             + (f"The headline comparison, declared in the grid file, is {headline[0]}/{headline[1]}: not "
                "adjusted. " if headline else "No headline comparison is declared (the grid file's `headline`). ")
             + "Every other comparison's p-value (of its verdict's interval) is Holm-adjusted over all the "
             "grid's comparisons; verdict (Holm) is what survives the adjustment. "
             "Dose: what the system's knowledge stages consumed (epochs of their rows; distinct "
             "facts, and the share of those available; metrics.json `dose`). Probe AUROC: the knowledge probe of the "
             "system's model (the same facts for every system of a task). Wall s / cell: mean seconds per finished "
             "cell as run (cached stages cost nothing); trainable params: of the task fine-tuning "
             "(metrics.json train.trainable_parameters; n/a when not recorded).")]
    for board in boards:
        blocks.append(Heading(2, board["task"]))
        if not board["rows"]:
            blocks.append(Para("No finished cell yet."))
            continue
        headers, rows = board_table(board, grid.file.baseline)
        blocks += [Para(f"{board['metric']} on {split}" + (f" ({board['rows'][-1].get('examples')} examples)"
                                                          if any("examples" in r for r in board["rows"]) else "")),
                   TableBlock(headers, rows)]
        from kinject.evidence.learned import describe
        from kinject.evidence.tables import collapse_notes, shared_notes

        blocks += [Para(f"Not learned: {r['system']}: {describe(r['not_learned'])}; a baseline that learned nothing "
                        "voids every comparison with it.") for r in board["rows"]
                   if r.get("not_learned") and r.get("is_baseline")]
        compared = [{**r, "run": r["system"]} for r in board["rows"] if "difference" in r]
        blocks += [Para(note) for note in shared_notes(compared) + collapse_notes(compared)]
        smoke = {r["smoke"]: None for r in board["rows"] if r.get("smoke")}
        blocks += [Para(f"{reason[0].upper()}{reason[1:]}: " + ", ".join(r["system"] for r in board["rows"]
                                                                        if r.get("smoke") == reason) + ".")
                   for reason in smoke]
        if board["missing"]:
            blocks.append(Para(f"No finished cell: {', '.join(board['missing'])}."))
        blocks += [Para("Warning: " + w) for w in board["warnings"]]
    forest = _forest(boards, grid.output / "images" / "leaderboard.png", split)
    if forest is not None:
        blocks.insert(3, forest)
    unfinished = [[c.id, found[c.id].state, found[c.id].detail] for c in cells if found[c.id].state != "done"]
    if unfinished:
        blocks += [Heading(2, "Cells not finished"), TableBlock(["cell", "state", "detail"], unfinished)]
    out = grid.output
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "leaderboard.md", to_markdown(blocks))
    atomic_write_text(out / "leaderboard.html", to_html(blocks, f"kinject grid {grid.name}"))
    atomic_write_text(out / "leaderboard.json", json.dumps({"grid": str(grid.path), "split": split,
                                                            "baseline": grid.file.baseline, "tasks": boards},
                                                           indent=2, default=str) + "\n")
    return {"markdown": out / "leaderboard.md", "html": out / "leaderboard.html", "json": out / "leaderboard.json",
            "boards": boards}


def _adjust(grid: Grid, boards: list[dict]) -> tuple[str, str] | None:
    """Holm over every comparison of the grid but its headline (in place); the headline (task, system) or None."""
    from kinject.evidence.multiplicity import adjust

    headline = grid.headline()
    rows = [row for board in boards for row in board["rows"] if "difference" in row]
    named = [row for board in boards for row in board["rows"]
             if headline is not None and (board["task"], row["system"]) == headline and "difference" in row]
    adjust(rows, named[0] if named else None)
    return headline


def _forest(boards: list[dict], path, split: str):
    """The leaderboard's forest plot (every system against its baseline, task by task), as a report image."""
    from kinject.evidence.forest import forest_plot, row_of
    from kinject.evidence.render import Image

    rows = [row_of(f"{board['task']}: {row['system']} ({board['metric']})" + (" (headline)" if row.get("headline")
                                                                                else ""), row, row.get("smoke"))
            for board in boards for row in board["rows"] if "difference" in row]
    drawn = forest_plot(rows, path, f"Each system minus its baseline on {split}")
    return Image(drawn, "Every system against its baseline: the difference with its 95% intervals",
                 "leaderboard.png") if drawn else None


def print_leaderboard(result: dict[str, Any], baseline: str | None, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    for board in result["boards"]:
        if not board["rows"]:
            continue
        headers, rows = board_table(board, baseline)
        table = Table(title=f"{board['task']}: {board['metric']} on {board['split']}", title_justify="left")
        for i, column in enumerate(headers):
            table.add_column(escape(column), justify="left" if i < 2 else "right", overflow="fold")
        for row in rows:
            table.add_row(*map(escape, row))
        console.print(table)
