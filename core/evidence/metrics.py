"""Which evaluator (and options) produced a metric name, so the metric can be recomputed from predictions.

A metric is named as in ``metrics.json`` (``f1_micro``, ``entity_f1``, ``recall@1``, ...). When the task is
known its own evaluator list (``task.metric_refs()``, with options such as ChemProt's positive classes) is
searched first; otherwise the evaluator is inferred from the name with default options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from kinject.errors import KinjectError


@dataclass(frozen=True)
class MetricDef:
    """A metric key, the evaluator that computes it, the evaluator's full config, and the task's label order
    (the order of ``scores`` in the prediction records; empty when unknown)."""

    key: str
    evaluator: str
    options: dict[str, Any] = field(default_factory=dict)
    labels: tuple[str, ...] = ()


def evaluator_options(name: str, options: dict | None = None) -> dict[str, Any]:
    """The evaluator's config with its defaults filled in (validated by the evaluator's own Config)."""
    from kinject.registry import registry

    cls = registry("evaluators").get(name)
    return cls.Config.model_validate(options or {}).model_dump()


def metric_keys(evaluator: str, options: dict[str, Any]) -> list[str]:
    """The metric names an evaluator with these (complete) options reports."""
    o = options
    if evaluator == "accuracy":
        return ["accuracy"]
    if evaluator == "f1":
        return [o.get("name") or f"f1_{o['average']}"]
    if evaluator == "entity-f1":
        return [f"{o['prefix']}{k}" for k in ("f1", "precision", "recall")]
    if evaluator == "pico-f1":
        return [o["name"], *(f"{o['name']}_{e}" for e in o["elements"])]
    if evaluator == "auroc":
        return [f"auroc_{a}" for a in o["averages"]]
    if evaluator == "recall-at-k":
        return [f"recall@{k}" for k in o["ks"]]
    if evaluator in ("pearson", "mrr", "ece"):
        return [o["name"]]
    return []


_INFERRED: list[tuple[str, str, Any]] = [  # (key pattern, evaluator, options from the match)
    (r"accuracy", "accuracy", lambda m: {}),
    (r"f1_(micro|macro|weighted|binary)", "f1", lambda m: {"average": m[1]}),
    (r"(.*_)?(f1|precision|recall)", "entity-f1", lambda m: {"prefix": m[1] or ""}),
    (r"pico_f1(_\w+)?", "pico-f1", lambda m: {}),
    (r"auroc_(macro|weighted|micro)", "auroc", lambda m: {"averages": [m[1]]}),
    (r"recall@(\d+)", "recall-at-k", lambda m: {"ks": [int(m[1])]}),
    (r"(pearson|mrr|ece)", None, lambda m: {}),
]
KNOWN = "accuracy, f1_<micro|macro|weighted|binary>, entity_f1/precision/recall, pico_f1, auroc_<average>, " \
        "recall@<k>, mrr, pearson, ece"


def define(key: str, refs: Iterable[Any] = (), labels: Iterable[str] = ()) -> MetricDef:
    """The definition of metric ``key``: from ``refs`` (a task's ``metric_refs()``: objects with ``name`` and
    ``options``) when one of them reports it, else inferred from the name. Unknown names -> KinjectError."""
    for ref in refs:
        try:
            options = evaluator_options(ref.name, ref.options)
        except Exception:  # noqa: BLE001 - an evaluator that is not installed cannot define anything here
            continue
        if key in metric_keys(ref.name, options):
            return MetricDef(key, ref.name, options, tuple(labels))
    for pattern, evaluator, options in _INFERRED:
        match = re.fullmatch(pattern, key)
        if match:
            name = evaluator or match[1]
            if name == "entity-f1" and not (match[1] or "").startswith("entity"):
                continue  # a bare "f1"/"precision" is no entity metric
            opts = options(match)
            if name in ("pearson", "mrr", "ece"):
                opts = {"name": key}
            return MetricDef(key, name, evaluator_options(name, opts), tuple(labels))
    raise KinjectError(f"metric {key!r} cannot be recomputed from predictions (known: {KNOWN})")


def task_metric_refs(task: Any) -> list:
    """A task instance's evaluator list (empty when it has none)."""
    refs = getattr(task, "metric_refs", None)
    return list(refs()) if callable(refs) else []


def build_task(task_spec: dict) -> Any | None:
    """A task instance from a run.json ``spec.task`` entry (None when its plugin or config no longer loads)."""
    from kinject.registry import registry
    from kinject.spec import PluginRef, validate_plugin_config

    try:
        cls = registry("tasks").get(task_spec["name"])
        return cls(validate_plugin_config(cls, PluginRef(**task_spec), "task"))
    except Exception:  # noqa: BLE001 - fall back to inferring metrics from their names
        return None
