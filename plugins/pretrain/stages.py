"""The pretrain strategy's declared stages: configs (what each key holds) and module-level bodies.

corpus (dedupe, test text out, held-out slice; Arrow) -> vocab (WordPiece) -> pack (token sequences; Arrow)
-> head (fit a missing MLM head on the frozen encoder) -> mlm (whole-word masking) -> evaluate (held-out
perplexity of the output vs the reference) -> report (merged with the task metrics when a task is given).
Bodies write on the main process only; the engine's barrier after each stage lets the others read.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import Field

from kinject.api import (NOT_KEYED, ModelRef, SourceRef, StageConfig, StageContext, TaskRef, TrainingSpec,
                         is_main_process)

log = logging.getLogger("kinject")


def _texts(path: Path, limit: int | None = None):
    """Stream the ``text`` column of an Arrow corpus file (memory-mapped)."""
    from datasets import Dataset

    corpus = Dataset.from_file(str(path))
    count = 0
    for batch in corpus.iter(batch_size=1000):
        for text in batch["text"]:
            if limit is not None and count >= limit:
                return
            count += 1
            yield text


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str))


# -- corpus ------------------------------------------------------------------------------------ #
class CorpusStageConfig(StageConfig):
    source: SourceRef
    exclude: list[TaskRef] = Field(default_factory=list, description="Tasks whose test text is also removed "
                                   "(the run's own task).")
    heldout_fraction: float
    heldout_max_texts: int


def corpus_body(cfg: CorpusStageConfig, ctx: StageContext) -> None:
    from datasets import Features, Value
    from datasets.arrow_writer import ArrowWriter

    from kinject.api import DataError
    from kinject.plugins.knowledge.sources.corpus import HeldOutText

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
    stats = {"train_texts": counts["train"], "heldout_texts": counts["heldout"], "chars": chars,
             "run_task_test_texts": held.texts, **{k.replace(" ", "_"): v for k, v in source.stats.items()}}
    _write_json(ctx.out / "corpus.json", stats)
    _write_json(ctx.out / "metrics.json", {"corpus": stats})
    with open(ctx.out / "heldout.jsonl", "w", encoding="utf-8") as handle:  # for `kinject vocab compare --corpus`
        for text in _texts(ctx.out / "heldout.arrow"):
            handle.write(json.dumps({"text": text}) + "\n")


# -- vocabulary -------------------------------------------------------------------------------- #
class VocabConfig(StageConfig):
    size: int
    min_frequency: int
    alphabet_limit: int
    lowercase: bool
    model_max_length: int


def vocab_body(cfg: VocabConfig, ctx: StageContext) -> None:
    from datasets import Dataset

    from .vocab import train_wordpiece

    if not is_main_process():
        return
    path = ctx.inputs["pretrain-corpus"] / "train.arrow"
    tokenizer = train_wordpiece(_texts(path), cfg.size, cfg.min_frequency, cfg.alphabet_limit, cfg.lowercase,
                                cfg.model_max_length, length=len(Dataset.from_file(str(path))))
    tokenizer.save_pretrained(ctx.out / "tokenizer")
    vocab = tokenizer.get_vocab()
    stats = {"size": len(vocab), "target_size": cfg.size, "alphabet": sum(len(t) == 1 for t in vocab),
             "continuation_alphabet": sum(len(t) == 3 and t.startswith("##") for t in vocab)}
    _write_json(ctx.out / "vocab.json", stats)
    _write_json(ctx.out / "metrics.json", {"vocab": stats})


# -- packing ----------------------------------------------------------------------------------- #
class PackConfig(StageConfig):
    model: ModelRef | None = Field(None, description="The base model whose tokenizer packs (vocab=keep).")
    vocab_stage: str | None = Field(None, description="The stage whose tokenizer/ packs (vocab=train).")
    max_length: int


def stage_tokenizer(model: ModelRef | None, vocab_stage: str | None, ctx: StageContext):
    from kinject.api import load_tokenizer

    return load_tokenizer(str(ctx.inputs[vocab_stage] / "tokenizer")) if vocab_stage else model.load_tokenizer()


def pack_body(cfg: PackConfig, ctx: StageContext) -> None:
    from .masking import pack_to_arrow

    if not is_main_process():
        return
    tokenizer = stage_tokenizer(cfg.model, cfg.vocab_stage, ctx)
    stats = pack_to_arrow(_texts(ctx.inputs["pretrain-corpus"] / "train.arrow"), tokenizer, cfg.max_length,
                          ctx.out / "packed.arrow")
    stats["useful_token_fraction"] = stats["tokens"] / max(1, stats["sequences"] * cfg.max_length)
    _write_json(ctx.out / "pack.json", stats)


# -- masked-LM training (also the head fit) ---------------------------------------------------- #
class MaskingConfig(StageConfig):
    probability: float
    mask_replace: float
    random_replace: float


class MlmConfig(StageConfig):
    """``mode``: head (fit the MLM head on the frozen base encoder), continual (from the base model or the
    ``start_stage`` model), scratch (random init of ``scratch``'s shape)."""

    model: ModelRef
    mode: Literal["head", "continual", "scratch"]
    scratch: dict = Field(default_factory=dict)
    vocab_stage: str | None = None
    start_stage: str | None = None
    pack_stage: str = "pretrain-pack"
    max_length: int
    masking: MaskingConfig
    training: TrainingSpec
    seed: int


def _start_model(cfg: MlmConfig, tokenizer, ctx: StageContext):
    """(masked-LM, pooler weights) the stage trains from."""
    import torch
    from transformers import AutoModelForMaskedLM

    from kinject.api import keep_layers, load_tokenizer

    from .mlm import freeze_encoder, load_mlm, pooler_state, scratch_config
    from .vocab import transfer_embeddings

    attn = cfg.model.attn_implementation
    if cfg.mode == "scratch":
        config = scratch_config(cfg.model.path, cfg.model.revision, tokenizer,
                                {"layers": cfg.model.layers, **{k: v for k, v in cfg.scratch.items() if v is not None}})
        torch.manual_seed(cfg.seed)
        model = AutoModelForMaskedLM.from_config(config, attn_implementation=attn)
        return model, pooler_state(config, attn=attn)
    start = str(ctx.inputs[cfg.start_stage] / "model") if cfg.start_stage else cfg.model.path
    revision = None if cfg.start_stage else cfg.model.revision
    model, missing = load_mlm(start, revision, attn)
    if not cfg.start_stage:
        keep_layers(model, cfg.model.layers)
    if missing and cfg.mode == "continual":
        log.warning("%s has no MLM head (%s, ...): continual pretraining starts from a random head "
                    "(strategy.head_steps=0)", start, missing[0])
    if cfg.mode == "head":
        log.info("MLM head fit: %d trainable parameters (encoder frozen)", freeze_encoder(model))
    if cfg.vocab_stage:
        old = load_tokenizer(start, revision)
        log.info("vocabulary transfer: %s", transfer_embeddings(model, old, tokenizer))
    return model, pooler_state(start, revision, attn)


def mlm_body(cfg: MlmConfig, ctx: StageContext) -> None:
    from datasets import Dataset

    from .masking import WholeWordMaskCollator
    from .mlm import save_mlm, train_mlm

    tokenizer = stage_tokenizer(cfg.model, cfg.vocab_stage, ctx)
    model, pooler = _start_model(cfg, tokenizer, ctx)
    dataset = Dataset.from_file(str(ctx.inputs[cfg.pack_stage] / "packed.arrow"))
    collator = WholeWordMaskCollator(tokenizer, cfg.masking.probability, cfg.masking.mask_replace,
                                     cfg.masking.random_replace, seed=cfg.seed)
    stats = train_mlm(model, dataset, collator, cfg.training, ctx.work, cfg.seed, ctx.name, ctx.resume)
    if is_main_process():
        save_mlm(model, tokenizer, pooler, ctx.out / "model")
        _write_json(ctx.out / "train.json", stats)


# -- held-out perplexity ----------------------------------------------------------------------- #
MLM_SHOWN = ("train_loss", "global_step", "train_runtime", "tokens_per_second", "useful_token_fraction", "world_size")


class PerplexityConfig(StageConfig):
    """The output model vs the reference (the base model, with its fitted head when ``reference_stage``)."""

    reference: ModelRef
    reference_stage: str | None = None
    max_length: int
    probability: float
    texts: int
    seed: int = 0
    batch_size: int = Field(16, json_schema_extra=NOT_KEYED)


def perplexity_body(cfg: PerplexityConfig, ctx: StageContext) -> None:
    from kinject.api import keep_layers, load_tokenizer

    from .mlm import load_mlm, masked_windows, score_windows

    if not is_main_process():
        return
    texts = list(_texts(ctx.inputs["pretrain-corpus"] / "heldout.arrow", cfg.texts))
    attn = cfg.reference.attn_implementation
    if cfg.reference_stage:
        reference_path, revision = str(ctx.inputs[cfg.reference_stage] / "model"), None
    else:
        reference_path, revision = cfg.reference.path, cfg.reference.revision
    reference, missing = load_mlm(reference_path, revision, attn)
    if not cfg.reference_stage:
        keep_layers(reference, cfg.reference.layers)
    output_path = str(ctx.inputs["pretrain-mlm"] / "model")
    models = {"reference": (reference, load_tokenizer(reference_path, revision)),
              "output": (load_mlm(output_path, None, attn)[0], load_tokenizer(output_path))}
    windows = masked_windows(texts, {k: tok for k, (_, tok) in models.items()}, cfg.max_length, cfg.probability,
                             cfg.seed)
    scores = {k: score_windows(model, windows[k], tok.pad_token_id, cfg.batch_size)
              for k, (model, tok) in models.items()}
    heldout = dict(scores["output"])
    heldout.update({f"reference_{k}": v for k, v in scores["reference"].items()})
    same = models["reference"][1].get_vocab() == models["output"][1].get_vocab()
    heldout.update(texts=len(texts), same_vocabulary=same, reference_head="random" if missing else "trained",
                   word_perplexity_ratio=heldout["word_perplexity"] / heldout["reference_word_perplexity"])
    if same:  # per-token perplexities compare only over the same tokens
        heldout["perplexity_ratio"] = heldout["perplexity"] / heldout["reference_perplexity"]
    train = json.loads((ctx.inputs["pretrain-mlm"] / "train.json").read_text())
    metrics = {"heldout": heldout,
               "corpus": json.loads((ctx.inputs["pretrain-corpus"] / "corpus.json").read_text()),
               "mlm": {k: train[k] for k in MLM_SHOWN if k in train}}
    log.info("held-out perplexity %.3f (reference %.3f); per word %.3f (reference %.3f)", heldout["perplexity"],
             heldout["reference_perplexity"], heldout["word_perplexity"], heldout["reference_word_perplexity"])
    _write_json(ctx.out / "metrics.json", metrics)


# -- the run's metrics with a task --------------------------------------------------------------- #
class ReportConfig(StageConfig):
    perplexity_stage: str
    task_stage: str


def report_body(cfg: ReportConfig, ctx: StageContext) -> None:
    if not is_main_process():
        return
    task = json.loads((ctx.inputs[cfg.task_stage] / "metrics.json").read_text())
    pretrain = json.loads((ctx.inputs[cfg.perplexity_stage] / "metrics.json").read_text())
    _write_json(ctx.out / "metrics.json", {**task, **pretrain})
