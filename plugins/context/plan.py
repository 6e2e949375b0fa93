"""The context strategy's plan: the knowledge graph it reads (the run's, else the embedded HPO), the task with its
inputs transformed, and the stages built from them. Strategy-side code: no stage's key covers this module."""

from __future__ import annotations

import dataclasses

from kinject.api import InputTransform, SourceRef, SpecError, Stage, TaskRef
from kinject.training import evaluate_stage, finetune_stage

from .config import ContextConfig
from .facts import context_facts_body
from .stages import ContextFactsConfig

FINETUNE, EVALUATE, FACTS, LOOKUP = "context-finetune", "context-evaluate", "context-facts", "context-lookup"
TRANSFORM = "kinject.plugins.context.linking:add_context"


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``ContextStrategy.validate`` resolved for its stages (``run.resolved``)."""

    source: SourceRef  # the graph the inputs are linked to


def resolve(run, cfg: ContextConfig) -> Resolved:
    """The graph the inputs are linked to: the run's one triples source, else the whole embedded HPO. SpecError for
    a task whose inputs are not texts (token tasks: the added text would shift the tags)."""
    if len(run.sources) > 1:
        raise SpecError(f"sources: context links inputs to one knowledge graph (got {len(run.sources)} sources)")
    if run.task.head(run.env).kind == "token":
        raise SpecError(f"task: context hands facts to the model as text beside the input, which would shift a token "
                        f"task's tags; it supports sequence, pair and retrieval tasks, not {run.task.name!r} "
                        f"({run.task.kind})")
    if cfg.form == "lookup" and cfg.lookup_label not in run.task.head(run.env).labels:
        raise SpecError(f"strategy.lookup_label: {cfg.lookup_label!r} is not a label of {run.task.name!r} "
                        f"({', '.join(run.task.head(run.env).labels) or 'it has none'})")
    if run.sources:
        return Resolved(source=run.source_refs()[0])
    from kinject.api import registry

    cls = registry("sources").get("hpo")
    source = cls(cls.Config())
    source.check(run.env)
    return Resolved(source=run.source_ref(source, dataclasses.replace(run.env, limit=None)))


def context_task(run, cfg: ContextConfig, source: SourceRef) -> TaskRef:
    options = cfg.model_dump(include={"give", "max_entities", "max_facts", "max_words", "synonyms", "relations"})
    return run.task_ref().with_inputs(InputTransform(function=TRANSFORM, options=options, sources=(source,)))


def lookup_stage(run, cfg: ContextConfig, resolved: Resolved) -> Stage:
    """``context-lookup``: the baseline's model scored with the graph's answers where it has them (the ceiling)."""
    from .lookup import LOOKUP_FILE, LookupConfig, lookup_body

    base = evaluate_stage(run, "finetune", name=LOOKUP)
    config = LookupConfig(**dict(base.config), source=resolved.source, label=cfg.lookup_label)
    return dataclasses.replace(base, body=lookup_body, config=config, artifacts=("predictions", LOOKUP_FILE))


def context_stages(run, cfg: ContextConfig, resolved: Resolved) -> list[Stage]:
    """``context-facts`` (what is handed over, and the dose), ``context-finetune`` and ``context-evaluate`` on the
    transformed task."""
    task = context_task(run, cfg, resolved.source)
    tune = finetune_stage(run, FINETUNE)
    tune = dataclasses.replace(tune, config=tune.config.model_copy(update={"task": task}))
    evaluate = evaluate_stage(run, FINETUNE, name=EVALUATE)
    evaluate = dataclasses.replace(evaluate, config=evaluate.config.model_copy(update={"task": task}))
    splits = [run.task.train_split, *(run.spec.training.eval_splits or run.task.eval_splits)]
    facts = Stage(name=FACTS, body=context_facts_body, config=ContextFactsConfig(task=task, splits=splits),
                  artifacts=("context.json",))
    return [facts, tune, evaluate]
