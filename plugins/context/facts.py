"""The context strategy's own stage, ``context-facts``, and its config: what the model is handed, split by split
(``context.json``: how many inputs link, facts per input, examples) and the dose of the training split
(``dose.json``: the facts shown in context while training)."""

from __future__ import annotations

import json

import numpy as np

from kinject.api import StageConfig, StageContext, TaskRef, fact_key, is_main_process
from kinject.knowledge import write_dose

EXAMPLES_SHOWN = 20  # inputs per split written to context.json with the facts they were given


class ContextFactsConfig(StageConfig):
    """The task with its inputs transformed (the TaskRef the fine-tune stage trains on) and the splits to report."""

    task: TaskRef
    splits: list[str]


def context_facts_body(cfg: ContextFactsConfig, ctx: StageContext) -> None:
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    report: dict = {}
    for split in cfg.splits:
        examples = task.examples(split, env)
        given = [len(ex.get("context_facts", ())) + 0 for ex in examples]
        report[split] = {"inputs": len(examples), "with_context": int(sum(1 for ex in examples if ex.get("context"))),
                         "facts_per_input": float(np.mean(given)) if given else 0.0,
                         "words_per_input": float(np.mean([sum(len(s.split()) for s in ex.get("context", ()))
                                                           for ex in examples])) if examples else 0.0,
                         "examples": [{"id": ex.get("id"), "text": ex.get("text"), "context": ex.get("context")}
                                      for ex in examples[:EXAMPLES_SHOWN]]}
    train = task.examples(task.train_split, env)
    facts = [tuple(f) for ex in train for f in ex.get("context_facts", ())]
    if is_main_process():
        (ctx.out / "context.json").write_text(json.dumps(report, indent=2, default=str))
        write_dose(ctx.out, unit="facts in context", covered=np.array([fact_key(*f) for f in set(facts)],
                                                                         dtype=np.uint64),
                   seen=len(facts), rows_seen=len(train), rows_total=len(train),
                   words=int(sum(len(s.split()) for ex in train for s in ex.get("context", ()))))
