"""A grid file's schema (:class:`GridFile`: strategies, tasks, seeds, what to vary, shared settings, overrides, the
executors' options) and what loading it yields (:class:`Grid`, its :class:`Cell` runs); loading and expanding a file
is :mod:`kinject.experiments.grid`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

STATE_DIR = "_grid"
LABEL = re.compile(r"[A-Za-z0-9][\w.+-]*")
PATH = re.compile(r"[\w-]+(\.[\w-]+)*")
DIMENSIONS = ("strategy", "task", "seed", "system")  # what an override can match besides the varied fields
MAX_CELLS = 10_000  # a grid's cells at most (each is a run; a longer list is a typo, e.g. seeds: {count: 10000000})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Vary(_Strict):
    """The values of one varied spec field; ``name``: its short name in folder names (default: the last part)."""

    values: list[Any] = Field(..., min_length=1)
    name: str | None = Field(None, pattern=r"^[\w.+-]*$")


def _varies(value: Any) -> Any:
    return {k: ({"values": v} if isinstance(v, list) else v) for k, v in value.items()} \
        if isinstance(value, dict) else value


class StrategyEntry(_Strict):
    name: str | None = None  # default: the label
    settings: dict[str, Any] = Field(default_factory=dict)
    vary: dict[str, Vary] = Field(default_factory=dict)

    @field_validator("vary", mode="before")
    @classmethod
    def _vary(cls, value: Any) -> Any:
        return _varies(value)


class TaskEntry(_Strict):
    name: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class Override(_Strict):
    match: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    skip: bool = False


class SlurmOptions(_Strict):
    partition: str | None = None
    gpus: int | None = Field(None, ge=0, description="GPUs per cell (--gres=gpu:N)")
    gres: str | None = None
    time: int | str | None = Field(None, description="Minutes, or [D-]HH:MM[:SS]")
    cpus: int | None = Field(None, ge=1)
    mem: int | float | str | None = Field(None, description="GB, or e.g. 32G")
    parallelism: int | None = Field(None, ge=1, description="Cells running at once (the array's %N)")
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    setup: list[str] = Field(default_factory=list, description="Shell lines before each cell (module load ...)")
    additional: dict[str, Any] = Field(default_factory=dict, description="Any other #SBATCH option")


class LocalOptions(_Strict):
    workers: int = Field(1, ge=1)
    gpus_per_cell: int | None = Field(None, ge=0, description="Default: 1 when a GPU is visible, else 0")
    timeout_min: int = Field(7 * 24 * 60, ge=1)


class Headline(_Strict):
    """The grid's one comparison declared before its runs: ``arm`` against ``baseline`` (the grid's baseline, the
    default), on ``task`` (needed when the grid has several tasks)."""

    arm: str = Field(..., pattern=r"^[\w.+-]+$")
    baseline: str | None = None
    task: str | None = None


class GridFile(_Strict):
    description: str | None = None
    output: str | None = None  # default runs/<file stem>
    model: str | None = None
    limit: int | None = Field(None, ge=1)
    quick: bool = False  # every cell a quick try, as `kinject run --quick`: protocol quick, limit 64 unless given
    seeds: list[int] = Field(default_factory=lambda: [42], min_length=1, max_length=MAX_CELLS)
    strategies: dict[str, StrategyEntry]
    tasks: dict[str, TaskEntry]
    settings: dict[str, Any] = Field(default_factory=dict)
    vary: dict[str, Vary] = Field(default_factory=dict)
    overrides: list[Override] = Field(default_factory=list)
    baseline: str | None = "finetune"
    #: the grid's one pre-declared comparison (``{baseline: finetune, arm: kimera}``): the leaderboard shows it
    #: unadjusted and marked, and adjusts every other comparison (Holm)
    headline: Headline | None = None
    metric: str | None = None
    split: str = "test"
    executor: Literal["debug", "local", "slurm"] = "local"
    local: LocalOptions = Field(default_factory=LocalOptions)
    slurm: SlurmOptions = Field(default_factory=SlurmOptions)
    data_dir: str | None = None
    cache_dir: str | None = None

    @field_validator("strategies", "tasks", mode="before")
    @classmethod
    def _labelled(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            twice = sorted({v for v in value if value.count(v) > 1})
            if twice:
                raise ValueError(f"{twice[0]!r} is listed twice (its cells would be merged); list each once, or "
                                 "give a second entry a label of its own (label: {name: ..., settings: ...})")
            return {v: {} for v in value}
        return {k: ({} if v is None else v) for k, v in value.items()} if isinstance(value, dict) else value

    @field_validator("vary", mode="before")
    @classmethod
    def _vary(cls, value: Any) -> Any:
        return _varies(value)

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_list(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, dict) and set(value) == {"start", "count"}:
            if not 1 <= int(value["count"]) <= MAX_CELLS:
                raise ValueError(f"count {value['count']}: 1 to {MAX_CELLS:,} seeds (a grid has {MAX_CELLS:,} cells "
                                 "at most)")
            return list(range(int(value["start"]), int(value["start"]) + int(value["count"])))
        return value


@dataclass
class Cell:
    """One run of the grid."""

    task: str  # task label
    strategy: str  # strategy label
    system: str  # folder name: strategy label + varied values
    seed: int
    values: dict[str, Any]  # varied field -> value
    data: dict  # the run spec (no output)
    run_dir: Path
    state_dir: Path

    @property
    def id(self) -> str:
        return f"{self.task}/{self.system}/seed-{self.seed}"

    @property
    def spec_file(self) -> Path:
        return self.run_dir.with_suffix(".yaml")

    @property
    def status_file(self) -> Path:
        return self.state_dir / "status" / self.task / self.system / f"seed-{self.seed}.json"

    @property
    def lock_file(self) -> Path:
        return self.status_file.with_suffix(".lock")

    @cached_property
    def spec_hash(self) -> str:
        from kinject.api import stable_hash

        return stable_hash(self.data)[:16]


@dataclass
class Grid:
    path: Path
    file: GridFile
    output: Path
    cells: list[Cell] = field(default_factory=list)

    @property
    def state_dir(self) -> Path:
        return self.output / STATE_DIR

    @property
    def name(self) -> str:
        return self.path.stem

    def headline(self) -> tuple[str, str] | None:
        """The headline comparison as (task label, system), None when the file names none. An arm that is no system
        of the grid or is the baseline, a baseline that is not the grid's, or an unknown task is one line
        (SpecError) naming the field."""
        from kinject.api import SpecError

        named = self.file.headline
        if named is None:
            return None
        where = f"{self.path}: headline"
        if named.baseline is not None and named.baseline != self.file.baseline:
            raise SpecError(f"{where}.baseline: {named.baseline!r} is not the grid's baseline "
                            f"({self.file.baseline!r}); every system is compared with that one")
        tasks = list(dict.fromkeys(c.task for c in self.cells)) or list(self.file.tasks)
        task = named.task
        if task is None:
            if len(tasks) != 1:
                raise SpecError(f"{where}.task: the grid has {len(tasks)} tasks ({', '.join(tasks[:8])}); name one")
            task = tasks[0]
        elif task not in tasks:
            raise SpecError(f"{where}.task: {task!r} is no task of the grid ({', '.join(tasks[:8])})")
        systems = {(c.task, c.system): c.strategy for c in self.cells}
        if (task, named.arm) not in systems:
            known = sorted(s for t, s in systems if t == task)
            raise SpecError(f"{where}.arm: {named.arm!r} is no system of task {task}"
                            + (f"; its systems: {', '.join(known[:8])}" + (", ..." if len(known) > 8 else "")
                               if known else ""))
        if systems[(task, named.arm)] == self.file.baseline or named.arm == self.file.baseline:
            raise SpecError(f"{where}.arm: {named.arm!r} is the baseline; name a system compared with it")
        return task, named.arm
