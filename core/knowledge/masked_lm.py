"""Masked-LM models: loading (and whether a checkpoint lacks its MLM head), the starting points of MLM training
(a from-scratch config, a new vocabulary's embeddings, a frozen encoder for a head fit), training through HF
Trainer with sparse prediction, and saving so both ``AutoModelForMaskedLM`` and ``AutoModel`` load everything."""

from __future__ import annotations

import functools
import logging
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

log = logging.getLogger("kinject")

MLM_HEAD_PREFIXES = ("cls.", "lm_head.", "vocab_", "generator_lm_head", "predictions.")
#: a from-scratch shape's fields and the (BERT-style) config attributes they set
SHAPE_ATTRIBUTES = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
                    "intermediate": "intermediate_size", "positions": "max_position_embeddings"}


def load_mlm(path: str, revision: str | None = None, attn: str = "sdpa"):
    """``AutoModelForMaskedLM`` at ``path`` and the names of the head weights the checkpoint lacked."""
    from transformers import AutoModelForMaskedLM

    from kinject.api import offline

    model, info = AutoModelForMaskedLM.from_pretrained(path, revision=revision, local_files_only=offline(),
                                                       attn_implementation=attn, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if k.startswith(MLM_HEAD_PREFIXES)]
    return model, missing


@functools.lru_cache(maxsize=32)
def _missing_head(path: str, revision: str | None, attn: str, fingerprint: str) -> tuple[str, ...]:
    return tuple(load_mlm(path, revision, attn)[1])


def missing_mlm_head(model) -> list[str]:
    """The MLM head weights a model's checkpoint lacks (a ``ModelRef``; [] when it ships its head), remembered per
    model for the process (checks and stage builders ask for it in turn)."""
    return list(_missing_head(model.path, model.revision, model.attn_implementation, model.fingerprint))


def model_positions(model) -> int:
    """The longest sequence a model (a ``ModelRef``) takes, from its config."""
    from transformers import AutoConfig

    from kinject.api import usable_positions

    return usable_positions(AutoConfig.from_pretrained(model.path, revision=model.revision))


def scratch_config(base_path: str, revision: str | None, tokenizer, shape: dict):
    """The base model's config with a new vocabulary size and the given shape (unset: the base model's)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base_path, revision=revision)
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.pad_token_id
    for key, attribute in SHAPE_ATTRIBUTES.items():
        if shape.get(key) is not None:
            setattr(config, attribute, shape[key])
    if shape.get("hidden") is not None and shape.get("intermediate") is None:
        config.intermediate_size = 4 * shape["hidden"]
    return config


def architecture(model) -> dict:
    """A masked-LM's shape (layers, hidden, heads, intermediate, positions, vocabulary; None where its config
    names them otherwise) and parameter counts (all, and the encoder's), to show two models are the same size."""
    names = {**SHAPE_ATTRIBUTES, "vocab": "vocab_size"}
    shape = {key: getattr(model.config, attribute, None) for key, attribute in names.items()}
    shape.update(parameters=sum(p.numel() for p in model.parameters()),
                 encoder_parameters=sum(p.numel() for p in model.base_model.parameters()))
    return shape


def pooler_state(model_or_path, revision: str | None = None, attn: str = "sdpa") -> dict:
    """The encoder's pooler weights (``AutoModel``'s ``pooler``), keyed as the masked-LM's state dict names
    them, from a checkpoint path or a config (a fresh, seeded pooler); {} when the architecture has none."""
    from transformers import AutoModel, PretrainedConfig

    from kinject.api import offline

    if isinstance(model_or_path, PretrainedConfig):
        encoder = AutoModel.from_config(model_or_path, attn_implementation=attn)
    else:
        encoder = AutoModel.from_pretrained(model_or_path, revision=revision, local_files_only=offline(),
                                            attn_implementation=attn)
    pooler = getattr(encoder, "pooler", None)
    if pooler is None:
        return {}
    return {f"{encoder.base_model_prefix}.pooler.{k}": v.detach().clone() for k, v in pooler.state_dict().items()}


def save_mlm(model, tokenizer, pooler: dict, directory: Path) -> None:
    """Save the masked-LM with the encoder's pooler: ``AutoModelForMaskedLM`` loads its head (nothing newly
    initialised) and ``AutoModel`` its pooler."""
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state.update(pooler)
    model.save_pretrained(directory, state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def transfer_embeddings(model, old_tokenizer, new_tokenizer) -> dict[str, int]:
    """Resize ``model`` (a masked-LM) to ``new_tokenizer`` and start each new token's input embedding and
    output bias as the mean over the pieces the old vocabulary splits its text into (the new vocabulary's special
    tokens map to their old counterparts; a token the old vocabulary cannot spell keeps a random vector)."""
    import torch

    old_embeddings = model.get_input_embeddings().weight.detach().clone()
    old_bias = _output_bias(model)
    old_bias = old_bias.detach().clone() if old_bias is not None else None
    model.resize_token_embeddings(len(new_tokenizer))
    weight = model.get_input_embeddings().weight
    bias = _output_bias(model)
    specials = {new_tokenizer.convert_tokens_to_ids(t): old_tokenizer.convert_tokens_to_ids(t)
                for t in new_tokenizer.all_special_tokens if t in old_tokenizer.get_vocab()}
    counts = {"tokens": len(new_tokenizer), "copied": 0, "averaged": 0, "random": 0}
    with torch.no_grad():
        for token, index in new_tokenizer.get_vocab().items():
            if index in specials:
                pieces = [specials[index]]
            else:
                pieces = old_tokenizer(token.removeprefix("##"), add_special_tokens=False)["input_ids"]
                pieces = [p for p in pieces if p != old_tokenizer.unk_token_id]
            if not pieces:
                counts["random"] += 1
                continue
            counts["copied" if len(pieces) == 1 else "averaged"] += 1
            weight[index] = old_embeddings[pieces].mean(0)
            if bias is not None and old_bias is not None:
                bias[index] = old_bias[pieces].mean()
    model.tie_weights()
    return counts


def _output_bias(model):
    out = model.get_output_embeddings()
    return getattr(out, "bias", None) if out is not None else None


def freeze_encoder(model) -> int:
    """Freeze everything but the MLM head's own weights (the tied decoder stays frozen with the embeddings);
    returns the number of trainable parameters left."""
    for param in model.base_model.parameters():
        param.requires_grad = False
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def mlm_head(model):
    """The masked-LM's head (hidden states -> vocabulary logits) when it is the one module beside the encoder
    (BERT's ``cls``, RoBERTa's ``lm_head``); None otherwise."""
    others = [module for name, module in model.named_children() if name != model.base_model_prefix]
    return others[0] if len(others) == 1 else None


@contextmanager
def sparse_prediction(model) -> Iterator[bool]:
    """While active, a forward with labels applies the MLM head to the labelled positions only: the same loss
    (mean cross-entropy over the labelled tokens) without projecting the other ~85% of the tokens onto the
    vocabulary, often the largest matrix product of a small encoder. Yields whether it applies."""
    import torch.nn.functional as F
    from transformers.modeling_outputs import MaskedLMOutput

    head = mlm_head(model)
    if head is None:
        yield False
        return
    full = model.forward

    def forward(input_ids=None, attention_mask=None, token_type_ids=None, labels=None):
        if labels is None:
            return full(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask, **extra)[0]
        where = labels != -100
        logits = head(hidden[where])
        return MaskedLMOutput(loss=F.cross_entropy(logits.float(), labels[where]), logits=logits)

    model.forward = forward
    try:
        yield True
    finally:
        del model.forward


def train_mlm(model, dataset, collator, training, work: Path, seed: int, stage: str, resume: bool,
              sparse: bool = True) -> dict:
    """Train ``model`` on a packed, memory-mapped ``dataset`` through HF Trainer with kinject's training
    arguments (seeded, resumable from ``work``, DDP under torchrun), the head applied only where there are
    labels (:func:`sparse_prediction`) unless ``sparse`` is off. Returns loss, steps, tokens/s."""
    from transformers import Trainer, set_seed

    from kinject.api import world_size
    from kinject.training import (EpochCallback, HookCallback, PaddingCounter, last_checkpoint, quiet_progress,
                                          training_arguments, with_length_buckets)

    set_seed(seed)
    counter = PaddingCounter(collator)
    args = training_arguments(training, work, seed, remove_unused_columns=False)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model: the one it wraps
    with sparse_prediction(inner) if sparse else nullcontext():  # length-grouped: an order the dose reconstructs
        trainer = with_length_buckets(Trainer)(model=model, args=args, train_dataset=dataset, data_collator=counter,
                                               callbacks=[HookCallback(stage, None, None), EpochCallback(collator)])
        quiet_progress(trainer)
        checkpoint = last_checkpoint(work) if resume else None
        result = trainer.train(resume_from_checkpoint=checkpoint)
    stats = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    runtime = stats.get("train_runtime") or float("nan")
    stats.update(useful_token_fraction=counter.useful_fraction, global_step=float(result.global_step),
                 world_size=float(world_size()), tokens_per_second=counter.useful * world_size() / runtime,
                 resumed_from_step=float(int(checkpoint.rsplit("-", 1)[-1])) if checkpoint else 0.0)
    return stats
