"""The `context` strategy: knowledge in context, the ceiling an injection method is read against.

Each input's text (and text pair) is linked to the knowledge graph - exact and synonym matches of the graph's names,
whole words, longest first - and what the graph says about the linked entities (their facts as sentences, "X is a
Y.", and/or their definitions) is handed to the model as text beside the input (its second segment), within caps;
then the model is fine-tuned as ``finetune`` does. The simplest member of the input-injection family (K-BERT and its
successors). It reads the same source, with the same held-out facts, as every other method, so "the facts help when
the model is handed them" is measured on the footing the injection methods are.

Stages: ``finetune`` + ``evaluate`` (the baseline, shared), ``context-facts`` (what is handed over; the dose),
``context-finetune`` + ``context-evaluate`` (on the transformed inputs: each prediction record carries its
``context``), ``context-compare``. No report stage: ``context-facts`` already writes what was handed over (and the
dose) and ``context-compare`` the paired result; the strategy has nothing else of its own to gather.

This module holds the config, the checks, the stage builders and the Strategy class; ``context-facts`` and its
config are in :mod:`.facts`, ``context-lookup`` in :mod:`.lookup`, the input transform in :mod:`.linking`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import Field

from kinject.api import InputTransform, PluginConfig, SourceRef, SpecError, Stage, Strategy, TaskRef
from kinject.training import evaluate_stage, finetune_stage

from .facts import ContextFactsConfig, context_facts_body


class ContextConfig(PluginConfig):
    form: Literal["text", "lookup"] = Field(
        "text", description="How the facts reach the prediction: text (each input's linked facts as text beside "
        "it, then fine-tuning) or lookup (the ceiling: the graph's answer where it links the pair's two texts, the "
        "fine-tuned baseline's prediction elsewhere; needs a pair task).")
    lookup_label: str = Field("yes", description="form=lookup: the label of a pair the graph links (hpo-isa: yes).")
    give: Literal["facts", "definitions", "both"] = Field(
        "facts", description="What each linked entity contributes: its facts from the graph (verbalised triples, "
        "'X is a Y.'), its definition (sources that have them, e.g. the HPO), or both.")
    max_entities: int = Field(4, ge=1, description="Linked entities per input, in order of appearance (the longest "
                              "name wins where names overlap).")
    max_facts: int = Field(6, ge=1, description="Facts per linked entity: the triples it heads first, then those it "
                           "is the tail of, in the graph's order.")
    max_words: int = Field(96, ge=8, description="Cap on the words of context added to one input (what follows is "
                           "cut; the model's max_length cuts again).")
    synonyms: bool = Field(True, description="Link synonyms as well as names (where the source knows them).")
    relations: list[str] | None = Field(None, description="Only facts of these relations (None: all).")
    baseline: bool = Field(True, description="Also fine-tune and evaluate the plain model (the finetune strategy's "
                           "stages, shared cache) and compare against it, paired.")


# -- what validate resolves -------------------------------------------------------------------------- #
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


# -- stage builders ---------------------------------------------------------------------------------- #
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


# -- the strategy ------------------------------------------------------------------------------------ #
class ContextStrategy(Strategy):
    """Knowledge in context: the facts of the entities an input names, as text beside it; then fine-tune."""

    Config: ClassVar = ContextConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})
    task_kinds: ClassVar[frozenset[str]] = frozenset({"sequence"})  # added text would shift a token task's tags
    #: kinject run --quick: 32 words of context, not 96 (inputs about half as long: a quick try on CAPR took 213 s)
    protocols: ClassVar[dict] = {"quick": {"strategy": {"max_words": 32}, "training": {"max_steps": 30}}}

    @staticmethod
    def label(config: ContextConfig) -> str:
        """The arm's name in comparisons, leaderboards and the card: ``context`` (facts as text beside the input),
        else ``context/`` and what differs (``context/lookup``: the graph's answers, the ceiling;
        ``context/definitions``)."""
        differs = [part for part, default in ((config.form, "text"), (config.give, "facts")) if part != default]
        return "context/" + "+".join(differs) if differs else "context"

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`resolve`): the graph the inputs are linked to."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        from kinject.evidence import compare_stage

        if self.config.form == "lookup":  # the baseline's model, the graph's answers where it has them
            stages, other = [finetune_stage(run), lookup_stage(run, self.config, run.resolved)], LOOKUP
            if self.config.baseline:
                stages.insert(1, evaluate_stage(run, "finetune", export=False))
        else:
            stages, other = context_stages(run, self.config, run.resolved), EVALUATE
            if self.config.baseline:
                stages = [finetune_stage(run), evaluate_stage(run, "finetune", export=False), *stages]
        if self.config.baseline:
            stages.append(compare_stage(run, baseline="evaluate", other=other, name="context-compare",
                                        labels=("finetune", self.label(self.config))))
        return stages
