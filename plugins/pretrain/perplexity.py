"""Held-out perplexity: the pretrained model vs the reference on the same masked words.

Each held-out text is split into words (BERT pre-tokenisation, shared by both tokenizers), cut into windows that
fit ``max_length`` with both, and ``probability`` of each window's words (seeded per text and window, at least
one) are replaced by [MASK] in all their tokens. Per-token perplexity and per-word perplexity (the summed NLL of
a word's tokens), which compares across vocabularies.
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np
from pydantic import Field

from kinject.api import NOT_KEYED, ModelRef, StageConfig, StageContext, is_main_process

log = logging.getLogger("kinject")

#: the MLM training statistics the evaluation reports under "mlm"
MLM_SHOWN = ("train_loss", "global_step", "train_runtime", "tokens_per_second", "useful_token_fraction", "world_size",
             "architecture")


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

    from kinject.knowledge import sparse_prediction

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


class PerplexityConfig(StageConfig):
    """Held-out perplexity of the model of ``model_stage`` vs the reference (the base model, with its fitted head
    when ``reference_stage``), on the ``heldout.arrow`` texts of ``corpus_stage``; with ``texts_stage`` (a control
    whose texts the model was trained on) its ``control.json`` is reported too."""

    corpus_stage: str
    model_stage: str
    reference: ModelRef
    reference_stage: str | None = None
    texts_stage: str | None = None
    max_length: int
    probability: float
    texts: int
    seed: int = 0
    batch_size: int = Field(16, json_schema_extra=NOT_KEYED)


def perplexity_body(cfg: PerplexityConfig, ctx: StageContext) -> None:
    from kinject.api import keep_layers, load_tokenizer
    from kinject.knowledge import load_mlm
    from kinject.knowledge import read_texts

    if not is_main_process():
        return
    texts = list(read_texts(ctx.inputs[cfg.corpus_stage] / "heldout.arrow", cfg.texts))
    attn = cfg.reference.attn_implementation
    if cfg.reference_stage:
        reference_path, revision = str(ctx.inputs[cfg.reference_stage] / "model"), None
    else:
        reference_path, revision = cfg.reference.path, cfg.reference.revision
    reference, missing = load_mlm(reference_path, revision, attn)
    if not cfg.reference_stage:
        keep_layers(reference, cfg.reference.layers)
    output_path = str(ctx.inputs[cfg.model_stage] / "model")
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
    train = json.loads((ctx.inputs[cfg.model_stage] / "train.json").read_text())
    metrics = {"heldout": heldout,
               "corpus": json.loads((ctx.inputs[cfg.corpus_stage] / "corpus.json").read_text()),
               "mlm": {k: train[k] for k in MLM_SHOWN if k in train}}
    if cfg.texts_stage:  # a control: what the MLM trained on instead of the corpus
        metrics["mlm_corpus"] = json.loads((ctx.inputs[cfg.texts_stage] / "control.json").read_text())
    log.info("held-out perplexity %.3f (reference %.3f); per word %.3f (reference %.3f)", heldout["perplexity"],
             heldout["reference_perplexity"], heldout["word_perplexity"], heldout["reference_word_perplexity"])
    (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
