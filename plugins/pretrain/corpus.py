"""The pretraining corpus: stream the corpus source, drop test text, deduplicate, and split every
1/``heldout_fraction``-th text (up to ``heldout_max_texts``) into ``heldout.arrow``, the rest into ``train.arrow``
(Arrow, written in batches; the texts file of the pack stage, the knowledge library's ``pack_stage``)."""

from __future__ import annotations

import json

from pydantic import Field

from kinject.api import SourceRef, StageConfig, StageContext, TaskRef, is_main_process


class CorpusStageConfig(StageConfig):
    """Stream the corpus source, drop test text, split off a held-out slice (``train.arrow``, ``heldout.arrow``)."""

    source: SourceRef
    exclude: list[TaskRef] = Field(default_factory=list, description="Tasks whose test text is also removed "
                                   "(the run's own task).")
    heldout_fraction: float
    heldout_max_texts: int
    max_texts: int | None = None  # stop after this many texts (a quick try)


def corpus_body(cfg: CorpusStageConfig, ctx: StageContext) -> None:
    from datasets import Features, Value
    from datasets.arrow_writer import ArrowWriter

    from kinject.api import DataError
    from kinject.knowledge import read_texts
    from kinject.knowledge import HeldOutText

    if not is_main_process():
        return
    source, env = cfg.source.build(), cfg.source.environment(ctx)
    held = HeldOutText()
    for ref in cfg.exclude:
        held.add_task(ref.build(), ref.environment(ctx), tuple(source.config.splits))
    every = max(1, round(1 / cfg.heldout_fraction))
    features = Features({"text": Value("string")})
    counts = {"train": 0, "heldout": 0}
    chars = 0
    writers = {split: ArrowWriter(features=features, path=str(ctx.out / f"{split}.arrow")) for split in counts}
    try:
        for i, text in enumerate(source.iter_texts(env, exclude=held)):
            if cfg.max_texts is not None and i >= cfg.max_texts:
                break
            split = "heldout" if i % every == 0 and counts["heldout"] < cfg.heldout_max_texts else "train"
            writers[split].write({"text": text})
            counts[split] += 1
            chars += len(text)
        for writer in writers.values():
            writer.finalize()
    finally:
        for writer in writers.values():
            writer.close()
    if counts["train"] == 0:
        raise DataError(f"pretrain corpus: {sum(counts.values())} text(s) left after removing duplicates and test "
                        "text; need at least 2 (one held out)")
    from kinject.api import held_out_count

    stats = {"train_texts": counts["train"], "heldout_texts": counts["heldout"], "chars": chars,
             "run_task_test_texts": held.texts, **{k.replace(" ", "_"): v for k, v in source.stats.items()}}
    if held_out_count(source) is not None:  # texts that stated a fact the run holds out (knowledge.exclude)
        stats["held_out_fact_texts"] = held_out_count(source)
    (ctx.out / "corpus.json").write_text(json.dumps(stats, indent=2, default=str))
    (ctx.out / "metrics.json").write_text(json.dumps({"corpus": stats}, indent=2, default=str))
    with open(ctx.out / "heldout.jsonl", "w", encoding="utf-8") as handle:  # for `kinject vocab compare --corpus`
        for text in read_texts(ctx.out / "heldout.arrow"):
            handle.write(json.dumps({"text": text}) + "\n")
