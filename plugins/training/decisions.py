"""The training library's automatic decisions: the hook plugin ``decisions`` (entry point group ``kinject.hooks``)
that answers the kernel's ``kinject_start_settings``, ``kinject_choose`` and ``kinject_default_rules``
(:mod:`kinject.decisions`). A plugin replaces it with its own ``@hookimpl(tryfirst=True)`` implementations; run.json's
``decided_by`` names the one used.

* **The settings a run starts from** (:mod:`.presets`): the strategy's protocol preset, then the task's recommended
  values, on fields the spec does not set (``protocol: kinject``, ``recommended: false``: none).
* **The choice** (:mod:`.choice`): settings chosen by cross-validation on a small train split; on unless ``choose:
  false`` or ``KINJECT_CHOOSE`` says off; skipped under the quick protocol unless ``choose: true``.
* **Rules** (:func:`default_rules`): a dev split too small to rank checkpoints (< :data:`MIN_DEV_UNITS` units) keeps
  the last weights. Two rules found on three tasks are off until checked on tasks they were not derived from
  (``hooks.decisions.head_rate``, ``.long_epochs``): a sequence classifier whose task recommends no head learning
  rate gets :data:`HEAD_RATE_FACTOR` x the encoder's (found on ChemProt, DDI and HoC); a large training split whose
  task recommends no epochs trains up to :data:`LONG_EPOCHS` epochs with early stopping on dev. Each applies only to a field nobody set (the user, the task's recommended settings, a protocol), and is
  recorded in run.json (``defaults``) with why; ``hooks.decisions.rules=false`` turns them all off.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from pydantic import Field

from kinject.api import KinjectError, PluginConfig, TaskGroup, hookimpl
from kinject.plugins.training.choice import FOLDS, SMALL_TRAIN, choose
from kinject.plugins.training.folds import kinject_fold  # noqa: F401 - this plugin draws the folds too
from kinject.plugins.training.presets import start_settings

log = logging.getLogger("kinject")
NAME = "decisions"  # the entry point's name: the spec's hooks.decisions
MIN_DEV_UNITS = 32  # fewer dev units than this cannot rank checkpoints: the last weights are kept
HEAD_RATE_FACTOR = 200  # a fresh head's learning rate: this many times the encoder's (5e-5 -> 1e-2)
MAX_HEAD_RATE = 2e-2
LONG_EPOCHS, LONG_PATIENCE = 10, 3  # a large training split without recommended epochs: up to 10, stop after 3 flat
ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class Config(PluginConfig):
    """The automatic decisions' settings (``hooks.decisions`` in a spec)."""

    folds: int = Field(FOLDS, ge=2, description="The k of the choice's k-fold cross-validation on a small train split "
                       "(each alternative costs k fine-tunes).")
    rules: bool = Field(True, description="Apply the default training rules to fields nobody set (a small dev split "
                        "keeps the last weights; head_rate and long_epochs below when turned on); false: none.")
    head_rate: bool = Field(False, description="A sequence classifier whose task recommends no head learning rate gets "
                            f"{HEAD_RATE_FACTOR}x the encoder's. Off by default: found on ChemProt, DDI and HoC, not "
                            "yet checked on tasks it was not derived from (docs/training.md).")
    long_epochs: bool = Field(False, description=f"A training split of >= {SMALL_TRAIN} examples whose task recommends "
                              f"no epochs trains up to {LONG_EPOCHS} epochs with patience {LONG_PATIENCE}. Off by "
                              "default: not yet checked on tasks it was not derived from (docs/training.md).")


def enabled(spec) -> bool:
    """Whether a run may choose settings by cross-validation: ``choose``, else ``KINJECT_CHOOSE`` (on when unset).
    ``KINJECT_CHOOSE`` is read strictly: 0/false/no/off or 1/true/yes/on; anything else is a one-line error."""
    value = os.environ.get("KINJECT_CHOOSE")
    if value is not None and value.strip().lower() not in ON + OFF:
        raise KinjectError(f"KINJECT_CHOOSE={value!r}: expected 0/false/no/off or 1/true/yes/on")
    if spec.choose is not None:
        return bool(spec.choose)
    return value is None or value.strip().lower() in ON


@hookimpl
def kinject_choose(spec, announce: Callable[[str], None], dry_run: bool):
    """The cross-validated choice (:func:`kinject.plugins.training.choice.choose`)."""
    import sys

    from kinject.api import PluginRef, validate_plugin_config

    settings = validate_plugin_config(sys.modules[__name__], PluginRef(name=NAME, **spec.hooks.get(NAME, {})),
                                      f"hooks.{NAME}")
    return choose(spec, announce, dry_run=dry_run, on=enabled(spec), folds=settings.folds)


@hookimpl
def kinject_start_settings(spec):
    """The protocol preset, then the task's recommended values (:func:`kinject.plugins.training.presets.start_settings`)."""
    return start_settings(spec)


@hookimpl
def kinject_default_rules(run) -> dict[str, str]:
    """The rules of the module docstring (:func:`default_rules`), unless ``hooks.decisions.rules`` is false."""
    options = run.hook_settings(NAME)
    return default_rules(run, options) if options.rules else {}


def counted(n: int, name: str) -> str:
    """``n`` units named ``name``: "1 query", "200 queries", "924 sentences"."""
    return f"{n} {name if n == 1 else name[:-1] + 'ies' if name.endswith('y') else name + 's'}"


def default_rules(run, options: Config | None = None) -> dict[str, str]:
    """Apply the rules of the module docstring to a prepared run's spec (fields the user, the task's recommended
    settings and a protocol left unset); ``options``: which rules are on (default: :class:`Config`'s); returns
    {field: why}."""
    options = options or Config()
    task, spec = run.task, run.spec
    if task is None or isinstance(task, TaskGroup):
        return {}
    training = spec.training
    taken = set(training.model_fields_set) | {k.split(".", 1)[1] for k in run.recommended if k.startswith("training.")}
    taken |= {k.split(".", 1)[1] for k in run.protocol if k.startswith("training.")}
    update: dict[str, Any] = {}
    why: dict[str, str] = {}
    if training.selection == "best" and "selection" not in taken and "dev" in task.eval_splits:
        dev = task.examples("dev", run.env)
        units, name = task.units(dev)
        what = counted(units, name) + (f" (its {len(dev)} examples, one unit per {name})" if units < len(dev) else "")
        if units < MIN_DEV_UNITS:
            update["selection"] = "last"
            why["training.selection"] = (f"last: the dev split has {what}, fewer than {MIN_DEV_UNITS} units: too few "
                                         "to rank checkpoints")
        else:  # announced with the other decisions once the run is prepared (a failing run says only its error)
            why["training.selection"] = f"best: checkpoints are ranked on the dev split's {what}"
    head = task.head(run.env)
    classifier = head.kind == "sequence" and head.problem_type != "regression" and not head.model
    if classifier and options.head_rate and training.head_learning_rate is None and "head_learning_rate" not in taken:
        rate = min(MAX_HEAD_RATE, HEAD_RATE_FACTOR * training.learning_rate)
        update["head_learning_rate"] = rate
        why["training.head_learning_rate"] = (f"{rate:g}: a fresh classification head learns at {HEAD_RATE_FACTOR}x the "
                                              "encoder's rate (the rule the recommended settings found on ChemProt, "
                                              "DDI and HoC)")
    if (options.long_epochs and "epochs" not in taken and "max_steps" not in taken and training.max_steps < 0 and training.patience is None
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
