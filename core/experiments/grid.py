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
status file and a lock per cell: :mod:`kinject.experiments.grid_state`; submitit's logs) live in
``<output>/_grid/``. The file's schema and the cells: :mod:`~kinject.experiments.grid_file`; running cells:
:mod:`~kinject.experiments.grid_exec`; the leaderboard: :mod:`~kinject.experiments.grid_board`.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kinject.api import KinjectError, SpecError


from kinject.experiments.grid_file import DIMENSIONS, LABEL, MAX_CELLS, PATH, STATE_DIR, Cell, Grid, GridFile

#: a grid file's bytes at most: 10,000 cells need far fewer (a list of 10,000 seeds is 60 KB); more is a generated
#: list gone wrong, refused before it is parsed
GRID_FILE_BYTES = 2**20


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
    from kinject.api import format_validation_error, registry
    from kinject.spec_reading import load_yaml

    path = Path(path)
    _check_file_size(path)
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


def _check_file_size(path: Path) -> None:
    """One line, before the file is parsed, when it is not a regular file or holds more than GRID_FILE_BYTES: the
    work of reading it is bounded before any of it is expanded."""
    import os

    from kinject.records import file_kind

    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise SpecError(f"{path}: config file not found") from None
    kind = file_kind(status.st_mode)
    if kind is not None:
        raise SpecError(f"{path}: {kind}, not a regular file; write the grid to a file and name that")
    if status.st_size > GRID_FILE_BYTES:
        raise SpecError(f"{path}: {status.st_size:,} bytes, more than the {GRID_FILE_BYTES:,} a grid file of "
                        f"{MAX_CELLS:,} cells at most needs; split it into several grid files (seeds: {{start: S, "
                        "count: N}} names many seeds in one line)")


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
    from kinject.experiments.sweep import check_spec

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
