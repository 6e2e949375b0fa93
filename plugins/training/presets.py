"""The settings a run starts from, the training library's (the ``decisions`` plugin answers the kernel's
``kinject_start_settings``): a strategy's ``protocol`` preset (``--set protocol=paper``, ``--quick``), then the task's
``recommended`` values, then the precision (``training.bf16``), each applied only to the fields the spec does not set.
``protocol: kinject``, ``recommended: false`` and ``training.bf16=false`` turn them off; run.json records what each
applied (``protocol``, ``recommended``, ``defaults``), and every entry point announces it."""

from __future__ import annotations

import logging
from typing import Any

from kinject.api import (BF16_FLAGS, ModelSpec, PluginRef, SpecError, TaskGroup, TrainingSpec, UnknownNameError,
                         cpu_info, registry)

log = logging.getLogger("kinject")

#: ``--quick`` for a strategy without a quick protocol of its own
QUICK: dict[str, dict[str, Any]] = {"training": {"max_steps": 30}}


def apply_preset(spec, preset: dict[str, dict[str, Any]], count_as_set: bool) -> tuple[Any, dict[str, Any]]:
    """``spec`` with a preset (``{"strategy"|"model"|"training": {field: value}}``) applied to every field the spec
    does not set; returns (spec, {field path: value applied}). The one loop behind a task's ``recommended`` values
    (``count_as_set=False``: a protocol or the user still overrides them) and a strategy's protocols (``True``: the
    applied fields count as set, so a task's recommended values do not override them)."""
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
    check_protocol(cls, spec.protocol, presets)
    return apply_protocol(spec, presets)


def native_bf16() -> bool:
    """Whether this machine computes bfloat16 natively: a CUDA GPU that supports it, else a CPU with the
    AVX512-BF16 or AMX-BF16 instructions (Linux: /proc/cpuinfo). Elsewhere bf16 autocast is slower than float32."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return bool(cpu_info()[1] & {"avx512_bf16", "amx_bf16"})


def with_precision(spec) -> tuple[Any, dict[str, str]]:
    """``training.bf16`` decided when unset: bfloat16 autocast where this device computes it natively
    (:func:`native_bf16`: ~1.2-1.5x training on such a CPU, docs/benchmarks.md), float32 elsewhere;
    stage keys hold the value. Returns (spec, {field: why}) - a why only when it turns bfloat16 on, the departure from
    float32 a user should hear about."""
    if spec.training.bf16 is not None:
        return spec, {}
    on = native_bf16()
    training = spec.training.model_copy(update={"bf16": on})
    training.__pydantic_fields_set__ = set(spec.training.model_fields_set)
    spec = spec.model_copy(update={"training": training})
    if not on:
        return spec, {}
    import torch

    flags = sorted(cpu_info()[1] & set(BF16_FLAGS))
    where = "this GPU computes bfloat16 natively" if torch.cuda.is_available() else \
        f"this CPU computes bfloat16 natively ({', '.join(flags)})"
    return spec, {"training.bf16": f"true: {where}: bfloat16 autocast in training and evaluation, task heads in "
                                   "float32"}


def start_settings(spec) -> tuple[Any, dict[str, dict[str, Any]]]:
    """(spec, {"protocol": applied, "recommended": applied, "defaults": {field: why}}): the protocol first, then the
    task's recommended values (none for a task group: each member applies its own; an unknown task is left to the
    kernel's lookup to report), then the precision (:func:`with_precision`)."""
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
