"""Finding run directories and reading what they hold (run.json, metrics.json, predictions/<split>.jsonl).

A run argument is a run directory (``run.json``), a ``--repeats`` parent (``seed-<s>/run.json``), a folder of
such runs (a task group's output; only where ``groups=True``), or a glob of any of these.
"""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from kinject.api import DataError, KinjectError
from kinject.tasks import read_jsonl


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read ({exc})", path) from None


def load_predictions(path: Path, task_kind: str | None = None) -> list[dict]:
    """Prediction records of one file (``id``, ``gold``, ``pred``; ``ranking`` for retrieval); ids unique.

    Malformed lines -> DataError naming file:line."""
    records, seen = [], {}
    for number, row in read_jsonl(Path(path)):
        missing = [k for k in ("id", "gold", "pred") if k not in row]
        if task_kind == "retrieval" and "ranking" not in row:
            missing.append("ranking")
        if missing:
            raise DataError(f"prediction record without {', '.join(map(repr, missing))}", path, number)
        key = str(row["id"])
        if key in seen:
            raise DataError(f"id {key!r} repeats line {seen[key]}", path, number)
        seen[key] = number
        records.append(row)
    return records


@dataclass
class Run:
    """One run directory (one seed)."""

    path: Path

    @cached_property
    def info(self) -> dict:
        return _read_json(self.path / "run.json")

    @property
    def seed(self) -> int:
        return int(self.info.get("seed", self.info.get("spec", {}).get("seed", 0)))

    @property
    def task_spec(self) -> dict:
        return dict(self.info.get("spec", {}).get("task") or {"name": "?"})

    @cached_property
    def metrics(self) -> dict:
        path = self.path / "metrics.json"
        return _read_json(path) if path.exists() else {}

    def prediction_splits(self) -> list[str]:
        return sorted(p.name[: -len(".jsonl")] for p in (self.path / "predictions").glob("*.jsonl"))

    def predictions(self, split: str) -> list[dict]:
        """The records of ``predictions/<split>.jsonl`` (``probe``: the knowledge probe's probe-test pairs)."""
        path = self.path / ("probe-predictions.jsonl" if split == "probe" else f"predictions/{split}.jsonl")
        if not path.exists():
            has = self.prediction_splits()
            raise KinjectError(f"{self.path}: no predictions for split {split!r} ("
                               + (f"it has {', '.join(has)}" if has else "a run made before per-example predictions; "
                                  "re-run it") + ")")
        return load_predictions(path)

    @cached_property
    def probe(self) -> dict | None:
        """The run's knowledge probe as ``{model, base, chance, gain}`` (the run folder's probe.json, else
        metrics.json's ``probe`` section: ``auroc``, ``base_auroc``, ``gain_auroc``, ...); None for a run without one."""
        path = self.path / "probe.json"
        if path.is_file():
            return _read_json(path)
        found = self.metrics.get("probe")
        if not isinstance(found, dict):
            return None
        measures = [k for k in found if f"base_{k}" in found and isinstance(found[k], (int, float))]
        return {"model": {k: found[k] for k in measures}, "base": {k: found[f"base_{k}"] for k in measures},
                "gain": {k: found.get(f"gain_{k}") for k in measures}, "chance": found.get("chance", 0.5)}

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """The task head's label order (model/config.json id2label), () when unknown."""
        path = self.path / "model" / "config.json"
        if not path.exists():
            return ()
        id2label = _read_json(path).get("id2label") or {}
        return tuple(id2label[k] for k in sorted(id2label, key=int))


@dataclass
class RunSet:
    """One compared system: a run, or the seeds of a ``--repeats`` run (seed -> Run)."""

    name: str
    path: Path
    runs: dict[int, Run] = field(default_factory=dict)

    @property
    def first(self) -> Run:
        return self.runs[min(self.runs)]

    @property
    def task(self) -> str:
        return self.first.task_spec.get("name", "?")

    @property
    def strategy(self) -> str:
        return (self.first.info.get("spec", {}).get("strategy") or {}).get("name", "?")

    def probe(self, measure: str = "auroc") -> dict | None:
        """The knowledge probe over this set's seeds: per-seed ``measure`` of the run's model and of the base model
        and their mean ``gain``, with ``chance``; None when no run has a probe."""
        found = [(seed, run.probe) for seed, run in sorted(self.runs.items()) if run.probe]
        found = [(seed, p) for seed, p in found if all(measure in (p.get(side) or {}) for side in ("model", "base"))]
        if not found:
            return None
        model = {seed: float(p["model"][measure]) for seed, p in found}
        base = {seed: float(p["base"][measure]) for seed, p in found}
        return {"measure": measure, "model": model, "base": base, "chance": found[0][1].get("chance", 0.5),
                "gain": sum(model[s] - base[s] for s in model) / len(model)}


SMOKE_STEPS = 200  # fewer optimiser steps than this make a smoke run


def smoke_reasons(run_set: RunSet) -> str | None:
    """:func:`smoke_of` a system's first run."""
    return smoke_of(run_set.first.info)


def smoke_of(info: dict) -> str | None:
    """Why a run (its run.json) is a smoke run, whose figures are not comparable with anyone's (the tiny random
    model, ``--limit``, fewer than :data:`SMOKE_STEPS` steps), as ``smoke run, not comparable: tiny random model,
    --limit 64``; None when it is none."""
    spec = info.get("spec") if isinstance(info, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    model = (spec.get("model") or {}).get("name", "?") if isinstance(spec.get("model"), dict) else "?"
    training = spec.get("training") if isinstance(spec.get("training"), dict) else {}
    steps = training.get("max_steps")
    found = [why for why, hit in (("tiny random model", model == "tiny"),
                                  (f"--limit {training.get('limit')}", bool(training.get("limit"))),
                                  (f"{steps} steps", isinstance(steps, (int, float)) and 0 < steps < SMOKE_STEPS))
             if hit]
    return ("smoke run, not comparable: " + ", ".join(found)) if found else None


def short_names(run_sets: list[RunSet]) -> None:
    """Name each run set by its path relative to the folder all of them share (``runs/a``, ``runs/b`` -> ``a``,
    ``b``), so tables are not widened by a machine's folders; a single set keeps its last two path parts."""
    import os

    paths = [s.path.absolute() for s in run_sets]
    if not paths:
        return
    common = Path(os.path.commonpath([str(p) for p in paths])) if len(paths) > 1 else paths[0].parent.parent
    names = [str(p.relative_to(common)) if p != common else p.name for p in paths]
    if len(set(names)) == len(names):
        for run_set, name in zip(run_sets, names):
            run_set.name = name or run_set.path.name


def _expand(argument: str) -> list[Path]:
    if any(ch in argument for ch in "*?[") and not Path(argument).exists():
        matches = sorted(glob.glob(argument))
        if not matches:
            raise KinjectError(f"{argument}: no run directory matches")
        return [Path(m) for m in matches]
    return [Path(argument)]


def _run_set(path: Path, name: str) -> RunSet | None:
    if (path / "run.json").is_file():
        run = Run(path)
        return RunSet(name, path, {run.seed: run})
    seeds = sorted(p for p in path.glob("seed-*") if (p / "run.json").is_file())
    if seeds:
        runs = [Run(p) for p in seeds]
        return RunSet(name, path, {run.seed: run for run in runs})
    return None


def find_runs(arguments: list[str], groups: bool = False) -> list[RunSet]:
    """The run sets named by ``arguments`` (paths or globs); ``groups``: a folder of runs gives one set per
    member (a task group's output). Anything else -> KinjectError naming it."""
    out: list[RunSet] = []
    for argument in arguments:
        for path in _expand(argument):
            found = _run_set(path, str(path))
            if found is not None:
                out.append(found)
                continue
            members = [s for s in (_run_set(p, str(p)) for p in sorted(path.iterdir()) if p.is_dir())
                       if s is not None] if path.is_dir() else []
            if members and groups:
                out.extend(members)
            elif members:
                raise KinjectError(f"{path}: a folder of {len(members)} runs (a task group?); name them, e.g. "
                                   f"{members[0].path}")
            else:
                raise KinjectError(f"{path}: not a run directory (no run.json, no seed-*/run.json)")
    return out
