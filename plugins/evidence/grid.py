"""``kinject grid``: a grid file (YAML) -> its cells, each an ordinary ``kinject run``.

A grid file names strategies, tasks and seeds, spec fields to vary (their cartesian product), settings every cell
shares, per-cell overrides and an output folder (docs/evidence.md, "Grids")::

    output: runs/grid-kimera
    model: minilm
    seeds: [42, 43, 44]
    strategies: [finetune, kimera]              # or label -> {name, settings, vary}
    tasks:
      capr-hpo: {name: capr, settings: {task.dataset: hpo}}
    settings: {training.epochs: 2}              # --set-style dotted keys (strategy.*/task.*: where the plugin has it)
    vary: {strategy.variant: [hard, no-mask]}   # only strategies with the field are varied
    overrides:
      - {match: {strategy: kimera, task: capr-hpo}, settings: {strategy.kg_steps: 3000}}
    slurm: {partition: gpu, gpus: 1, time: 240}

Cell ``<task>/<system>/seed-<s>`` runs into ``<output>/<task>/<system>/seed-<s>/`` (its spec beside it as
``seed-<s>.yaml``), where ``<system>`` is the strategy label and the varied values (``kimera-varianthard``), so
``<output>/<task>/<system>`` is a ``--repeats``-style folder ``kinject compare`` reads. The grid's own records (a
status file and a lock per cell: :mod:`kinject.plugins.evidence.grid_state`; submitit's logs) live in
``<output>/_grid/``. Running cells: :mod:`~kinject.plugins.evidence.grid_exec`; the leaderboard:
:mod:`~kinject.plugins.evidence.grid_board`.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kinject.api import KinjectError, SpecError


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


# -- loading ------------------------------------------------------------------------------------------ #
def _fields(kind: str, name: str) -> set[str]:
    from kinject.api import registry

    return set(registry(kind).get(name).Config.model_fields)


def _reaches(key: str, strategy: str, task: str) -> bool:
    """Whether a shared setting ``key`` reaches a cell of ``strategy`` on ``task``: ``strategy.X`` / ``task.X`` only
    where that plugin's config has field X (so ``strategy.kg_steps`` skips ``finetune``); anything else always."""
    section, _, rest = key.partition(".")
    if section not in ("strategy", "task") or not rest:
        return True
    return rest.split(".")[0] in _fields("strategies" if section == "strategy" else "tasks",
                                         strategy if section == "strategy" else task)


def _set(data: dict, key: str, value: Any) -> dict:
    """A copy of ``data`` with the dotted ``key`` set, as ``--set key=...`` sets it (numeric parts index lists,
    which grow as needed: ``sources.0.name``)."""
    import copy

    data = copy.deepcopy(data)
    node: Any = data
    parts = key.split(".")
    for part, following in zip(parts[:-1], parts[1:]):
        if isinstance(node, list):
            index = int(part)
            node.extend({} for _ in range(index + 1 - len(node)))
            if not isinstance(node[index], (dict, list)):
                node[index] = [] if following.isdigit() else {}
            node = node[index]
            continue
        if not isinstance(node.get(part), (dict, list)):
            node[part] = [] if following.isdigit() else {}
        node = node[part]
    if isinstance(node, list):
        index = int(parts[-1])
        node.extend({} for _ in range(index + 1 - len(node)))
        node[index] = value
    else:
        node[parts[-1]] = value
    return data


def merge(data: dict, key: str, value: Any) -> dict:
    """``data`` with the dotted ``key`` set to ``value``; a mapping is merged into a mapping already there."""
    node: Any = data
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else \
            node[int(part)] if isinstance(node, list) and part.isdigit() and int(part) < len(node) else None
    if isinstance(value, dict) and isinstance(node, dict):
        for sub, item in value.items():
            data = merge(data, f"{key}.{sub}", item)
        return data
    return _set(data, key, value)


def _slug(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else json.dumps(value, separators=(",", ":")) \
        if isinstance(value, (dict, list)) else str(value)
    return re.sub(r"[^\w.+=-]+", "_", text).strip("_")[:40] or "_"


def _check_keys(where: str, settings: dict[str, Any]) -> None:
    for key in settings:
        if not isinstance(key, str) or not PATH.fullmatch(key):
            raise SpecError(f"{where}: {key!r} is not a spec field path (e.g. training.learning_rate)")
        if key.split(".")[0] in ("seed", "output"):
            raise SpecError(f"{where}.{key}: set by the grid (seeds, output), not a setting")


def _matches(match: dict[str, Any], cell: dict[str, Any]) -> bool:
    for key, wanted in match.items():
        if key not in cell:
            return False
        value = cell[key]
        if not (value == wanted or (isinstance(wanted, list) and not isinstance(value, list) and value in wanted)):
            return False
    return True


def _cli_sets(sets: list[str]) -> dict[str, Any]:
    """``--set a.b=c`` items as {key: YAML value} (errors as ``kinject run --set``'s)."""
    from kinject.api import apply_overrides

    out = {}
    for item in sets:
        key = item.partition("=")[0].strip()
        out[key] = apply_overrides({}, [item])  # validates KEY=VALUE, types the value
        for part in key.split("."):
            out[key] = out[key][part]
    return out


def load_grid(path: Path, output: Path | None = None, sets: list[str] | None = None) -> Grid:
    """Read and validate a grid file and build its cells; every error is one line (SpecError) naming the file and
    the field, raised before anything is written."""
    from kinject.api import format_validation_error, load_yaml, registry

    path = Path(path)
    data = load_yaml(path)
    try:
        spec = GridFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{path}: {format_validation_error(exc, model=GridFile)}") from None
    for what, entries in (("strategies", spec.strategies), ("tasks", spec.tasks)):
        if not entries:
            raise SpecError(f"{path}: {what}: name at least one")
        for label, entry in entries.items():
            if not LABEL.fullmatch(label) or label == STATE_DIR:
                raise SpecError(f"{path}: {what}.{label}: a label is letters, digits, '.', '_', '+', '-'")
            kind = what
            try:
                registry(kind).get(entry.name or label)
            except KinjectError as exc:
                raise SpecError(f"{path}: {what}.{label}.name: {exc}") from None
            _check_keys(f"{path}: {what}.{label}.settings", entry.settings)
    _check_keys(f"{path}: settings", spec.settings)
    _check_keys(f"{path}: vary", spec.vary)
    for label, entry in spec.strategies.items():
        _check_keys(f"{path}: strategies.{label}.vary", entry.vary)
    for i, override in enumerate(spec.overrides):
        _check_keys(f"{path}: overrides.{i}.settings", override.settings)
    if len(set(spec.seeds)) != len(spec.seeds):
        raise SpecError(f"{path}: seeds: a seed repeats ({spec.seeds})")
    if spec.baseline is not None and spec.baseline not in spec.strategies and "baseline" in spec.model_fields_set:
        raise SpecError(f"{path}: baseline: {spec.baseline!r} is not a strategy label of the grid "
                        f"({', '.join(spec.strategies)})")
    cli = _cli_sets(sets or [])
    _check_size(path, spec)
    out = Path(output) if output is not None else Path(spec.output or f"runs/{path.stem}")
    grid = Grid(path=path, file=spec, output=out)
    grid.cells = _cells(grid, cli)
    return grid


def _check_size(path: Path, spec: GridFile) -> None:
    """One line, before any cell is built, when the grid has more than MAX_CELLS cells (overrides' skips aside)."""
    import math

    per_strategy = [math.prod(len(v.values) for v in [*spec.vary.values(), *e.vary.values()])
                    for e in spec.strategies.values()]
    total = len(spec.tasks) * sum(per_strategy) * len(spec.seeds)
    if total > MAX_CELLS:
        raise SpecError(f"{path}: {total:,} cells (tasks x strategies x varied values x seeds); a grid has "
                        f"{MAX_CELLS:,} at most: split it into several grid files")


def _unreached(where: str, keys: list[str], spec: GridFile) -> None:
    """A shared strategy.X / task.X setting that no strategy / task of the grid has is a typo: say so."""
    for key in keys:
        pairs = [(s.name or sl, t.name or tl) for sl, s in spec.strategies.items() for tl, t in spec.tasks.items()]
        if not any(_reaches(key, s, t) for s, t in pairs):
            kind = "strategy" if key.startswith("strategy.") else "task"
            names = sorted({p[0] if kind == "strategy" else p[1] for p in pairs})
            raise SpecError(f"{where}.{key}: no {kind} of the grid ({', '.join(names)}) has field "
                            f"{key.split('.')[1]!r}")


def _cells(grid: Grid, cli: dict[str, Any]) -> list[Cell]:
    from kinject.plugins.evidence.sweep import check_spec

    spec, path = grid.file, grid.path
    _unreached(f"{path}: settings", list(spec.settings), spec)
    _unreached(f"{path}: vary", list(spec.vary), spec)
    _unreached("--set", list(cli), spec)
    cells: list[Cell] = []
    used = [0] * len(spec.overrides)
    folders: dict[Path, str] = {}
    for task_label, task in spec.tasks.items():
        task_name = task.name or task_label
        for label, entry in spec.strategies.items():
            name = entry.name or label
            varied = [(k, v) for k, v in spec.vary.items() if _reaches(k, name, task_name)] + list(entry.vary.items())
            for combo in itertools.product(*(v.values for _, v in varied)):
                values = {k: value for (k, _), value in zip(varied, combo)}
                system = "-".join([label, *(f"{v.name if v.name is not None else k.split('.')[-1]}{_slug(value)}"
                                           for (k, v), value in zip(varied, combo))])
                for seed in spec.seeds:
                    where = {"strategy": label, "task": task_label, "seed": seed, "system": system, **values}
                    chosen = [i for i, o in enumerate(spec.overrides) if _matches(o.match, where)]
                    for i in chosen:
                        used[i] += 1
                    if any(spec.overrides[i].skip for i in chosen):
                        continue
                    data = {"strategy": {"name": name}, "task": {"name": task_name}, "seed": seed}
                    for key, value in (("model.name", spec.model), ("protocol", "quick" if spec.quick else None),
                                       ("training.limit", spec.limit or (64 if spec.quick else None)),
                                       ("data_dir", spec.data_dir), ("cache_dir", spec.cache_dir)):
                        if value is not None:
                            data = merge(data, key, value)
                    layers = [{k: v for k, v in spec.settings.items() if _reaches(k, name, task_name)},
                              task.settings, entry.settings, values,
                              *(spec.overrides[i].settings for i in chosen),
                              {k: v for k, v in cli.items() if _reaches(k, name, task_name)}]
                    for layer in layers:
                        for key, value in layer.items():
                            data = merge(data, key, value)
                    run_dir = grid.output / task_label / system / f"seed-{seed}"
                    cell = Cell(task_label, label, system, seed, values, data, run_dir, grid.state_dir)
                    if run_dir in folders:
                        raise SpecError(f"{path}: cells {folders[run_dir]} and {cell.id} share a folder; give the "
                                        "varied fields distinct short names (vary: {FIELD: {values: [...], name: X}})")
                    folders[run_dir] = cell.id
                    try:
                        check_spec(data)
                    except KinjectError as exc:
                        raise SpecError(f"{path}: cell {cell.id}: {exc}") from None
                    cells.append(cell)
    _share_probe(cells)
    for i, override in enumerate(spec.overrides):
        if not used[i]:
            known = set(DIMENSIONS) | set(spec.vary) | {k for e in spec.strategies.values() for k in e.vary}
            bad = [k for k in override.match if k not in known]
            reason = f"{bad[0]!r} is not a grid dimension ({', '.join(sorted(known))})" if bad else "matches no cell"
            raise SpecError(f"{path}: overrides.{i}.match: {reason}")
    return cells


def _share_probe(cells: list[Cell]) -> None:
    """Every arm of a task probed on the same facts: where a task's knowledge arms inject one graph (their first
    triples source), the cells that do not name ``hooks.knowledge-probe.source`` get that graph as theirs (the baseline,
    a corpus or a default-graph arm included). Several graphs: left alone (compare then says the probes differ)."""
    from kinject.api import registry

    def graph(cell: Cell) -> str | None:
        for source in cell.data.get("sources") or []:
            try:
                if isinstance(source, dict) and registry("sources").get(source.get("name", "")).kind == "triples":
                    return json.dumps(source, sort_keys=True)
            except KinjectError:
                return None
        return None

    for task in dict.fromkeys(c.task for c in cells):
        mine = [c for c in cells if c.task == task]
        graphs = {g for g in map(graph, mine) if g is not None}
        if len(graphs) != 1:
            continue
        shared = json.loads(graphs.pop())
        for cell in mine:
            if not ((cell.data.get("hooks") or {}).get("knowledge-probe") or {}).get("source"):
                cell.data = merge(cell.data, "hooks.knowledge-probe.source", shared)


def select(cells: list[Cell], patterns: list[str] | None) -> list[Cell]:
    """The cells whose id matches one of the glob ``patterns`` (all cells without any)."""
    import fnmatch

    if not patterns:
        return cells
    chosen = [c for c in cells if any(fnmatch.fnmatch(c.id, p) for p in patterns)]
    if not chosen:
        raise SpecError(f"--only {' '.join(patterns)}: matches no cell (cells look like {cells[0].id})")
    return chosen
