"""Which evaluator (and options) produced a metric name, so the metric can be recomputed from predictions.

A metric is named as in ``metrics.json`` (``f1_micro``, ``entity_f1``, ``recall@1``, ...). When the task is
known its own evaluator list (``task.metric_refs()``, with options such as ChemProt's positive classes) is
searched first; otherwise a registered evaluator that declares the name with its default options. Every
evaluator declares its names (``Evaluator.metric_names``), so a third party's evaluator is found the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from kinject.api import KinjectError


@dataclass(frozen=True)
class MetricDef:
    """A metric key, the evaluator that computes it, the evaluator's full config, and the task's label order
    (the order of ``scores`` in the prediction records; empty when unknown)."""

    key: str
    evaluator: str
    options: dict[str, Any] = field(default_factory=dict)
    labels: tuple[str, ...] = ()


def define(key: str, refs: Iterable[Any] = (), labels: Iterable[str] = ()) -> MetricDef:
    """The definition of metric ``key``: the evaluator among ``refs`` (a task's ``metric_refs()``) that declares it
    (``Evaluator.metric_names``), else a registered evaluator that reports it under the options it gives for the
    name (``Evaluator.options_for``). Unknown names -> KinjectError listing what is known."""
    from kinject.api import MetricRef, registry

    known: list[str] = []
    for ref in refs:
        try:
            evaluator = ref.build()
            names = evaluator.metric_names()
        except Exception:  # noqa: BLE001 - an evaluator that does not load cannot define anything here
            continue
        if key in names:
            return MetricDef(key, ref.name, evaluator.config.model_dump(), tuple(labels))
        known += [n for n in names if n not in known]
    evaluators = registry("evaluators")
    for name in evaluators.names():
        try:
            options = evaluators.get(name).options_for(key)
            if options is not None:
                evaluator = MetricRef(name=name, options=options).build()
                return MetricDef(key, name, evaluator.config.model_dump(), tuple(labels))
        except Exception:  # noqa: BLE001 - as above
            continue
    raise KinjectError(f"metric {key!r} cannot be recomputed from predictions: no evaluator reports it"
                       + _known_names(key, known, evaluators.names()))


def _known_names(key: str, metrics: list[str], evaluators: list[str]) -> str:
    """The hint of an unknown metric: a near name, the task's metrics and the evaluators' entry-point names."""
    import difflib

    close = difflib.get_close_matches(key, [*metrics, *evaluators], n=2, cutoff=0.6)
    hint = f". Did you mean {' or '.join(map(repr, dict.fromkeys(close)))}?" if close else ""
    known = [f"the task reports {', '.join(metrics)}"] if metrics else []
    known += [f"evaluators by entry-point name: {', '.join(evaluators)}"] if evaluators else []
    return f"{hint} (-m takes a metric or an evaluator; {'; '.join(known)})" if known else hint


def metric_keys(names: Iterable[str], task_specs: Iterable[dict] = ()) -> list[str]:
    """``-m`` names as metric keys: a metric stays itself; the entry-point name of a registered evaluator that is no
    metric becomes the metrics that evaluator reports, under the options each task gives it (``task_specs``: run.json
    ``spec.task`` entries; ``f1`` -> ``f1_macro``), else under its defaults (``brier`` -> ``brier_macro``). A name that
    is neither stays, for :func:`define` to refuse with what is known."""
    specs = {json.dumps(spec, sort_keys=True, default=str): spec for spec in task_specs if spec}
    out: list[str] = []
    for spec in list(specs.values()) or [None]:
        refs = task_metric_refs(build_task(spec)) if spec else []
        out += [key for name in names for key in _keys_of(name, refs) if key not in out]
    return out


def _keys_of(name: str, refs: list) -> list[str]:
    """The metric keys one ``-m`` name stands for, given a task's evaluator list ``refs``."""
    from kinject.api import registry

    try:
        define(name, refs)
        return [name]
    except KinjectError:
        pass
    evaluators = registry("evaluators")
    if name not in evaluators.names():
        return [name]
    try:
        cls = evaluators.get(name)
        built = [ref.build() for ref in refs if ref.name == name] or [cls(cls.Config())]
        return [key for evaluator in built for key in evaluator.metric_names()] or [name]
    except Exception:  # noqa: BLE001 - an evaluator that does not load names no metric here
        return [name]


def task_metric_refs(task: Any) -> list:
    """A task instance's evaluator list (empty when it has none)."""
    return list(task.metric_refs()) if task is not None else []


def build_task(task_spec: dict) -> Any | None:
    """A task instance from a run.json ``spec.task`` entry (None when its plugin or config no longer loads)."""
    from kinject.api import PluginRef, registry, validate_plugin_config

    try:
        cls = registry("tasks").get(task_spec["name"])
        return cls(validate_plugin_config(cls, PluginRef(**task_spec), "task"))
    except Exception:  # noqa: BLE001 - fall back to inferring metrics from their names
        return None
