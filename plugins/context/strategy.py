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
dose) and ``context-compare`` the paired result; the strategy has nothing else of its own to gather. Checks and
builders in :mod:`.plan`, the config in :mod:`.stages`, the body in :mod:`.facts`.
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage

from .config import ContextConfig
from .plan import EVALUATE, LOOKUP, Resolved, context_stages, lookup_stage, resolve


class ContextStrategy(Strategy):
    """Knowledge in context: the facts of the entities an input names, as text beside it; then fine-tune."""

    Config: ClassVar = ContextConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})
    task_kinds: ClassVar[frozenset[str]] = frozenset({"sequence"})  # added text would shift a token task's tags
    protocols: ClassVar[dict] = {"quick": {"training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`.plan.resolve`): the graph the inputs are linked to."""
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
                                        labels=("finetune", f"context-{self.config.form}")))
        return stages
