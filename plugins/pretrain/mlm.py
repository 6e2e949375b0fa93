"""Masked-LM models: the starting model (continual, new vocabulary, or from scratch), training through HF
Trainer, saving so both ``AutoModelForMaskedLM`` and ``AutoModel`` load everything, and held-out perplexity."""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import numpy as np

log = logging.getLogger("kinject")

MLM_HEAD_PREFIXES = ("cls.", "lm_head.", "vocab_", "generator_lm_head", "predictions.")


def usable_positions(config) -> int:
    """The longest sequence a model's position embeddings hold (RoBERTa-style models reserve padding_idx + 1)."""
    positions = int(getattr(config, "max_position_embeddings", 0) or 0)
    if "roberta" in str(getattr(config, "model_type", "")) or getattr(config, "model_type", "") == "camembert":
        positions -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    return positions


def load_mlm(path: str, revision: str | None = None, attn: str = "sdpa"):
    """``AutoModelForMaskedLM`` at ``path`` and the names of the head weights the checkpoint lacked."""
    from transformers import AutoModelForMaskedLM

    from kinject.api import offline

    model, info = AutoModelForMaskedLM.from_pretrained(path, revision=revision, local_files_only=offline(),
                                                       attn_implementation=attn, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if k.startswith(MLM_HEAD_PREFIXES)]
    return model, missing


def scratch_config(base_path: str, revision: str | None, tokenizer, shape: dict):
    """The base model's config with a new vocabulary size and the given shape (unset: the base model's)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base_path, revision=revision)
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.pad_token_id
    names = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
             "intermediate": "intermediate_size", "positions": "max_position_embeddings"}
    for key, attribute in names.items():
        if shape.get(key) is not None:
            setattr(config, attribute, shape[key])
    if shape.get("hidden") is not None and shape.get("intermediate") is None:
        config.intermediate_size = 4 * shape["hidden"]
    return config


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

    from kinject.api import (EpochCallback, HookCallback, PaddingCounter, last_checkpoint, quiet_progress,
                             training_arguments, world_size)

    set_seed(seed)
    counter = PaddingCounter(collator)
    args = training_arguments(training, work, seed, remove_unused_columns=False)
    with sparse_prediction(model) if sparse else nullcontext():
        trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=counter,
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


# -- held-out perplexity ------------------------------------------------------------------------ #
def _word_pieces(tokenizer, text: str, starts: list[int]) -> list[list[int]]:
    """Token ids of each shared word (by the character offset where each token starts)."""
    import bisect

    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    words: list[list[int]] = [[] for _ in starts]
    for token, (start, end) in zip(encoded["input_ids"], encoded["offset_mapping"]):
        index = bisect.bisect_right(starts, start) - 1
        if index >= 0 and end > start:
            words[index].append(token)
    return words


def masked_windows(texts: list[str], tokenizers: dict[str, object], max_length: int, probability: float,
                   seed: int) -> dict[str, list[tuple[list[int], list[int], list[int]]]]:
    """Per tokenizer, (input ids, labels, word index per label) of the same masked words: each text's words
    (BERT pre-tokenisation, shared by all tokenizers) are cut into windows that fit ``max_length`` with every
    tokenizer; ``probability`` of each window's words (at least one) are replaced by [MASK] (all their tokens)."""
    from tokenizers.pre_tokenizers import BertPreTokenizer

    split = BertPreTokenizer()
    out: dict[str, list] = {label: [] for label in tokenizers}
    budget = max_length - 2
    word_count = 0
    for doc, text in enumerate(texts):
        starts = [span[0] for _, span in split.pre_tokenize_str(text)]
        if not starts:
            continue
        pieces = {label: _word_pieces(tok, text, starts) for label, tok in tokenizers.items()}
        windows: list[list[int]] = [[]]
        used = dict.fromkeys(tokenizers, 0)
        for w in range(len(starts)):
            sizes = {label: len(pieces[label][w]) for label in tokenizers}
            if max(sizes.values()) > budget:
                continue
            if any(used[label] + sizes[label] > budget for label in tokenizers):
                windows.append([])
                used = dict.fromkeys(tokenizers, 0)
            windows[-1].append(w)
            for label in tokenizers:
                used[label] += sizes[label]
        for k, window in enumerate(windows):
            maskable = [w for w in window if all(pieces[label][w] for label in tokenizers)]
            if not maskable:
                continue
            rng = np.random.default_rng([seed, doc, k])
            chosen = {w for w in maskable if rng.random() < probability} or {maskable[rng.integers(len(maskable))]}
            for label, tok in tokenizers.items():
                ids, labels, owners = [tok.cls_token_id], [-100], []
                for w in window:
                    for piece in pieces[label][w]:
                        ids.append(tok.mask_token_id if w in chosen else piece)
                        labels.append(piece if w in chosen else -100)
                        if w in chosen:
                            owners.append(word_count + w)
                ids.append(tok.sep_token_id)
                labels.append(-100)
                out[label].append((ids, labels, owners))
        word_count += len(starts)
    return out


def score_windows(model, windows: list[tuple[list[int], list[int], list[int]]], pad_id: int,
                  batch_size: int = 16) -> dict[str, float]:
    """Masked-token NLL of ``model`` over ``windows``: per-token loss and perplexity, and per masked word (the
    sum over its tokens) loss and perplexity."""
    import torch

    model.eval()
    token_nll: list[float] = []
    owners: list[int] = []
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i][0]))
    with torch.inference_mode():
        for lo in range(0, len(order), batch_size):
            batch = [windows[i] for i in order[lo:lo + batch_size]]
            longest = max(len(ids) for ids, _, _ in batch)
            ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
            labels = torch.full((len(batch), longest), -100, dtype=torch.long)
            attention = torch.zeros((len(batch), longest), dtype=torch.long)
            for row, (i, lab, own) in enumerate(batch):
                ids[row, :len(i)] = torch.tensor(i)
                labels[row, :len(lab)] = torch.tensor(lab)
                attention[row, :len(i)] = 1
                owners.extend(own)
            where = labels != -100
            with sparse_prediction(model) as sparse:  # logits of the masked positions only, in row order
                logits = model(input_ids=ids, attention_mask=attention, labels=labels if sparse else None).logits
            logits = logits if sparse else logits[where]
            nll = torch.nn.functional.cross_entropy(logits.float(), labels[where], reduction="none")
            token_nll.extend(nll.tolist())
    per_word: dict[int, float] = {}
    for owner, value in zip(owners, token_nll):
        per_word[owner] = per_word.get(owner, 0.0) + value
    loss = float(np.mean(token_nll)) if token_nll else float("nan")
    word_loss = float(np.mean(list(per_word.values()))) if per_word else float("nan")
    return {"loss": loss, "perplexity": math.exp(loss), "word_loss": word_loss,
            "word_perplexity": math.exp(word_loss), "masked_tokens": len(token_nll), "masked_words": len(per_word)}
