"""The STILT transfer matrix: every target x intermediate pair (and each target's baseline) over seeds.

Layout of the output folder::

    cells/<target>/<column>/seed-<seed>.json   one finished cell (column = "baseline" or an intermediate)
    runs/<target>/<column>/seed-<seed>/        that cell's run directory (run.json, metrics.json, model/)
    matrix.csv, matrix.json, matrix.png        the summary (mean, std, delta vs baseline per cell)

A cell's JSON is written (atomically) as soon as it finishes, so an interrupted matrix continues where it
stopped; unfinished stages continue from the stage cache. A cell whose spec changed is recomputed. Cells are
named by their seed value, so a matrix grows by more seeds (``--seed 45 --seeds 2`` after ``--seed 42 --seeds
3``) without touching the cells it has; folders of earlier releases, named by seed position (``seed-0``), are
still read when their spec matches.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from kinject.api import SpecError, atomic_file, atomic_write_text
from kinject.evidence import plural

log = logging.getLogger("kinject")
BASELINE = "baseline"


@dataclass(frozen=True)
class TaskDef:
    """A task in the matrix: a label for tables, a registered task name, and its config fields."""

    label: str
    name: str
    options: tuple[tuple[str, Any], ...] = ()

    def ref(self) -> dict[str, Any]:
        return {"name": self.name, **dict(self.options)}


def parse_defines(items: list[str]) -> dict[str, TaskDef]:
    """``LABEL={name: TASK, field: value}`` items -> task definitions (LABEL usable in the task lists)."""
    out: dict[str, TaskDef] = {}
    for item in items:
        label, sep, raw = item.partition("=")
        label = label.strip()
        try:
            value = yaml.safe_load(raw) if sep else None
        except yaml.YAMLError as exc:
            raise SpecError(f"--define {item!r}: invalid YAML ({exc})") from None
        if not label or not isinstance(value, dict) or not isinstance(value.get("name"), str):
            raise SpecError(f"--define {item!r}: expected LABEL={{name: TASK, <task options>}}")
        if "/" in label or label == BASELINE:
            raise SpecError(f"--define {item!r}: label may not contain '/' or be {BASELINE!r}")
        options = tuple(sorted((k, v) for k, v in value.items() if k != "name"))
        out[label] = TaskDef(label, value["name"], options)
    return out


def parse_task_list(text: str, defines: dict[str, TaskDef], option: str) -> list[TaskDef]:
    """``a,b,c`` -> task definitions: a defined label, else a registered task name with default config."""
    labels = [part.strip() for part in text.split(",") if part.strip()]
    if not labels:
        raise SpecError(f"{option}: give at least one task (comma-separated)")
    if len(set(labels)) != len(labels):
        raise SpecError(f"{option}: a task is listed twice ({text})")
    return [defines.get(label) or TaskDef(label, label) for label in labels]


@dataclass(frozen=True)
class Cell:
    """One run of the matrix: a target, an intermediate (None: the baseline) and a seed index."""

    target: TaskDef
    intermediate: TaskDef | None
    seed_index: int

    @property
    def column(self) -> str:
        return self.intermediate.label if self.intermediate else BASELINE

    def result_path(self, root: Path, seed: int) -> Path:
        return root / "cells" / self.target.label / self.column / f"seed-{seed}.json"

    def legacy_result_path(self, root: Path) -> Path:
        """Where releases before seed-valued names kept this cell (by seed position)."""
        return root / "cells" / self.target.label / self.column / f"seed-{self.seed_index}.json"

    def run_dir(self, root: Path, seed: int) -> Path:
        return root / "runs" / self.target.label / self.column / f"seed-{seed}"


def plan_cells(targets: list[TaskDef], intermediates: list[TaskDef], seeds: int) -> list[Cell]:
    """Seed-major order (one full seed of the grid first); a task is never its own intermediate."""
    cells = []
    for k in range(seeds):
        for inter in [None, *intermediates]:
            for target in targets:
                if inter is not None and inter.ref() == target.ref():
                    continue
                cells.append(Cell(target, inter, k))
    return cells


def cell_spec(cell: Cell, base: dict[str, Any], sets: list[str]):
    """The run spec of one cell: base fields, the target task, finetune or stilt, --set overrides, seed."""
    from kinject.api import build_spec
    from kinject.api import apply_overrides

    data = copy.deepcopy(base)
    data["task"] = cell.target.ref()
    if cell.intermediate is None:
        data["strategy"] = {"name": "finetune"}
        sets = [s for s in sets if not s.strip().startswith("strategy.")]  # stilt options only
    else:
        data["strategy"] = {"name": "stilt", "intermediate": [cell.intermediate.ref()]}
    data = apply_overrides(data, sets)
    data["seed"] = int(data.get("seed", 42)) + cell.seed_index
    data.pop("output", None)
    return build_spec(data)


def _spec_hash(spec) -> str:
    from kinject.api import stable_hash

    return stable_hash(spec.model_dump(mode="json", exclude={"output", "cache_dir"}))  # what changes results


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str))


def is_done(cell: Cell, root: Path, seed: int) -> bool:
    """Whether ``cell`` has a finished record for ``seed`` (without checking its spec: for listings)."""
    if cell.result_path(root, seed).exists():
        return True
    try:  # a seed-position name of an earlier release: the record says which seed it holds
        return json.loads(cell.legacy_result_path(root).read_text()).get("seed") == seed
    except (OSError, json.JSONDecodeError):
        return False


def _load_cell(path: Path, spec_hash: str) -> dict | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if data.get("spec_hash") == spec_hash else None


@dataclass
class MatrixResult:
    """What a matrix call did and produced."""

    summary: dict[str, Any]
    executed: list[Cell] = field(default_factory=list)
    skipped: list[Cell] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)


def _preflight(cells: list[Cell], base: dict, sets: list[str], split: str | None) -> dict[str, tuple[str, str]]:
    """Resolve every distinct (target, column) spec and plan its stages, so bad names or missing data fail
    before anything runs. Returns target label -> (split, primary metric)."""
    from kinject import api
    from kinject.api import TaskGroup

    scored: dict[str, tuple[str, str]] = {}
    for cell in cells:
        if cell.seed_index:
            continue
        run = api.prepare(cell_spec(cell, base, sets))
        if isinstance(run.task, TaskGroup):
            raise SpecError(f"--targets: {cell.target.label!r} is a task group; list its member tasks")
        api.plan(run)
        if cell.target.label not in scored:
            splits = run.task.eval_splits
            chosen = split or ("test" if "test" in splits else splits[-1])
            if chosen not in splits:
                raise SpecError(f"--split {chosen!r}: task {run.task.name!r} has splits {', '.join(splits)}")
            scored[cell.target.label] = (chosen, run.task.primary_metric())
    return scored


def run_matrix(targets: list[TaskDef], intermediates: list[TaskDef], seeds: int, base: dict[str, Any],
               sets: list[str], output: Path, split: str | None = None,
               report: Callable[[str], None] = log.info, run_missing: bool = True) -> MatrixResult:
    """Run (or continue) the matrix in ``output`` and write matrix.csv/.json/.png.

    ``run_missing=False`` only summarises the cells finished so far (e.g. while another process runs it).
    """
    from kinject import api

    output = Path(output)
    cells = plan_cells(targets, intermediates, seeds)
    scored = _preflight(cells, base, sets, split)
    result = MatrixResult(summary={})
    records: list[dict] = []
    started = time.perf_counter()
    for number, cell in enumerate(cells, 1):
        spec = cell_spec(cell, base, sets)
        spec_hash = _spec_hash(spec)
        done = (_load_cell(cell.result_path(output, spec.seed), spec_hash)
                or _load_cell(cell.legacy_result_path(output), spec_hash))
        where = f"[{number}/{len(cells)}] {cell.target.label} <- {cell.column} seed {spec.seed}"
        if done is not None:
            records.append(done)
            result.skipped.append(cell)
            report(f"{where}: done before ({done['value']:.4f})")
            continue
        if not run_missing:
            report(f"{where}: not run yet")
            continue
        split_name, metric = scored[cell.target.label]
        t0 = time.perf_counter()
        run_dir = cell.run_dir(output, spec.seed)
        metrics = api.execute(api.prepare(spec, resume=True), run_dir)
        if metric not in metrics.get(split_name, {}):
            raise SpecError(f"task {cell.target.name!r} reported no {split_name}/{metric} "
                            f"(got {sorted(metrics.get(split_name, {}))})")
        record = {"target": cell.target.label, "intermediate": cell.column, "seed": spec.seed,
                  "split": split_name, "metric": metric, "value": float(metrics[split_name][metric]),
                  "metrics": {k: v for k, v in metrics.items() if k != "train"},
                  "seconds": round(time.perf_counter() - t0, 2), "spec_hash": spec_hash,
                  "run_dir": str(run_dir)}
        _write_json(cell.result_path(output, spec.seed), record)
        records.append(record)
        result.executed.append(cell)
        report(f"{where}: {split_name} {metric} = {record['value']:.4f} ({record['seconds']:.0f}s, "
               f"{time.perf_counter() - started:.0f}s so far)")
    result.summary = summarize(records, targets, intermediates, scored, seeds, base)
    result.files = write_outputs(result.summary, output)
    return result


def summarize(records: list[dict], targets: list[TaskDef], intermediates: list[TaskDef],
              scored: dict[str, tuple[str, str]], seeds: int, base: dict[str, Any]) -> dict[str, Any]:
    """mean, std (ddof 1; 0.0 for one seed), n per cell (the training library's summarize_seeds); delta = cell
    mean - the target's baseline mean."""
    from kinject.evidence import summarize_seeds

    per_cell: dict[tuple[str, str], dict[int, dict]] = {}
    for record in records:
        per_cell.setdefault((record["target"], record["intermediate"]), {})[record["seed"]] = {
            "cell": {"value": record["value"]}}

    def cell(target: str, column: str) -> dict | None:
        seeds = per_cell.get((target, column))
        return summarize_seeds(seeds)["cell"]["value"] if seeds else None  # None: the target itself / not run

    rows: dict[str, Any] = {}
    for target in targets:
        split_name, metric = scored[target.label]
        row: dict[str, Any] = {"split": split_name, "metric": metric, "cells": {}}
        baseline = cell(target.label, BASELINE)
        row["cells"][BASELINE] = baseline and {**baseline, "delta": None}
        for inter in intermediates:
            stats = cell(target.label, inter.label)
            if stats is not None:
                stats["delta"] = stats["mean"] - baseline["mean"] if baseline else None
            row["cells"][inter.label] = stats
        rows[target.label] = row
    return {"model": (base.get("model") or {}).get("name", "minilm"), "seeds": seeds,
            "targets": {t.label: t.ref() for t in targets},
            "intermediates": {t.label: t.ref() for t in intermediates}, "rows": rows}


def write_outputs(summary: dict[str, Any], output: Path) -> dict[str, Path]:
    """matrix.json (everything), matrix.csv (one line per cell) and matrix.png (the heatmap)."""
    output.mkdir(parents=True, exist_ok=True)
    files = {"json": output / "matrix.json", "csv": output / "matrix.csv", "png": output / "matrix.png"}
    _write_json(files["json"], summary)
    with atomic_file(files["csv"]) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["target", "intermediate", "split", "metric", "n", "mean", "std", "delta"])
        for target, row in summary["rows"].items():
            for column, stats in row["cells"].items():
                if stats is None:
                    continue
                delta = "" if stats["delta"] is None else f"{stats['delta']:.6f}"
                std = f"{stats['std']:.6f}" if stats["n"] > 1 else ""
                writer.writerow([target, column, row["split"], row["metric"], stats["n"],
                                 f"{stats['mean']:.6f}", std, delta])
    heatmap(summary, files["png"])
    return files


def heatmap(summary: dict[str, Any], path: Path) -> None:
    """Targets x (baseline + intermediates): mean ± std per cell, coloured by the change vs baseline
    (blue: gain, orange: loss, white: none; saturation relative to the largest change in the grid)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LinearSegmentedColormap, Normalize
    from matplotlib.figure import Figure

    rows = summary["rows"]
    columns = [BASELINE, *summary["intermediates"]]
    deltas = np.full((len(rows), len(columns)), np.nan)
    for i, row in enumerate(rows.values()):
        for j, column in enumerate(columns):
            stats = row["cells"].get(column)
            if stats is not None:
                deltas[i, j] = 0.0 if stats["delta"] is None else stats["delta"]
    scale = float(np.nanmax(np.abs(deltas))) if np.isfinite(deltas).any() else 0.0
    cmap = LinearSegmentedColormap.from_list("loss-gain", ["#e8741c", "#ffffff", "#2b6cc4"])
    cmap = cmap.with_extremes(bad="#d9d9d9")
    fig = Figure(figsize=(2.8 + 1.5 * len(columns), 1.0 + 0.65 * len(rows)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(deltas), cmap=cmap, norm=Normalize(-(scale or 1.0), scale or 1.0),
                      aspect="auto")
    fig.colorbar(image, ax=ax, label="change vs baseline", shrink=0.8)
    for i, row in enumerate(rows.values()):
        for j, column in enumerate(columns):
            stats = row["cells"].get(column)
            text = "-" if stats is None else f"{stats['mean']:.3f}\n" + (
                f"±{stats['std']:.3f}" if stats["n"] > 1 else f"(n={stats['n']})")
            ax.text(j, i, text, ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), [f"{label}\n({row['split']} {row['metric']})" for label, row in rows.items()])
    ax.set_xlabel("intermediate task")
    ax.set_ylabel("target task")
    done = [stats["n"] for row in rows.values() for stats in row["cells"].values() if stats]
    seeds = f"{min(done)}-{max(done)}" if done and min(done) != max(done) else str(max(done, default=0))
    ax.set_title(f"STILT, {summary['model']}, mean ± std over {seeds} of {plural(summary['seeds'], 'seed')}",
                 fontsize=10)
    fig.tight_layout()
    with atomic_file(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
