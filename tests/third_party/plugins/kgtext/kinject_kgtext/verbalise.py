"""kgtext's stage bodies: triples to sentences, and the graph's coverage of the task."""

from __future__ import annotations

import itertools
import json

from kinject.api import StageContext, is_main_process

from .stages import CoverageConfig, VerbaliseConfig


def verbalise_body(cfg: VerbaliseConfig, ctx: StageContext) -> None:
    if not is_main_process():
        return
    entities: set[str] = set()
    triples = cfg.source.build().iter_triples(cfg.source.environment(ctx))
    with open(ctx.out / "texts.jsonl", "w", encoding="utf-8") as handle:
        for triple in itertools.islice(triples, cfg.max_triples):
            text = cfg.template.format(head=triple.head, relation=triple.relation, tail=triple.tail)
            handle.write(json.dumps({"text": text}) + "\n")
            entities.update((triple.head.lower(), triple.tail.lower()))
    (ctx.out / "entities.txt").write_text("\n".join(sorted(entities)) + "\n", encoding="utf-8")


def coverage_body(cfg: CoverageConfig, ctx: StageContext) -> None:
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    names = [n for n in (ctx.inputs[cfg.texts_stage] / "entities.txt").read_text().splitlines() if len(n) > 3]
    examples = task.examples(cfg.split, env)
    hits = sum(any(name in str(ex.get("text", "")).lower() for name in names) for ex in examples)
    if is_main_process():
        (ctx.out / "coverage.json").write_text(json.dumps(
            {"split": cfg.split, "examples": len(examples), "naming_an_entity": hits,
             "share": hits / len(examples) if examples else float("nan"), "entities": len(names)}, indent=2))
