"""Defaults that learn on a new task: settings a run did not set, chosen from the data rather than fixed.

* **Cross-validation on a small training split** (:func:`choose`): when the train split has fewer than
  :data:`SMALL_TRAIN` examples, a run chooses among the task's declared alternatives (``Task.alternatives``: e.g. a
  pair task's cross- or bi-encoder, a classifier's head learning rate) by :data:`FOLDS`-fold cross-validation on the
  train split - plain fine-tuning of each alternative on the other folds, scored on the held-out fold with the task's
  selection metric in its direction; never the dev or test split. Fold runs are ordinary cached runs; the choice is
  cached too. Announced in one line, recorded in run.json (``chosen``); off with ``--set choose=false``.
* **Rules** (:func:`default_rules`, applied in ``prepare``): a dev split too small to rank checkpoints
  (< :data:`MIN_DEV_UNITS` units) keeps the last weights instead of the best dev score; a sequence classifier whose
  task recommends no head learning rate gets one (:data:`HEAD_RATE_FACTOR` x the encoder's, the rule the
  recommended settings found on ChemProt, DDI and HoC); a large training split whose task recommends no epochs trains
  up to :data:`LONG_EPOCHS` epochs with early stopping on dev. Each is recorded in run.json (``defaults``) with why.
"""

from __future__ import annotations


import hashlib
import itertools
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("kinject")

SMALL_TRAIN = 1000  # below this many training examples a run chooses among the task's alternatives by CV
FOLDS = 5  # the k of that cross-validation (docs/evidence.md: 5-fold CV on train for small sets)
MIN_DEV_UNITS = 32  # fewer dev units than this cannot rank checkpoints: the last weights are kept
HEAD_RATE_FACTOR = 200  # a fresh head's learning rate: this many times the encoder's (5e-5 -> 1e-2)
MAX_HEAD_RATE = 2e-2
LONG_EPOCHS, LONG_PATIENCE = 10, 3  # a large training split without recommended epochs: up to 10, stop after 3 flat


def enabled(spec) -> bool:
    """Whether the run may choose settings by cross-validation (``choose``; unset: on, unless KINJECT_CHOOSE=0)."""
    if spec.choose is not None:
        return bool(spec.choose)
    return os.environ.get("KINJECT_CHOOSE", "1") not in ("0", "false", "no")


def _units(examples: list[dict]) -> int:
    return len({str(ex.get("group", i)) if isinstance(ex, dict) else str(i) for i, ex in enumerate(examples)})


def _set_fields(spec) -> set[str]:
    """The dotted fields the user set (task options, training and model fields): alternatives never override them."""
    fields = {f"task.{k}" for k in (spec.task.options() if spec.task is not None else {})}
    fields |= {f"training.{k}" for k in spec.training.model_fields_set}
    fields |= {f"model.{k}" for k in spec.model.model_fields_set}
    return fields


def choose(spec, announce: Callable[[str], None] = log.info):
    """``spec`` with the task's alternatives chosen by cross-validation on a small train split, and what was chosen
    (None when nothing was: not a small split, no alternatives, or turned off)."""
    from kinject.engine import execute
    from kinject.preparation import prepare
    from kinject.interfaces import TaskGroup

    if not enabled(spec) or spec.task is None or spec.fold:
        return spec, None
    probe = prepare(spec.model_copy(update={"choose": False}))
    task = probe.task
    if task is None or isinstance(task, TaskGroup) or "dev" not in task.eval_splits:
        return spec, None
    train = task.examples(task.train_split, probe.env)
    if len(train) >= SMALL_TRAIN:
        return spec, None
    taken = _set_fields(spec)
    options = {k: v for k, v in task.alternatives(probe.env, probe.spec).items() if k not in taken and len(v) > 1}
    if not options:
        return spec, None
    folds = min(FOLDS, _units(train))
    if folds < 2:
        return spec, None
    metric = task.selection_metric()
    better = task.greater_is_better(metric)
    combos = [dict(zip(options, values)) for values in itertools.product(*options.values())]
    base = spec.model_dump(mode="json", exclude={"output", "choose"})
    key = hashlib.sha256(json.dumps([base, combos, folds, metric], sort_keys=True, default=str).encode()).hexdigest()
    record_file = Path(probe.env.cache_dir) / "choices" / f"{key[:24]}.json"
    if record_file.is_file():
        record = json.loads(record_file.read_text())
    else:
        announce(f"{task.name}: the train split has {len(train)} examples (< {SMALL_TRAIN}): choosing "
                 f"{', '.join(options)} among {len(combos)} alternative(s) by {folds}-fold cross-validation on it "
                 f"({metric}; dev and test untouched; --set choose=false to skip)")
        scores = []
        with tempfile.TemporaryDirectory(prefix="kinject-choose-") as scratch, _quiet():
            for n, combo in enumerate(combos):
                values = []
                for i in range(folds):
                    data = apply(spec.model_dump(mode="json", exclude={"output"}), combo)
                    data.update(strategy={"name": "finetune"}, fold=f"{i}/{folds}/0", choose=False,
                                hooks={**data.get("hooks", {}), "knowledge-probe": {"enabled": False}})
                    data["training"] = {**data.get("training", {}), "eval_splits": ["dev"]}
                    fold_run = prepare(type(spec).model_validate(data))
                    metrics = execute(fold_run, Path(scratch) / f"{n}-{i}")
                    values.append(float(metrics["dev"][metric]))
                scores.append(sum(values) / len(values))
                announce(f"  {_shown(combo)}: {metric} {scores[-1]:.4f} (mean of {folds} folds)")
        best = max(range(len(combos)), key=lambda j: scores[j] if better else -scores[j])
        record = {"chosen": combos[best], "by": f"{folds}-fold cross-validation on the train split ({len(train)} "
                                                 f"examples), {metric}", "scores": [
            {"settings": c, metric: s} for c, s in zip(combos, scores)]}
        record_file.parent.mkdir(parents=True, exist_ok=True)
        from kinject.files import atomic_write_text

        atomic_write_text(record_file, json.dumps(record, indent=2, default=str))
    announce(f"{task.name}: chose {_shown(record['chosen'])} ({record['by']})")
    chosen = type(spec).model_validate(apply(spec.model_dump(mode="json"), record["chosen"]))
    return _keep_fields_set(chosen, spec, record["chosen"]), record


class _quiet:
    """Fold runs without their stage lines and progress bars (the choice announces one line per alternative)."""

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


def _shown(combo: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in combo.items())


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


def default_rules(run) -> dict[str, str]:
    """Apply the rules of the module docstring to a prepared run's spec (fields the user and the task's recommended
    settings left unset); returns {field: why} (recorded in run.json ``defaults``)."""
    from kinject.interfaces import TaskGroup

    task, spec = run.task, run.spec
    if task is None or isinstance(task, TaskGroup):
        return {}
    training = spec.training
    taken = set(training.model_fields_set) | {k.split(".", 1)[1] for k in run.recommended if k.startswith("training.")}
    taken |= {k.split(".", 1)[1] for k in run.protocol if k.startswith("training.")}
    update: dict[str, Any] = {}
    why: dict[str, str] = {}
    if training.selection == "best" and "selection" not in taken and "dev" in task.eval_splits:
        units = _units(task.examples("dev", run.env))
        if units < MIN_DEV_UNITS:
            update["selection"] = "last"
            why["training.selection"] = (f"last: the dev split has {units} units (< {MIN_DEV_UNITS}), too few to rank "
                                         "checkpoints")
    head = task.head(run.env)
    classifier = head.kind == "sequence" and head.problem_type != "regression" and not head.model
    if classifier and training.head_learning_rate is None and "head_learning_rate" not in taken:
        rate = min(MAX_HEAD_RATE, HEAD_RATE_FACTOR * training.learning_rate)
        update["head_learning_rate"] = rate
        why["training.head_learning_rate"] = (f"{rate:g}: a fresh classification head learns at {HEAD_RATE_FACTOR}x the "
                                              "encoder's rate (the rule the recommended settings found on ChemProt, "
                                              "DDI and HoC)")
    if ("epochs" not in taken and "max_steps" not in taken and training.max_steps < 0 and training.patience is None
            and update.get("selection", training.selection) == "best"
            and len(task.examples(task.train_split, run.env)) >= SMALL_TRAIN):
        update.update(epochs=LONG_EPOCHS, patience=LONG_PATIENCE)
        why["training.epochs"] = (f"{LONG_EPOCHS} with patience {LONG_PATIENCE}: a large training split trains until dev "
                                  "stops improving (the best dev epoch is kept)")
    if update:
        new = type(training).model_validate({**training.model_dump(), **update})
        new.__pydantic_fields_set__ = set(training.model_fields_set)
        run.spec = spec.model_copy(update={"training": new})
        run.env.limit = run.spec.training.limit
    return why
