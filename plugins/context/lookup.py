"""The ceiling that bounds (``strategy.form: lookup``): the graph answers where it has the fact, the fine-tuned
model everywhere else.

For a pair task (hpo-isa: is A a kind of B?) an input whose two texts the graph links - an edge between their names,
either way, any relation, matched as the hold-out matches facts - is given ``strategy.lookup_label`` outright; every
other input keeps the fine-tuned baseline's prediction. The graph is read like every source, so the run's
``knowledge.exclude`` applies: under the default hold-out the lookup finds none of the dev/test answers (the
generalisation ceiling: what the facts give for items whose answer the graph does not hold is nothing), and with
``knowledge.exclude: []`` it finds them (the memorisation ceiling: the most the handed-over facts can give).
"""

from __future__ import annotations

import json

import numpy as np
from pydantic import Field

from kinject.api import SourceRef, StageContext, is_main_process
from kinject.api import HeldOutFacts
from kinject.training import EvaluateConfig, evaluate_model, predict, write_predictions
from kinject.api import load_tokenizer

LOOKUP_FILE = "lookup.json"
MARGIN = 20.0  # the logit margin a graph answer is given (its probability is 1 to float precision)


class LookupConfig(EvaluateConfig):
    """Score the baseline's model with the graph's answers in place of its predictions where the graph has them."""

    source: SourceRef = Field(description="The graph the answers are read from (the run's hold-out applies).")
    label: str = Field(description="The label an input whose two texts the graph links is given.")


def graph_pairs(ref: SourceRef, ctx: StageContext) -> HeldOutFacts:
    """The name pairs the graph links (the same matching as the hold-out's)."""
    source = ref.build()
    return HeldOutFacts([(t.head, t.relation, t.tail) for t in source.iter_triples(ref.environment(ctx))])


def answered(graph: HeldOutFacts, examples: list[dict]) -> list[int]:
    """Indices of the examples whose text and text pair the graph links."""
    return [i for i, ex in enumerate(examples) if isinstance(ex.get("text_pair"), str)
            and graph.pair_of(str(ex.get("text", "")), ex["text_pair"]) is not None]


def lookup_body(cfg: LookupConfig, ctx: StageContext) -> None:
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    model_dir = ctx.inputs[cfg.model_stage] / "model"
    head = task.head(env)
    model, tokenizer = cfg.load_model(model_dir, head), load_tokenizer(str(model_dir))
    index = list(head.labels).index(cfg.label)
    graph = graph_pairs(cfg.source, ctx)
    scored, report, hits = {}, {}, {}
    for split in cfg.splits or task.eval_splits:
        examples = task.examples(split, env)
        features = task.featurize(tokenizer, examples, cfg.max_length, env)
        logits = np.array(predict(model, features, task.collator(tokenizer), cfg.batch_size, ctx.work, bf16=cfg.bf16),
                          dtype=np.float32)
        hits[split] = answered(graph, examples)
        logits[hits[split]] = -MARGIN
        logits[hits[split], index] = MARGIN
        scored[split] = logits
        labels = [ex.get("label") for ex in examples]
        report[split] = {"inputs": len(examples), "answered_by_graph": len(hits[split]),
                         "of_them_labelled": sum(labels[i] == cfg.label for i in hits[split])}
    metrics, records = evaluate_model(model_dir, task, env, cfg.batch_size, cfg.max_length, ctx.work,
                                      tuple(scored), cfg.attn_implementation, cfg.bf16, lambda *_: model, scored)
    for split, rows in records.items():
        answered_here = set(hits.get(split, ()))
        for i, row in enumerate(rows):
            row["lookup"] = i in answered_here
    if is_main_process():
        (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        (ctx.out / LOOKUP_FILE).write_text(json.dumps({"graph_pairs": len(graph), "splits": report}, indent=2))
        write_predictions(records, ctx.out / "predictions")
