"""Adds the knowledge probe to every run with a task (``hooks.knowledge-probe.enabled=false`` leaves it out).

The knowledge library's hook plugin (entry point ``kinject.hooks``: ``knowledge-probe``): every run with a task and
an evaluate stage gets the probe's stages (:mod:`kinject.knowledge.probe`) after the strategy's, whatever
the strategy (a third party's too). Its settings are its own (:class:`Config`, the spec's
``hooks.knowledge-probe``)."""

from __future__ import annotations

import os

from pydantic import Field

from kinject.api import PluginConfig, PluginRef, Stage, hookimpl
from kinject.training import EvaluateConfig

NAME = "knowledge-probe"  # the entry point's name: the spec's hooks.knowledge-probe
BASE_STAGE = "probe-base"
PROBE_STAGE = "probe"
QUICK_PAIRS = 100  # probe-train and probe-test pairs each in a quick try (the full probe: ProbeSettings' 400)


def probe_by_default() -> bool:
    """``KINJECT_PROBE``, read strictly (as ``KINJECT_CHOOSE``): unset or 1/true/yes/on -> on, 0/false/no/off ->
    off; anything else is a one-line error."""
    from kinject.api import KinjectError

    value = os.environ.get("KINJECT_PROBE")
    word = (value or "1").strip().lower()
    if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise KinjectError(f"KINJECT_PROBE={value!r}: expected 0/false/no/off or 1/true/yes/on")
    return word in ("1", "true", "yes", "on")


class Config(PluginConfig):
    """The knowledge probe's settings (``hooks.knowledge-probe`` in a spec)."""

    enabled: bool = Field(default_factory=probe_by_default,
                          description="Add the knowledge probe to a run with a task and an evaluate stage: the run's "
                          "final encoder and the base model scored the same way on held-out knowledge-graph facts. "
                          "Unset: on, unless KINJECT_PROBE is 0/false/no/off.")
    source: PluginRef | None = Field(None, description="The graph the probe asks about (a triples source, e.g. "
                                     "{name: hpo, include: [isa]}). Unset: the run's first triples source, else the "
                                     "HPO is-a graph; `kinject grid` gives every arm of a task the graph its "
                                     "knowledge arms inject, so all are probed on the same facts.")
    pairs: int | None = Field(None, ge=8, description="Probe-train and probe-test pairs, each. Unset: 400, and "
                              f"{QUICK_PAIRS} in a quick try (--quick: the probe embeds a quarter of the names).")


def probe_source(run):
    """The graph the probe asks about, as a stage config holds it: ``hooks.knowledge-probe.source``, else the run's
    first triples source, else the HPO is-a graph (SpecError naming the field for a bad one)."""
    from kinject.api import SpecError, registry, validate_plugin_config

    ref = run.hook_settings(NAME).source
    if ref is None:
        triples = [s for s in run.sources if s.kind == "triples"]
        if triples:
            return run.source_ref(triples[0])
        ref = PluginRef(name="hpo", include=["isa"])
    cls = registry("sources").get(ref.name)
    source = cls(validate_plugin_config(cls, ref, f"hooks.{NAME}.source"))
    if source.kind != "triples":
        raise SpecError(f"hooks.{NAME}.source: {ref.name!r} is a {source.kind} source; the probe asks about a graph")
    source.check(run.env)
    return run.source_ref(source)


def probe_stages(run, **settings) -> list[Stage]:
    """``probe-base`` (the base model) and ``probe`` (the model the run's last evaluate stage scores, loaded by that
    stage's config) for a prepared run; [] when it has no evaluate stage. ``settings``: fields of
    :class:`kinject.knowledge.probe.ProbeSettings` (train_pairs, test_pairs, seed, max_length,
    regularization)."""
    from kinject.knowledge.probe import (PREDICTIONS_FILE, PROBE_FILE, BaseProbeConfig, ProbeConfig,
                                                 ProbeSettings)

    evaluated = [stage for stage in run.stages if isinstance(stage.config, EvaluateConfig)]
    if not evaluated:
        return []
    last = evaluated[-1]
    probe = ProbeSettings(source=probe_source(run), **settings)
    # the base model as the probe reads it: names cut to the probe's length, the task's pooling plays no part
    base_model = run.model_ref().model_copy(update={"max_length": probe.max_length, "pooling": "mean"})
    from kinject.knowledge.probe import base_probe_body, probe_body

    return [Stage(name=BASE_STAGE, body=base_probe_body, config=BaseProbeConfig(model=base_model, probe=probe)),
            Stage(name=PROBE_STAGE, body=probe_body,
                  config=ProbeConfig(evaluate=last.config, probe=probe, base_stage=BASE_STAGE),
                  inputs=(last.config.model_stage, BASE_STAGE), artifacts=(PROBE_FILE, PREDICTIONS_FILE),
                  code=last.code, libraries=last.libraries)]


@hookimpl
def kinject_extra_stages(run):
    """The probe's stages for a run with a task (and an evaluate stage) unless its settings turn it off; a quick try
    probes :data:`QUICK_PAIRS` pairs of each kind unless ``pairs`` is set (announced, recorded in run.json)."""
    settings = run.hook_settings(NAME)
    if run.task is None or not settings.enabled:
        return None
    pairs = settings.pairs
    if pairs is None and run.spec.protocol == "quick":
        pairs = QUICK_PAIRS
        run.defaults[f"hooks.{NAME}.pairs"] = (f"{QUICK_PAIRS}: a quick try (--quick) probes {QUICK_PAIRS} + "
                                               f"{QUICK_PAIRS} facts, a quarter of the full probe's 400 + 400")
        run.decided_by["probe"] = f"{__name__}.kinject_extra_stages"
    return probe_stages(run, **({"train_pairs": pairs, "test_pairs": pairs} if pairs else {}))
