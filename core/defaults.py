"""The decisions kinject takes for its user, each a plain function, in the order a run takes them.

Every entry point (``kinject run``, ``kinject.run``, a grid cell, a sweep trial) calls :func:`prepare_runs`, so a
run and its recorded command are the same experiment. Each decision applies only to fields the spec leaves unset,
is announced, is recorded in run.json (``protocol``, ``recommended``, ``defaults``, ``chosen``, ``knowledge.exclude``;
``decided_by`` names the function) and can be turned off:

1. :func:`start_settings` (in :func:`kinject.preparation.prepare`): the strategy's ``protocol`` preset
   (``protocol: kinject``: none), the task's ``recommended`` values (``recommended: false``: none), the precision
   (``training.bf16``: bfloat16 where the device computes it natively).
2. :func:`choose`: a small train split's alternatives chosen by cross-validation (:mod:`kinject.choice`;
   ``choose: false`` or ``KINJECT_CHOOSE=0``: off).
3. :func:`default_exclude`: the facts of the task's dev and test items held out of every knowledge source
   (``knowledge.exclude: []``: none).
4. :func:`default_rules`: the training rules for a prepared run (``defaults.rules: false``: none).

How cross-validation folds are drawn is :func:`kinject.splits.fold_of`.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable

from kinject.errors import KinjectError, SpecError, UnknownNameError
from kinject.registry import registry

if TYPE_CHECKING:  # pragma: no cover
    from kinject.context import RunContext
    from kinject.spec import RunSpec

log = logging.getLogger("kinject")

#: ``--quick`` for a strategy without a quick protocol of its own
QUICK: dict[str, dict[str, Any]] = {"training": {"max_steps": 30}}
#: what every quick protocol adds unless it sets it: the last weights, so no dev pass after each (tiny) epoch
#: (a 30-step quick try on 64 CAPR queries scored dev 4 times; docs/benchmarks.md, "--quick with minilm")
QUICK_TRAINING: dict[str, Any] = {"selection": "last"}
MIN_DEV_UNITS = 32  # fewer dev units than this cannot rank checkpoints: the last weights are kept
HEAD_RATE_FACTOR = 200  # a fresh head's learning rate: this many times the encoder's (5e-5 -> 1e-2)
MAX_HEAD_RATE = 2e-2
LONG_EPOCHS, LONG_PATIENCE = 10, 3  # a large training split without recommended epochs: up to 10, stop after 3 flat
ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


#: how ``decided_by[field]`` starts for a setting a hook plugin decided: ``hook plugin NAME: module.function``
HOOK_PLUGIN = "hook plugin "


def by(function: Callable) -> str:
    """How run.json's ``decided_by`` names a decision: its function."""
    return f"{function.__module__}.{function.__qualname__}"


# -- 1. the settings a run starts from ------------------------------------------------------------------------ #
def apply_preset(spec, preset: dict[str, dict[str, Any]], count_as_set: bool) -> tuple[Any, dict[str, Any]]:
    """``spec`` with a preset (``{"strategy"|"model"|"training": {field: value}}``) applied to every field the spec
    does not set; returns (spec, {field path: value applied}). The one loop behind a task's ``recommended`` values
    (``count_as_set=False``: a protocol or the user still overrides them) and a strategy's protocols (``True``: the
    applied fields count as set, so a task's recommended values do not override them)."""
    from kinject.spec import PluginRef

    applied: dict[str, Any] = {}
    update: dict[str, Any] = {}
    for section in ("model", "training"):
        current = getattr(spec, section)
        values = {k: v for k, v in preset.get(section, {}).items() if k not in current.model_fields_set}
        if values:
            update[section] = type(current).model_validate({**current.model_dump(), **values})
            update[section].__pydantic_fields_set__ = set(current.model_fields_set) | (set(values) if count_as_set
                                                                                        else set())
            applied.update({f"{section}.{k}": v for k, v in values.items()})
    options = spec.strategy.options()
    values = {k: v for k, v in preset.get("strategy", {}).items() if k not in options}
    if values:
        update["strategy"] = PluginRef(name=spec.strategy.name, **options, **values)
        applied.update({f"strategy.{k}": v for k, v in values.items()})
    return (spec.model_copy(update=update) if update else spec), applied


def apply_recommended(spec, recommended: dict[str, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    """``spec`` with the task's recommended values for the fields the user did not set (none when the spec turns
    ``recommended`` off)."""
    return apply_preset(spec, recommended, count_as_set=False) if spec.recommended and recommended else (spec, {})


def apply_protocol(spec, presets: dict[str, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    """``spec`` with a strategy's protocol preset applied; the applied fields count as set."""
    return apply_preset(spec, presets, count_as_set=True)


def check_protocol(cls: type, name: str, presets: dict) -> None:
    """A protocol preset names real fields: sections strategy / model / training, each key a field of the strategy's
    config, ModelSpec or TrainingSpec (a dotted ``--set``-style key, or a typo, would silently do nothing)."""
    from kinject.spec import ModelSpec, TrainingSpec

    fields = {"strategy": cls.Config.model_fields, "model": ModelSpec.model_fields,
              "training": TrainingSpec.model_fields}
    for section, values in presets.items():
        where = f"strategy {cls.name or cls.__name__!r}'s protocol {name!r}"
        if section not in fields:
            raise SpecError(f"protocol: {where} has a section {section!r}; a protocol sets strategy, model and "
                            "training fields ({section: {field: value}})")
        unknown = [k for k in (values or {}) if k not in fields[section]]
        if unknown:
            raise SpecError(f"protocol: {where} sets {section}.{unknown[0]}, which is no field of {section} "
                            f"(fields: {', '.join(sorted(fields[section]))})")


def with_protocol(spec) -> tuple[Any, dict[str, Any]]:
    """The spec with its strategy's ``protocol`` preset applied (``kinject``: none)."""
    if spec.protocol == "kinject":
        return spec, {}
    try:
        cls = registry("strategies").get(spec.strategy.name)
    except UnknownNameError as exc:
        raise type(exc)(f"strategy.name: {exc}") from None
    presets = cls.protocols.get(spec.protocol)
    if presets is None and spec.protocol == "quick":  # --quick works for a strategy that declares no quick protocol
        log.info("protocol quick: strategy %r declares none; its stages keep their own budgets, fine-tuning gets "
                 "training.max_steps=30", spec.strategy.name)
        presets = QUICK
    if presets is None:
        known = ", ".join(["kinject", *cls.protocols])
        raise SpecError(f"protocol: strategy {spec.strategy.name!r} has no {spec.protocol!r} protocol (has: {known})")
    if spec.protocol == "quick":
        presets = {**presets, "training": {**presets.get("training", {}),
                                           **{k: v for k, v in QUICK_TRAINING.items() if k not in presets.get("training", {})}}}
    check_protocol(cls, spec.protocol, presets)
    return apply_protocol(spec, presets)


def native_bf16() -> bool:
    """Whether this machine computes bfloat16 natively: a CUDA GPU that supports it, else a CPU with the
    AVX512-BF16 or AMX-BF16 instructions (Linux: /proc/cpuinfo) that oneDNN may use (``ONEDNN_MAX_CPU_ISA`` capped
    below them: not). Elsewhere bf16 autocast is slower than float32. A torch built without a GPU backend is not
    imported for it (a typo's error comes before torch loads)."""
    from kinject.machine import cpu_info

    if _gpu_build():
        import torch

        if torch.cuda.is_available():
            return bool(torch.cuda.is_bf16_supported())
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap and cap not in ("ALL", "DEFAULT") and not any(part in cap for part in ("BF16", "AMX", "AVX10")):
        return False
    return bool(cpu_info()[1] & {"avx512_bf16", "amx_bf16"})


def _gpu_build() -> bool:
    """Whether the installed torch can see a GPU at all (its ``torch/version.py`` names a CUDA or ROCm build; read
    as text, so torch is not imported). True when torch is imported already or the file does not say."""
    import importlib.util
    import re
    import sys
    from pathlib import Path

    if "torch" in sys.modules:
        return True
    spec = importlib.util.find_spec("torch")
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except (AttributeError, TypeError, OSError):
        return True
    found = dict(re.findall(r"^(cuda|hip)(?::[^=]*)?=\s*(.+?)\s*$", text, re.MULTILINE))
    return set(found) != {"cuda", "hip"} or any(value != "None" for value in found.values())


def with_precision(spec) -> tuple[Any, dict[str, str]]:
    """``training.bf16`` decided when unset: bfloat16 autocast where this device computes it natively
    (:func:`native_bf16`: ~1.2-1.5x training on such a CPU, docs/benchmarks.md), float32 elsewhere; stage keys hold
    the value. Returns (spec, {field: why}): a why only when it turns bfloat16 on, the departure from float32 a user
    should hear about."""
    if spec.training.bf16 is not None:
        return spec, {}
    on = native_bf16()
    training = spec.training.model_copy(update={"bf16": on})
    training.__pydantic_fields_set__ = set(spec.training.model_fields_set)
    spec = spec.model_copy(update={"training": training})
    if not on:
        return spec, {}
    from kinject.machine import BF16_FLAGS, cpu_info

    flags = sorted(cpu_info()[1] & set(BF16_FLAGS))
    where = f"this CPU computes bfloat16 natively ({', '.join(flags)})"
    if _gpu_build():
        import torch

        if torch.cuda.is_available():
            where = "this GPU computes bfloat16 natively"
    return spec, {"training.bf16": f"true: {where}: bfloat16 autocast in training and evaluation, task heads in "
                                   "float32"}


def start_settings(spec) -> tuple[Any, dict[str, dict[str, Any]]]:
    """(spec, {"protocol": applied, "recommended": applied, "defaults": {field: why}}): the protocol first, then the
    task's recommended values (none for a task group: each member applies its own; an unknown task is left to
    ``prepare``'s lookup to report), then the precision (:func:`with_precision`)."""
    from kinject.interfaces import TaskGroup

    spec, protocol = with_protocol(spec)
    recommended: dict[str, Any] = {}
    if spec.task is not None:
        try:
            task = registry("tasks").get(spec.task.name)
        except UnknownNameError:
            task = None
        if task is not None and not issubclass(task, TaskGroup):
            spec, recommended = apply_recommended(spec, task.recommended)
    spec, defaults = with_precision(spec)
    return spec, {"protocol": protocol, "recommended": recommended, "defaults": defaults}


# -- 2. the choice ---------------------------------------------------------------------------------------------- #
def choice_enabled(spec) -> bool:
    """Whether a run may choose settings by cross-validation: ``choose``, else ``KINJECT_CHOOSE`` (on when unset).
    ``KINJECT_CHOOSE`` is read strictly: 0/false/no/off or 1/true/yes/on; anything else is a one-line error."""
    value = os.environ.get("KINJECT_CHOOSE")
    if value is not None and value.strip().lower() not in ON + OFF:
        raise KinjectError(f"KINJECT_CHOOSE={value!r}: expected 0/false/no/off or 1/true/yes/on")
    if spec.choose is not None:
        return bool(spec.choose)
    return value is None or value.strip().lower() in ON


def choose(spec: "RunSpec", announce: Callable[[str], None] | None = None,
           dry_run: bool = False) -> tuple["RunSpec", dict | None]:
    """``spec`` with the task's alternatives chosen by cross-validation on a small train split, and the record
    (None: nothing was decided). ``dry_run``: nothing costly runs; the record says what deciding would cost."""
    from kinject.choice import choose as cross_validate

    return cross_validate(spec, announce or log.info, dry_run=dry_run, on=choice_enabled(spec),
                          folds=spec.defaults.folds)


# -- 3. the default hold-out -------------------------------------------------------------------------------------- #
def default_exclude(run: "RunContext") -> list[str]:
    """The splits whose facts a run holds out of every knowledge source when ``knowledge.exclude`` is unset."""
    from kinject.facts import DEFAULT_EXCLUDE

    return list(DEFAULT_EXCLUDE)


# -- 4. the training rules ------------------------------------------------------------------------------------------ #
def counted(n: int, name: str) -> str:
    """``n`` units named ``name``: "1 query", "200 queries", "924 sentences"."""
    return f"{n} {name if n == 1 else name[:-1] + 'ies' if name.endswith('y') else name + 's'}"


def default_rules(run: "RunContext") -> dict[str, str]:
    """The training rules for a prepared run, on fields the user, the task's recommended settings and a protocol left
    unset; returns {field: why}. ``defaults.rules: false`` turns them all off.

    * A dev split too small to rank checkpoints (< :data:`MIN_DEV_UNITS` units) keeps the last weights.
    * Two rules found on three tasks are off until checked on tasks they were not derived from: ``defaults.head_rate``
      (a sequence classifier whose task recommends no head learning rate gets :data:`HEAD_RATE_FACTOR` x the
      encoder's; found on ChemProt, DDI and HoC) and ``defaults.long_epochs`` (a large training split whose task
      recommends no epochs trains up to :data:`LONG_EPOCHS` epochs with early stopping on dev)."""
    from kinject.choice import SMALL_TRAIN
    from kinject.interfaces import TaskGroup

    options, task, spec = run.spec.defaults, run.task, run.spec
    if not options.rules or task is None or isinstance(task, TaskGroup):
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
    if (options.long_epochs and "epochs" not in taken and "max_steps" not in taken and training.max_steps < 0
            and training.patience is None and update.get("selection", training.selection) == "best"
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


# -- every entry point ------------------------------------------------------------------------------------------ #
def prepare_runs(spec: "RunSpec", seeds: list[int] | None = None, *, resume: bool = False,
                 command: list[str] | None = None, announce: Callable[[str], None] | None = None,
                 dry_run: bool = False) -> list["RunContext"]:
    """The choice (:func:`choose`), then one prepared run per seed (``seeds``; default the spec's), each recording
    what was decided; the decisions announced once. What ``kinject run``, ``kinject.run``, a grid cell and a sweep
    trial call."""
    from contextlib import nullcontext

    from kinject.preparation import dry_running, prepare

    with dry_running() if dry_run else nullcontext():
        spec, chosen = choose(spec, announce, dry_run)
        runs = [prepare(spec.model_copy(update={"seed": seed}), resume=resume, command=command)
                for seed in (seeds or [spec.seed])]
    for run in runs:
        run.chosen = chosen
        if chosen is not None:
            run.decided_by["chosen"] = by(choose)
    announce_defaults(runs[0], announce or log.info)
    return runs


def announce_defaults(run: "RunContext", announce: Callable[[str], None]) -> None:
    """Say the settings decided for the user that the spec did not set: the protocol's and the task's recommended
    values, the default training rules, and the facts held out of every knowledge source by default."""
    if run.protocol:
        announce(f"protocol {run.spec.protocol}: {', '.join(f'{k}={v}' for k, v in run.protocol.items())}")
    if run.recommended:
        announce(f"task {run.task.name}: recommended settings {', '.join(f'{k}={v}' for k, v in run.recommended.items())}"
                 " (set any of them to override; --set recommended=false for none)")
    for name, why in run.defaults.items():
        decider = run.decided_by.get(name, "")
        credit = decider.partition(":")[0] + "; " if decider.startswith(HOOK_PLUGIN) else ""
        announce(f"{name}={why} ({credit}set it to override)")
    if "exclude" in run.decided_by and run.holdout is not None:
        splits = run.spec.knowledge.exclude
        announce(f"knowledge.exclude=[{', '.join(splits)}]: {run.holdout.facts} facts (head-tail name pairs; "
                 f"{len(run.holdout.held_out().keys)} triples) of {run.task.name}'s "
                 f"{'/'.join(splits)} items held out of every knowledge source (the default; "
                 "--set knowledge.exclude=[] keeps them)")
