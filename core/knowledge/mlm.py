"""Continued masked-LM training as public stage builders: pack texts (:func:`pack_stage`), then train a masked-LM
on them with whole-word (default) or token-level masking (:func:`mlm_stage`) - continuing the run's model, fitting
its missing MLM head, or from scratch. A strategy builds them in ``stages`` from its own texts stage::

    from kinject.knowledge.mlm import mlm_stage, pack_stage

    texts = Stage(name="my-texts", body=my_texts_body, config=...)     # writes texts.jsonl ({"text": ...} a line)
    pack = pack_stage(run, "my-pack", texts_stage="my-texts")
    mlm = mlm_stage(run, "my-mlm", pack_stage=pack, steps=1000, learning_rate=1e-4, batch_size=32)
    tuned = finetune_stage(run, "my-finetune", init_from="my-mlm")    # kinject.api

The texts file's forms are in :mod:`.packing`. An MLM stage writes ``model/`` (the masked-LM with the encoder's
pooler: ``AutoModelForMaskedLM`` and ``AutoModel`` load it; ``init_from`` of a fine-tune stage takes it) and
``train.json`` (loss, steps, tokens/s, useful-token fraction, the model's architecture and parameter counts).
Masking is seeded per batch (resumes are exact).
"""

from __future__ import annotations

import json
import logging
from typing import Literal

from pydantic import Field

from kinject.api import ModelRef, PeftSpec, SpecError, Stage, StageConfig, StageContext, TrainingSpec, is_main_process
from kinject.training import method_stage_training

from .packing import (PACKED_FILE, TEXTS_FILE, PackConfig, mlm_model_ref, pack_stage, read_texts,  # noqa: F401
                      stage_tokenizer)

log = logging.getLogger("kinject")

__all__ = ["MaskingConfig", "MlmConfig", "PackConfig", "TEXTS_FILE", "mlm_body", "mlm_model_ref", "mlm_stage",
           "mlm_training_spec", "pack_stage", "read_texts"]

MODES = ("head", "continual", "scratch")


class MaskingConfig(StageConfig):
    """Masking: the unit (whole words, or single tokens), the share of units selected, and of those the share
    replaced by [MASK] or by random tokens (the rest are kept)."""

    unit: Literal["whole_word", "token"] = "whole_word"
    probability: float = 0.15
    mask_replace: float = 0.8
    random_replace: float = 0.1


class MlmConfig(StageConfig):
    """``mode``: head (fit the MLM head on the frozen encoder), continual (from the base model or the
    ``start_stage`` model), scratch (random init of ``scratch``'s shape: layers, hidden, heads, intermediate,
    positions; unset ones are the base model's)."""

    model: ModelRef
    mode: Literal["head", "continual", "scratch"]
    scratch: dict = Field(default_factory=dict)
    vocab_stage: str | None = None
    start_stage: str | None = None
    pack_stage: str
    max_length: int
    masking: MaskingConfig
    training: TrainingSpec
    seed: int
    peft: PeftSpec | None = None

    def cost(self, run) -> float | None:
        """Packed sequences of ``max_length`` tokens for ``training.max_steps`` steps (None when it trains epochs of a
        corpus not read yet)."""
        from kinject.training import trained_flops

        t = self.training
        if not t.max_steps or t.max_steps <= 0:
            return None
        return trained_flops(run, t.max_steps * t.gradient_accumulation_steps, t.batch_size, self.max_length)


def mlm_training_spec(training: TrainingSpec, steps: int, learning_rate: float, batch_size: int,
                      gradient_accumulation: int = 1, warmup_ratio: float = 0.1,
                      epochs: float | None = None) -> TrainingSpec:
    """The run's training spec for MLM training: ``steps`` optimiser steps (or, given ``epochs``, that many epochs
    of the packed sequences) of ``batch_size`` sequences, linear warm-up over ``warmup_ratio`` of them to
    ``learning_rate``, then linear decay to 0; weight decay, precision and checkpoint interval from ``training``; the
    fine-tuning-only settings (set by a task's recommended values) nulled, so they are not in the key. Batches are
    length-grouped in a seeded order (what the stage's dose reconstructs)."""
    if epochs:
        return method_stage_training(
            training, epochs=epochs, max_steps=-1, learning_rate=learning_rate, batch_size=batch_size,
            gradient_accumulation_steps=gradient_accumulation, warmup_ratio=warmup_ratio, group_by_length=True)
    return method_stage_training(
        training, epochs=1.0, max_steps=steps, learning_rate=learning_rate, batch_size=batch_size,
        gradient_accumulation_steps=gradient_accumulation, warmup_ratio=warmup_ratio, group_by_length=True)


def mlm_stage(run, name: str, pack_stage: Stage, steps: int, learning_rate: float, batch_size: int, *,
              gradient_accumulation: int = 1, warmup_ratio: float = 0.1,
              mode: Literal["head", "continual", "scratch"] = "continual", start_stage: Stage | None = None,
              scratch: dict | None = None, masking: MaskingConfig | None = None, seed: int = 0,
              allow_random_head: bool = False, produces_model: bool = False, epochs: float | None = None,
              peft: PeftSpec | None = None) -> Stage:
    """A stage training a masked-LM on the sequences of ``pack_stage`` (a :func:`pack_stage`; its tokenizer and
    length are the model's). ``mode`` continual starts from the run's model, or the model of ``start_stage``
    (an MLM stage, e.g. a ``mode="head"`` fit); scratch from random weights (``scratch``: the shape).
    ``seed`` is fixed by default, so ``--repeats`` re-runs only what comes after. ``epochs`` (e.g. the run's
    ``knowledge.epochs``, :attr:`kinject.api.RunContext.knowledge_epochs`) replaces ``steps`` by epochs of the packed
    sequences. The stage writes its dose (``dose.json``: texts and tokens consumed). Checked here (SpecError): the
    budget and masking shares, the length against the model's positions, and - continuing from the run's model -
    an MLM head in its checkpoint (else fit one first and pass it as ``start_stage``, or ``allow_random_head``).
    ``peft`` (mode continual only) trains LoRA or IA3 adapters on the frozen model instead of every weight; ``model/``
    holds the merged model (``init_from`` takes it as any other) and ``peft-adapter/`` the adapter. Resumes and DDP
    are the same as without it."""
    from .masked_lm import missing_mlm_head, model_positions

    if not isinstance(pack_stage.config, PackConfig):
        raise TypeError(f"{name}: pack_stage must be a stage built by pack_stage(), got {pack_stage.name!r}")
    masking = masking or MaskingConfig()
    problem = _settings_problem(mode, steps, learning_rate, batch_size, gradient_accumulation, warmup_ratio, masking,
                                start_stage is not None, bool(scratch), peft is not None)
    if problem:
        raise SpecError(f"{name}: {problem}")
    pack = pack_stage.config
    model = mlm_model_ref(run, pack.max_length)
    shape = dict(scratch or {})
    positions = shape.get("positions") if mode == "scratch" and shape.get("positions") else model_positions(model)
    if pack.max_length > positions:
        raise SpecError(f"{name}: max_length {pack.max_length} (of {pack_stage.name!r}) is beyond the {positions} "
                        f"positions of model {run.spec.model.name!r}")
    if mode == "continual" and start_stage is None and not allow_random_head:
        missing = missing_mlm_head(model)
        if missing:
            raise SpecError(f"{name}: model {run.spec.model.name!r} ships no MLM head ({missing[0]}, ...): fit one "
                            "first (mlm_stage(..., mode='head')) and pass it as start_stage, or allow_random_head")
    start = start_stage.name if start_stage is not None else None
    config = MlmConfig(model=model, mode=mode, scratch=shape, vocab_stage=pack.vocab_stage, start_stage=start,
                       pack_stage=pack_stage.name, max_length=pack.max_length, masking=masking, seed=seed, peft=peft,
                       training=mlm_training_spec(run.spec.training, steps, learning_rate, batch_size,
                                                  gradient_accumulation, warmup_ratio, epochs))
    return Stage(name=name, body=mlm_body, config=config, produces_model=produces_model,
                 inputs=tuple(s for s in (pack_stage.name, pack.vocab_stage, start) if s))


def _settings_problem(mode: str, steps: int, learning_rate: float, batch_size: int, accumulation: int,
                      warmup_ratio: float, masking: MaskingConfig, has_start: bool, has_shape: bool,
                      has_peft: bool = False) -> str | None:
    """What is wrong with an MLM stage's settings (None: nothing)."""
    if mode not in MODES:
        return f"mode {mode!r} is not one of {', '.join(MODES)}"
    if min(steps, batch_size, accumulation) < 1:
        return f"steps ({steps}), batch_size ({batch_size}) and gradient_accumulation ({accumulation}) must be >= 1"
    if learning_rate <= 0 or not 0 <= warmup_ratio <= 1:
        return f"learning_rate ({learning_rate:g}) must be > 0 and warmup_ratio ({warmup_ratio:g}) within 0 .. 1"
    if not 0 < masking.probability < 1:
        return f"masking.probability ({masking.probability:g}) must be within 0 .. 1, both excluded"
    replaced = (masking.mask_replace, masking.random_replace)
    if min(replaced) < 0 or sum(replaced) > 1:
        return f"masking.mask_replace + random_replace ({sum(replaced):g}) must be within 0 .. 1, each >= 0"
    if mode == "scratch" and has_start:
        return "mode 'scratch' takes no start_stage (a from-scratch model starts from random weights)"
    if has_shape and mode != "scratch":
        return "scratch (a shape) applies to mode 'scratch' only"
    if has_peft and mode != "continual":
        return f"peft applies to mode 'continual' only (mode {mode!r} trains " + \
            ("the head alone)" if mode == "head" else "every weight from random ones)")
    return None


# -- the body ---------------------------------------------------------------------------------- #
def start_model(cfg: MlmConfig, tokenizer, ctx: StageContext):
    """(masked-LM, pooler weights) the stage trains from."""
    import torch
    from transformers import AutoModelForMaskedLM

    from kinject.api import keep_layers, load_tokenizer

    from .masked_lm import freeze_encoder, load_mlm, pooler_state, scratch_config, transfer_embeddings

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
        log.warning("%s has no MLM head (%s, ...): continual pretraining starts from a random head", start, missing[0])
    if cfg.mode == "head":
        log.info("MLM head fit: %d trainable parameters (encoder frozen)", freeze_encoder(model))
    if cfg.vocab_stage:
        old = load_tokenizer(start, revision)
        log.info("vocabulary transfer: %s", transfer_embeddings(model, old, tokenizer))
    return model, pooler_state(start, revision, attn)


def mlm_body(cfg: MlmConfig, ctx: StageContext) -> None:
    from datasets import Dataset

    from .masked_lm import architecture, save_mlm, train_mlm
    from .masking import WholeWordMaskCollator

    tokenizer = stage_tokenizer(cfg.model, cfg.vocab_stage, ctx)
    model, pooler = start_model(cfg, tokenizer, ctx)
    dataset = Dataset.from_file(str(ctx.inputs[cfg.pack_stage] / PACKED_FILE))
    collator = WholeWordMaskCollator(tokenizer, cfg.masking.probability, cfg.masking.mask_replace,
                                     cfg.masking.random_replace, seed=cfg.seed, unit=cfg.masking.unit)
    shape = architecture(model)  # the model's own, without adapters
    if cfg.peft is not None:
        from kinject.training import add_peft

        model = add_peft(model, cfg.peft)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        log.info("%s: peft %s, %d trainable parameters (the model frozen)", ctx.name, cfg.peft.method, trainable)
    stats = train_mlm(model, dataset, collator, cfg.training, ctx.work, cfg.seed, ctx.name, ctx.resume)
    stats["architecture"] = shape
    if cfg.peft is not None:
        from kinject.training import merged

        stats["trainable_parameters"] = float(sum(p.numel() for p in model.parameters() if p.requires_grad))
        model = merged(model, ctx.out / "peft-adapter" if is_main_process() else None)
    if is_main_process():
        save_mlm(model, tokenizer, pooler, ctx.out / "model")
        if cfg.mode != "head":  # a head fit on a frozen encoder injects nothing
            stats["dose"] = write_text_dose(ctx.out, ctx.inputs[cfg.pack_stage], dataset, cfg.training,
                                            int(stats["global_step"]), cfg.seed)
        (ctx.out / "train.json").write_text(json.dumps(stats, indent=2, default=str))


def write_text_dose(out, pack_folder, dataset, training: TrainingSpec, steps: int, seed: int) -> dict | None:
    """The dose of an MLM stage: the packed sequences its steps consumed (the length-grouped order, reconstructed),
    the documents they hold and their tokens (None for a pack stage written before documents were recorded)."""
    import numpy as np

    from .dose import write_dose
    from kinject.training import consumed_rows, row_lengths

    from .packing import DOCUMENT_KEYS_FILE, DOCUMENTS_FILE

    if not (pack_folder / DOCUMENTS_FILE).is_file():
        return None
    spans = np.load(pack_folder / DOCUMENTS_FILE, allow_pickle=False)
    keys = np.load(pack_folder / DOCUMENT_KEYS_FILE, allow_pickle=False)
    lengths = np.asarray(row_lengths(dataset), dtype=np.int64)
    taken = consumed_rows(lengths, training.batch_size, steps, seed, training.gradient_accumulation_steps)
    covered = np.zeros(len(keys), dtype=bool)
    for first, last in spans[np.unique(taken)]:
        covered[first:last + 1] = True
    seen = int((spans[taken, 1] - spans[taken, 0] + 1).sum())
    return write_dose(out, unit="texts", covered=keys[covered], seen=seen, rows_seen=len(taken),
                      rows_total=len(lengths), available=len(np.unique(keys)), tokens=int(lengths[taken].sum()))
