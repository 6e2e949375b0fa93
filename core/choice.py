"""The cross-validated choice on a small train split: when the train split has fewer than :data:`SMALL_TRAIN`
examples, a run chooses among its task's alternatives (``Task.alternatives``: a pair task's cross- or bi-encoder, a
classifier's head learning rate) by :data:`FOLDS`-fold cross-validation on the train split, before it is prepared.

* **Fold runs are plain fine-tunes** (:func:`fold_base`): the run's task, model and task fine-tuning settings (the
  user's, and those the run's protocol set), with no knowledge source and no strategy setting, whatever the run's
  strategy; each trains on k - 1 folds and is scored on the held-out fold (its dev split) with the task's selection
  metric, keeping its last weights (:func:`fold_run_settings`: never selecting on the fold it is scored on). Dev and
  test are never read. Folds are grouped by unit and stratified by label (:func:`kinject.splits.fold_of`).
* **Skipped, announced**, when the split cannot be shared out (:func:`fold_problem`: fewer units than folds, a
  label rarer than the folds) and under the quick protocol unless ``choose: true``.
* **A tie keeps what the run would use without the choice.** The record (run.json ``chosen``) holds the choice, how,
  every alternative's score, the number of fold runs and their seconds; it is cached (``<cache>/choices/``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from kinject.splits import unit_key

log = logging.getLogger("kinject")

SMALL_TRAIN = 1000  # below this many training examples a run chooses among the task's alternatives by CV
FOLDS = 5  # the k of that cross-validation (docs/evidence.md: 5-fold CV on train for small sets)
TIE = 1e-9  # mean fold scores closer than this are a tie
VERSION = "2"  # of how fold runs are built and folds drawn: a cached choice of another version is not reused
#: what an alternative's None means, shown instead of "None" ({field: text from the run's training settings})
UNSET_MEANS: dict[str, Callable[[Any], str]] = {
    "training.head_learning_rate": lambda spec: f"{spec.training.learning_rate:g} (the encoder's rate)"}


def fold_run_settings(index: int, folds: int) -> dict[str, Any]:
    """Dotted spec fields of fold ``index`` of a ``folds``-fold cross-validation on the train split: the fold is
    the run's dev split (only dev is scored: test is never predicted); fine-tuning keeps its last weights
    (selecting the best epoch on the fold it is then scored on would report the top of a noisy curve); no knowledge
    probe. The choice and ``kinject sweep --folds`` both use these."""
    return {"fold": f"{index}/{folds}", "training.eval_splits": ["dev"], "training.selection": "last",
            "training.select_every": None, "training.patience": None, "hooks.knowledge-probe.enabled": False}


def fold_problem(examples: list, folds: int) -> str | None:
    """Why ``examples`` cannot be shared out into ``folds`` folds that each train on every label (None: they can):
    fewer units than folds, or a label with fewer examples than folds."""
    units = len({unit_key(ex, i) for i, ex in enumerate(examples)})
    if units < folds:
        return f"{len(examples)} example(s) in {units} unit(s), fewer than {folds} folds"
    labels = [ex.get("label") if isinstance(ex, dict) else None for ex in examples]
    if labels and all(isinstance(label, str) for label in labels):  # single labels: folds are stratified by them
        label, count = min(Counter(labels).items(), key=lambda item: (item[1], item[0]))
        if count < folds:
            return f"label {label!r} has {count} example(s), fewer than {folds} folds"
    return None


def apply(data: dict, combo: dict[str, Any]) -> dict:
    """Spec data with dotted ``combo`` fields set."""
    data = json.loads(json.dumps(data, default=str))
    for key, value in combo.items():
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return data


def fold_base(spec, probe) -> dict:
    """Spec data of the plain fine-tune every fold run is: the settings the user gave (no strategy, knowledge
    source, knowledge dose or protocol) plus the model and training fields the run's protocol set."""
    data = spec.model_dump(mode="json", exclude_unset=True, exclude={
        "output", "strategy", "sources", "knowledge", "protocol", "choose", "fold"})
    protocol = {k: v for k, v in probe.protocol.items() if k.startswith(("training.", "model."))}
    return apply({**data, "strategy": {"name": "finetune"}, "choose": False}, protocol)


def _current(probe, key: str) -> Any:
    """The value the prepared run (without the choice) has for dotted ``key``."""
    section, _, name = key.partition(".")
    holder = {"task": getattr(probe.task, "config", None), "training": probe.spec.training, "model": probe.spec.model,
              "strategy": getattr(probe.strategy, "config", None)}.get(section)
    return getattr(holder, name, None)


def shown(combo: dict, spec) -> str:
    """``field=value, ...`` with an unset value as what it means (never "None")."""
    return ", ".join(f"{k}={UNSET_MEANS[k](spec) if k in UNSET_MEANS else 'the default'}" if v is None else f"{k}={v}"
                     for k, v in combo.items())


def _taken(spec, probe) -> set[str]:
    """The dotted fields the user or the run's protocol set: alternatives never override them."""
    fields = {f"task.{k}" for k in (spec.task.options() if spec.task is not None else {})}
    fields |= {f"training.{k}" for k in spec.training.model_fields_set}
    fields |= {f"model.{k}" for k in spec.model.model_fields_set}
    return fields | set(probe.protocol)


def choose(spec, announce: Callable[[str], None], dry_run: bool = False, on: bool = True, folds: int = FOLDS):
    """``(spec, record)``: ``spec`` with the task's alternatives chosen by cross-validation on a small train split,
    and the record (None when there was nothing to choose: a large split, no alternatives, turned off).
    ``dry_run``: run no fold; apply a cached choice, else say how many fold runs the choice will take."""
    from kinject.interfaces import TaskGroup
    from kinject.preparation import prepare

    if not on or spec.task is None or spec.fold:
        return spec, None
    probe = prepare(spec.model_copy(update={"choose": False}))  # every user error before any fold run
    task = probe.task
    if task is None or isinstance(task, TaskGroup) or "dev" not in task.eval_splits:
        return spec, None
    train = task.examples(task.train_split, probe.env)
    if len(train) >= SMALL_TRAIN:
        return spec, None
    taken = _taken(spec, probe)
    options = {k: v for k, v in task.alternatives(probe.env, probe.spec).items() if k not in taken and len(v) > 1}
    if not options:
        return spec, None
    combos = [dict(zip(options, values)) for values in itertools.product(*options.values())]
    default = {k: _current(probe, k) for k in options}
    what = f"{task.name}: the train split has {len(train)} examples (< {SMALL_TRAIN})"
    keeps = f"the run keeps {shown(default, probe.spec)}"
    problem = fold_problem(train, folds)
    if problem is None and spec.protocol == "quick" and spec.choose is None:
        problem = (f"a quick try (--quick) skips it (--set choose=true runs it: {len(combos) * folds} fold runs "
                   "first)")
    if problem is not None:
        announce(f"{what}: the choice of {', '.join(options)} is skipped: {problem}; {keeps}")
        return spec, {"chosen": {}, "skipped": problem, "fold_runs": 0, "seconds": 0.0}
    metric = task.selection_metric()
    base = fold_base(spec, probe)
    key = hashlib.sha256(json.dumps([VERSION, base, combos, folds, metric, len(train)], sort_keys=True,
                                    default=str).encode()).hexdigest()
    record_file = Path(probe.env.cache_dir) / "choices" / f"{key[:24]}.json"
    runs = len(combos) * folds
    record = cached_record(record_file, combos, runs, metric)
    if record is not None:
        record = {**record, "cached": True}
    elif dry_run:
        announce(f"{what}: {runs} fold runs of the choice first (choosing {', '.join(options)} among "
                 f"{len(combos)} alternatives by {folds}-fold cross-validation; the stages below are those of "
                 f"{keeps.removeprefix('the run keeps ')}, which the choice may change)")
        return spec, {"chosen": {}, "planned": True, "fold_runs": runs, "seconds": None, "key": key[:24],
                      "fold_spec": apply(apply(base, combos[0]), fold_run_settings(0, folds))}
    else:
        announce(f"{what}: choosing {', '.join(options)} among {len(combos)} alternatives by {folds}-fold "
                 f"cross-validation on it: {runs} fold runs of a plain fine-tune first ({metric}; dev and test "
                 "untouched; --set choose=false to skip)")
        record = _cross_validate(base, combos, folds, metric, task.greater_is_better(metric), default, probe,
                                 announce, record_file)
        record["by"] = f"{folds}-fold cross-validation on the train split ({len(train)} examples), {metric}"
        from kinject.files import atomic_write_text, discard

        if record_file.is_dir() and not record_file.is_symlink():  # a damaged record a file cannot replace
            discard(record_file)
        atomic_write_text(record_file, json.dumps(record, indent=2, default=str))
    tie = " (a tie: the run keeps what it would use without the choice)" if record.get("tie") else ""
    cost = f"{record['fold_runs']} fold runs, {record['seconds']:.0f} s" + (", cached" if record.get("cached") else "")
    announce(f"{task.name}: chose {shown(record['chosen'], probe.spec)}{tie} ({record['by']}; {cost})")
    chosen = type(spec).model_validate(apply(spec.model_dump(mode="json"), record["chosen"]))
    return _keep_fields_set(chosen, spec, record["chosen"]), record


class ChoiceRecord(BaseModel):
    """A cached choice (``<cache>/choices/<key>.json``) as :func:`choose` writes it."""

    model_config = ConfigDict(extra="allow")
    chosen: dict[str, Any]
    tie: StrictBool = False
    fold_runs: StrictInt = Field(ge=0)
    seconds: StrictFloat = Field(ge=0, allow_inf_nan=False)
    by: StrictStr
    scores: list[dict[str, Any]]


def cached_record(path: Path, combos: list[dict], runs: int, metric: str) -> dict | None:
    """The cached choice at ``path`` when it is whole and one this run could have made (its choice one of
    ``combos``, the alternatives the run computed; its ``runs`` fold runs; a finite score per alternative); None when
    there is none. A damaged or foreign record is one warning naming the file, then ignored (the choice is made
    again and the record rewritten): a cache is never applied unchecked."""
    from kinject.errors import DataError, DataMissingError
    from kinject.records import read_record

    combos = json.loads(json.dumps(combos, default=str))  # as the record holds them
    try:
        record = read_record(path, ChoiceRecord)
        scores = [(s.get("settings"), s.get(metric)) for s in record["scores"]]
        if record["chosen"] not in combos:
            raise DataError(f"chosen {record['chosen']} is none of the alternatives {combos}", path)
        if record["fold_runs"] != runs or [settings for settings, _ in scores] != combos or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for _, v in scores):
            raise DataError(f"its fold runs or {metric} scores are not those of these {len(combos)} alternatives",
                            path)
    except DataMissingError:
        return None
    except DataError as exc:
        log.warning("the cached choice %s; ignored: choosing again", exc)
        return None
    return record


def _cross_validate(base: dict, combos: list[dict], folds: int, metric: str, better: bool, default: dict, probe,
                    announce: Callable[[str], None], record_file: Path) -> dict:
    """Every alternative's mean held-out score over the folds (one progress line per fold run); the best wins, a
    tie keeps ``default``. Fold runs write their folders in the cache beside ``record_file`` (never ``$TMPDIR``: a
    run folder holds a copy of its model), removed after, or with the next choice if this process dies."""
    from kinject.engine import execute
    from kinject.files import remove_debris, sibling
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    scores, started = [], time.perf_counter()
    record_file.parent.mkdir(parents=True, exist_ok=True)
    remove_debris(record_file.parent)  # the fold folders of choices whose process died
    scratch = sibling(record_file, "tmp")
    try:
        for n, combo in enumerate(combos):
            values = []
            for i in range(folds):
                announce(f"  choice: fold {i + 1}/{folds} of alternative {n + 1}/{len(combos)} "
                         f"({shown(combo, probe.spec)})")
                fold_run = prepare(build_spec(apply(apply(base, combo), fold_run_settings(i, folds))))
                with _quiet():
                    metrics = execute(fold_run, scratch / f"{n}-{i}")
                values.append(float(metrics["dev"][metric]))
            scores.append(sum(values) / len(values))
            announce(f"  {shown(combo, probe.spec)}: {metric} {scores[-1]:.4f} (mean of {folds} folds)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    top = max(scores) if better else min(scores)
    tied = [j for j, s in enumerate(scores) if abs(s - top) <= TIE]
    best = next((j for j in tied if combos[j] == default), tied[0])
    return {"chosen": combos[best], "tie": len(tied) > 1, "fold_runs": len(combos) * folds,
            "seconds": round(time.perf_counter() - started, 1),
            "scores": [{"settings": c, metric: s} for c, s in zip(combos, scores)]}


class _quiet:
    """A fold run without its stage lines and progress bars (the choice says one line per fold run)."""

    def __enter__(self):
        self.level, self.progress = log.level, os.environ.get("KINJECT_PROGRESS")
        log.setLevel(logging.WARNING)
        os.environ["KINJECT_PROGRESS"] = "0"
        return self

    def __exit__(self, *exc):
        log.setLevel(self.level)
        if self.progress is None:
            os.environ.pop("KINJECT_PROGRESS", None)
        else:
            os.environ["KINJECT_PROGRESS"] = self.progress
        return False


def _keep_fields_set(chosen, spec, combo: dict):
    """A re-validated spec keeps which fields the user set (the task's recommended settings still apply to the
    others), plus the chosen ones."""
    for section in ("training", "model"):
        current = getattr(chosen, section)
        current.__pydantic_fields_set__ = set(getattr(spec, section).model_fields_set) | {
            k.split(".", 1)[1] for k in combo if k.startswith(f"{section}.")}
    chosen.__pydantic_fields_set__ = set(spec.model_fields_set) | {"choose"}
    return chosen
