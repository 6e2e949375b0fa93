"""``kinject sweep``: an optuna search over any spec field; every trial is a normal, cached kinject run.

The space file (YAML) maps spec field paths to a range or a list of choices::

    training.learning_rate: {low: 1.0e-5, high: 1.0e-3, log: true}   # float range (log scale)
    training.epochs: {low: 1, high: 4}                               # ints when low and high are ints
    training.warmup_ratio: {low: 0.0, high: 0.2, step: 0.05}
    strategy.variant: [hard, soft]                                   # choices

Every path and value is validated against the run spec and the plugins' configs before any trial runs.
The study lives in ``<output>/study.db`` (sqlite) unless ``--storage`` names an RDB URL that many machines
share; a second invocation continues the same study up to the requested number of finished trials, and a
trial that failed (e.g. an interrupted process) is retried once with the same parameters (its cached
stages and checkpoints are reused). Trials are pruned (optuna's MedianPruner) from the dev scores the
training stages announce every ``training.eval_steps`` steps (hook ``kinject_metrics_logged``,
``eval/<metric>``). The best trial's spec is written to ``<output>/best.yaml`` for ``kinject run --config``.

Small training splits (``--folds K``; automatic under :data:`AUTO_FOLDS_BELOW` examples): each trial is K runs on
the folds of the train split (:func:`fold_spec`), its value the mean of the folds' dev scores; test is never scored.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinject.api import KinjectError, SpecError, hookimpl


RANGE_KEYS = {"low", "high", "log", "step"}
AUTO_FOLDS, AUTO_FOLDS_BELOW = 5, 1000  # without --folds/--no-folds: 5-fold CV when train has < 1000 examples


@dataclass(frozen=True)
class Param:
    """One searched spec field: a numeric range (``low``..``high``, ``log``, ``step``) or ``choices``."""

    path: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple | None = None

    def suggest(self, trial) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.path, list(self.choices))
        if isinstance(self.low, int) and isinstance(self.high, int):
            return trial.suggest_int(self.path, self.low, self.high, step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.path, self.low, self.high, step=self.step, log=self.log)

    def probes(self) -> list[Any]:
        """Values that must each make a valid spec: the bounds, or every choice."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]


def _number(value: Any, where: str) -> float | int:
    if isinstance(value, bool) or value is None:
        raise SpecError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)  # PyYAML reads 1e-5 (no dot) as a string
    except (TypeError, ValueError):
        raise SpecError(f"{where}: expected a number, got {value!r}") from None


def parse_param(path: str, entry: Any, where: str) -> Param:
    """One space entry -> Param; SpecError naming ``where`` (file: field) on a malformed entry or range."""
    if isinstance(entry, list):
        if not entry:
            raise SpecError(f"{where}: empty list of choices")
        bad = [c for c in entry if not (c is None or isinstance(c, (bool, int, float, str)))]
        if bad:
            raise SpecError(f"{where}: choices must be numbers, strings, booleans or null, got {bad[0]!r}")
        return Param(path, choices=tuple(entry))
    if not isinstance(entry, dict) or not {"low", "high"} <= set(entry) or set(entry) - RANGE_KEYS:
        raise SpecError(f"{where}: expected {{low, high[, log, step]}} or a list of choices, got {entry!r}")
    low, high = _number(entry["low"], f"{where}.low"), _number(entry["high"], f"{where}.high")
    log, step = bool(entry.get("log", False)), entry.get("step")
    if low >= high:
        raise SpecError(f"{where}: low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise SpecError(f"{where}: a log-scale range needs low > 0 (got {low})")
    if step is not None:
        step = _number(step, f"{where}.step")
        if step <= 0 or log:
            raise SpecError(f"{where}: step must be > 0 and cannot be combined with log")
    if isinstance(low, int) and isinstance(high, int) and step is not None and not float(step).is_integer():
        low, high = float(low), float(high)
    return Param(path, low=low, high=high, log=log, step=step)


def load_space(path: Path) -> list[Param]:
    """The search space of a YAML file (SpecError ``file: field: what is wrong``)."""
    from kinject.spec_reading import load_yaml

    data = load_yaml(Path(path))
    if not data:
        raise SpecError(f"{path}: empty search space (map spec fields to ranges or lists of choices)")
    out = []
    for key, entry in data.items():
        if not isinstance(key, str) or not re.fullmatch(r"[\w-]+(\.[\w-]+)*", key):
            raise SpecError(f"{path}: {key!r} is not a spec field path (e.g. training.learning_rate)")
        out.append(parse_param(key, entry, f"{path}: {key}"))
    return out


def set_field(data: dict, path: str, value: Any) -> dict:
    """A copy of spec data with the dotted ``path`` set to ``value`` (numeric parts index lists)."""
    data = copy.deepcopy(data)
    node: Any = data
    parts = path.split(".")
    for part, following in zip(parts[:-1], parts[1:]):
        index: Any = int(part) if isinstance(node, list) else part
        if isinstance(node, dict) and not isinstance(node.get(part), (dict, list)):
            node[part] = [] if following.isdigit() else {}
        node = node[index]
    node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = value
    return data


def fold_spec(data: dict, index: int, folds: int) -> dict:
    """Spec data of fold ``index`` of a ``folds``-fold cross-validation of ``data`` on its train split.

    The fold is the run's "dev" split and the other folds its train split (``fold``, seed 0: every trial sees the
    same folds); only dev is scored (``training.eval_splits``), so test is never predicted. Fine-tuning keeps its
    last weights (``training.selection=last``): selecting the best epoch on the fold it is then scored on would
    report the best point of a noisy curve (more so for budgets with more evaluations), not what the setting gives.
    No knowledge probe: it does not enter the objective. The same settings as the automatic choice's fold runs
    (:func:`kinject.training.fold_run_settings`)."""
    from kinject.choice import fold_run_settings

    for path, value in fold_run_settings(index, folds).items():
        data = set_field(data, path, value)
    return data


def check_spec(data: dict):
    """Validate spec data as a run would (the spec and every plugin's config); returns the RunSpec."""
    from kinject.api import UnknownNameError, build_spec, registry, validate_plugin_config

    spec = build_spec(data)
    for kind, ref, where in [("tasks", spec.task, "task"), ("strategies", spec.strategy, "strategy"),
                             *(("sources", r, f"sources.{i}") for i, r in enumerate(spec.sources))]:
        try:
            cls = registry(kind).get(ref.name)
        except UnknownNameError as exc:
            raise type(exc)(f"{where}.name: {exc}") from None
        validate_plugin_config(cls, ref, where)
    return spec


def validate_space(space: list[Param], base: dict, where: Path) -> None:
    """Every searched path with every probe value must give a valid spec (errors name the space file)."""
    for param in space:
        for value in param.probes():
            try:
                check_spec(set_field(base, param.path, value))
            except (KinjectError, IndexError, TypeError) as exc:
                raise SpecError(f"{where}: {param.path} = {value!r}: {exc}") from None


def base_spec_data(strategy: str, task: str | None, config: Path | None, sets: list[str] | None,
                   fields: dict[str, Any]) -> dict:
    """The sweep's fixed part: ``--config`` YAML, strategy and task names, ``fields`` (e.g. ``model.name``,
    ``seed``), then ``--set`` overrides. No ``output``: each trial sets its own."""
    from kinject.api import apply_overrides
    from kinject.spec_reading import load_spec_file

    data = load_spec_file(config) if config else {}
    for key, name in (("strategy", strategy), ("task", task)):
        if name and (data.get(key) or {}).get("name") != name:
            data[key] = {"name": name}
    for path, value in fields.items():
        if value is not None:
            data = set_field(data, path, value)
    data = apply_overrides(data, sets or [])
    data.pop("output", None)
    if "task" not in data:
        raise SpecError("task: required; pass --task NAME or set task.name in --config")
    return data


class PruningReporter:
    """A hook plugin for one trial: reports ``eval/<metric>`` to optuna and prunes the trial when told.

    Steps of later training stages continue after the earlier stages' last step, so trials of one strategy
    are compared at the same points."""

    def __init__(self, trial, metric: str):
        self.trial, self.key = trial, f"eval/{metric}"
        self.stage: str | None = None
        self.offset = self.last = 0

    @hookimpl
    def kinject_metrics_logged(self, stage, metrics, step):
        import optuna

        if step is None or self.key not in metrics:
            return
        if stage != self.stage:
            self.stage, self.offset = stage, self.last
        at = self.offset + int(step)
        self.last = max(self.last, at)
        self.trial.report(float(metrics[self.key]), at)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"{self.key} = {metrics[self.key]:.4g} at step {at}")
