"""Adds the knowledge probe to every run with a task (set knowledge_probe: false to leave it out).

The knowledge library's hook plugin (entry point ``kinject.hooks``: ``knowledge-probe``): every run with a task and
an evaluate stage gets the probe's stages (:mod:`kinject.plugins.knowledge.probe`) after the strategy's, whatever
the strategy (a third party's too)."""

from __future__ import annotations

from kinject.api import Stage, hookimpl
from kinject.plugins.training import EvaluateConfig

BASE_STAGE = "probe-base"
PROBE_STAGE = "probe"


def probe_source(run):
    """The graph the probe asks about, as a stage config holds it: ``knowledge.probe_source``, else the run's first
    triples source, else the HPO is-a graph (SpecError naming the field for a bad one)."""
    from kinject.api import PluginRef, SpecError, registry, validate_plugin_config

    ref = run.spec.knowledge.probe_source
    if ref is None:
        triples = [s for s in run.sources if s.kind == "triples"]
        if triples:
            return run.source_ref(triples[0])
        ref = PluginRef(name="hpo", include=["isa"])
    cls = registry("sources").get(ref.name)
    source = cls(validate_plugin_config(cls, ref, "knowledge.probe_source"))
    if source.kind != "triples":
        raise SpecError(f"knowledge.probe_source: {ref.name!r} is a {source.kind} source; the probe asks about a graph")
    source.check(run.env)
    return run.source_ref(source)


def probe_stages(run, **settings) -> list[Stage]:
    """``probe-base`` (the base model) and ``probe`` (the model the run's last evaluate stage scores, loaded by that
    stage's config) for a prepared run; [] when it has no evaluate stage. ``settings``: fields of
    :class:`kinject.plugins.knowledge.probe.ProbeSettings` (train_pairs, test_pairs, seed, max_length,
    regularization)."""
    from kinject.plugins.knowledge.probe import (PREDICTIONS_FILE, PROBE_FILE, BaseProbeConfig, ProbeConfig,
                                                 ProbeSettings)

    evaluated = [stage for stage in run.stages if isinstance(stage.config, EvaluateConfig)]
    if not evaluated:
        return []
    last = evaluated[-1]
    probe = ProbeSettings(source=probe_source(run), **settings)
    # the base model as the probe reads it: names cut to the probe's length, the task's pooling plays no part
    base_model = run.model_ref().model_copy(update={"max_length": probe.max_length, "pooling": "mean"})
    from kinject.plugins.knowledge.probe import base_probe_body, probe_body

    return [Stage(name=BASE_STAGE, body=base_probe_body, config=BaseProbeConfig(model=base_model, probe=probe)),
            Stage(name=PROBE_STAGE, body=probe_body,
                  config=ProbeConfig(evaluate=last.config, probe=probe, base_stage=BASE_STAGE),
                  inputs=(last.config.model_stage, BASE_STAGE), artifacts=(PROBE_FILE, PREDICTIONS_FILE),
                  code=last.code, libraries=last.libraries)]


@hookimpl
def kinject_extra_stages(run):
    """The probe's stages for a run with a task (and an evaluate stage) whose spec keeps ``knowledge_probe``."""
    if not getattr(run.spec, "knowledge_probe", True) or run.task is None:
        return None
    return probe_stages(run)
