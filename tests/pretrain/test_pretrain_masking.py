"""Pretraining data (the knowledge library's MLM building blocks): packing (order, separators, word ids, useful
tokens), whole-word and token masking statistics, sparse prediction."""

from __future__ import annotations

import random

import pytest
import torch

from kinject.knowledge.masking import WholeWordMaskCollator
from kinject.knowledge.packing import SEP_WORD, Packer, pack_to_arrow


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from kinject.api import load_tokenizer

    return load_tokenizer(tiny_model)  # character-level WordPiece: most words are several pieces


def documents(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = "gene expression increased in tumor cells patients drug dose reduced symptoms protein".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) + f" d{i}" for i in range(n)]


def test_packing_keeps_document_order_inserts_separators_and_never_splits_a_word(tokenizer):
    docs = documents(60)
    packer = Packer(tokenizer, 48)
    rows = list(packer.add(docs[:25])) + list(packer.add(docs[25:])) + list(packer.finish())
    assert packer.documents == 60
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    pending = [tokenizer(doc, add_special_tokens=False)["input_ids"] for doc in docs]
    doc, pos = 0, 0
    for row in rows:
        ids, words = row["input_ids"], row["word_ids"]
        assert len(ids) <= 48 and ids[0] == cls and ids[-1] == sep and len(words) == len(ids)
        assert words[0] == words[-1] == SEP_WORD
        inner = [w for w in words if w >= 0]
        assert inner == sorted(inner) and set(inner) == set(range(len(set(inner))))  # 0..n-1, in order
        assert not tokenizer.convert_ids_to_tokens(ids[1]).startswith("##")  # rows start on a word
        for token in ids[1:-1]:  # the documents in order, a [SEP] exactly where each one ends
            if pos == len(pending[doc]):
                assert token == sep
                doc, pos = doc + 1, 0
                continue
            assert token == pending[doc][pos]
            pos += 1
        if pos == len(pending[doc]):  # a document ending with the row: the closing [SEP] separates it
            doc, pos = doc + 1, 0
    assert doc == len(docs)


def test_packed_arrow_file_is_dense(tokenizer, tmp_path):
    from datasets import Dataset

    stats = pack_to_arrow(iter(documents(400)), tokenizer, 64, tmp_path / "packed.arrow", batch=37)
    data = Dataset.from_file(str(tmp_path / "packed.arrow"))
    assert len(data) == stats["sequences"] and stats["documents"] == 400
    lengths = [len(ids) for ids in data["input_ids"]]
    assert sum(lengths) == stats["tokens"]
    assert sum(lengths) / (len(lengths) * 64) >= 0.95  # useful-token fraction of packed batches


def _batch(tokenizer, n: int = 400, length: int = 64) -> list[dict]:
    return list(Packer(tokenizer, length).add(documents(n, seed=1))) + []


@pytest.mark.slow
def test_whole_word_masking_statistics(tokenizer):
    rows = _batch(tokenizer, 1500)
    collator = WholeWordMaskCollator(tokenizer, 0.15, 0.8, 0.1, generator=torch.Generator().manual_seed(0))
    chosen = words_total = 0
    actions = {"mask": 0, "random": 0, "keep": 0}
    for lo in range(0, len(rows), 32):
        features = rows[lo:lo + 32]
        batch = collator(features)
        for row, f in enumerate(features):
            ids = torch.tensor(f["input_ids"])
            words = torch.tensor(f["word_ids"])
            n = len(ids)
            labels, inputs = batch["labels"][row, :n], batch["input_ids"][row, :n]
            assert (batch["attention_mask"][row, :n] == 1).all() and (batch["attention_mask"][row, n:] == 0).all()
            assert (labels[words < 0] == -100).all()  # specials are never targets
            for w in words[words >= 0].unique():
                at = words == w
                labelled = labels[at] != -100
                assert labelled.all() or not labelled.any(), "a word partly masked"
                words_total += 1
                if not labelled.any():
                    assert (inputs[at] == ids[at]).all()
                    continue
                chosen += 1
                assert (labels[at] == ids[at]).all()
                if (inputs[at] == tokenizer.mask_token_id).all():
                    actions["mask"] += 1
                elif (inputs[at] == ids[at]).all():
                    actions["keep"] += 1
                else:
                    assert not (inputs[at] == tokenizer.mask_token_id).any()  # never mixed within a word
                    assert all(t not in tokenizer.all_special_ids for t in inputs[at].tolist())
                    actions["random"] += 1
    assert words_total > 10000
    assert abs(chosen / words_total - 0.15) < 0.01
    assert abs(actions["mask"] / chosen - 0.8) < 0.025
    assert abs(actions["random"] / chosen - 0.1) < 0.02
    assert abs(actions["keep"] / chosen - 0.1) < 0.02


@pytest.mark.slow
def test_token_masking_selects_and_replaces_tokens_independently(tokenizer):
    """unit=token: 15% of the (non-special) tokens, each on its own - a token's neighbour in the same word is
    selected at the base rate, not with it - and 80/10/10 per token; whole-word masking never splits a word."""
    rows = _batch(tokenizer, 1500)
    collators = {unit: WholeWordMaskCollator(tokenizer, 0.15, 0.8, 0.1, generator=torch.Generator().manual_seed(0),
                                             unit=unit) for unit in ("token", "whole_word")}
    counts = {unit: {"tokens": 0, "chosen": 0, "pairs": 0, "first": 0, "both": 0, "split_words": 0, "mask": 0,
                     "random": 0, "keep": 0} for unit in collators}
    for unit, collator in collators.items():
        c = counts[unit]
        for lo in range(0, len(rows), 32):
            features = rows[lo:lo + 32]
            batch = collator(features)
            for row, f in enumerate(features):
                ids, words = torch.tensor(f["input_ids"]), torch.tensor(f["word_ids"])
                n = len(ids)
                labels, inputs = batch["labels"][row, :n], batch["input_ids"][row, :n]
                chosen = labels != -100
                assert not chosen[words < 0].any()  # specials are never targets
                assert (labels[chosen] == ids[chosen]).all()
                c["tokens"] += int((words >= 0).sum())
                c["chosen"] += int(chosen.sum())
                c["mask"] += int((inputs[chosen] == tokenizer.mask_token_id).sum())
                c["keep"] += int((inputs[chosen] == ids[chosen]).sum())
                c["random"] += int(((inputs[chosen] != ids[chosen]) & (inputs[chosen] != tokenizer.mask_token_id)).sum())
                same_word = (words[1:] == words[:-1]) & (words[1:] >= 0)  # a token and the next, in one word
                c["pairs"] += int(same_word.sum())
                c["first"] += int((same_word & chosen[:-1]).sum())
                c["both"] += int((same_word & chosen[:-1] & chosen[1:]).sum())
                for w in words[words >= 0].unique():
                    at = chosen[words == w]
                    c["split_words"] += int(at.any() and not at.all())
    token, whole = counts["token"], counts["whole_word"]
    assert token["tokens"] > 30000 and token["pairs"] > 10000
    assert abs(token["chosen"] / token["tokens"] - 0.15) < 0.01
    # independence: given a selected token, the next token of the same word is selected at the base rate
    assert abs(token["both"] / token["first"] - 0.15) < 0.03
    assert token["split_words"] > 1000  # words are partly masked
    for action, share in (("mask", 0.8), ("random", 0.1), ("keep", 0.1)):
        assert abs(token[action] / token["chosen"] - share) < 0.02, action
    # whole words: the next token of a selected word is always selected too, and no word is ever split
    assert whole["both"] == whole["first"] > 1000 and whole["split_words"] == 0


def test_a_batch_always_has_a_target(tokenizer):
    rows = _batch(tokenizer, 3, 64)[:1]
    for unit in ("whole_word", "token"):
        collator = WholeWordMaskCollator(tokenizer, probability=1e-9, generator=torch.Generator().manual_seed(0),
                                         unit=unit)
        labels = collator(rows)["labels"]
        assert (labels != -100).any()
        if unit == "token":  # one target: the row's first token
            assert (labels != -100).sum() == 1 and labels[0, 1] == rows[0]["input_ids"][1]


def test_whole_word_masking_is_the_default_and_unchanged_by_the_unit_option(tokenizer):
    rows = _batch(tokenizer, 60)[:8]
    default = WholeWordMaskCollator(tokenizer, seed=3)(rows)
    explicit = WholeWordMaskCollator(tokenizer, seed=3, unit="whole_word")(rows)
    token = WholeWordMaskCollator(tokenizer, seed=3, unit="token")(rows)
    assert all(torch.equal(default[k], explicit[k]) for k in default)
    assert not torch.equal(default["labels"], token["labels"])
    with pytest.raises(ValueError, match="unit 'word'"):
        WholeWordMaskCollator(tokenizer, unit="word")


def test_sparse_prediction_gives_the_full_forward_loss_and_gradients(tokenizer, tiny_model):
    from transformers import AutoModelForMaskedLM

    from kinject.knowledge.masked_lm import sparse_prediction

    batch = WholeWordMaskCollator(tokenizer, generator=torch.Generator().manual_seed(0))(_batch(tokenizer, 60)[:6])
    model = AutoModelForMaskedLM.from_pretrained(tiny_model).eval()
    full = model(**batch).loss
    full.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with sparse_prediction(model) as sparse:
        out = model(**batch)
        assert sparse and out.logits.shape == (int((batch["labels"] != -100).sum()), len(tokenizer))
        out.loss.backward()
    assert "forward" not in model.__dict__  # the model's own forward is back
    assert torch.allclose(out.loss, full, atol=1e-6)
    for name, param in model.named_parameters():
        if name in expected:
            assert torch.allclose(param.grad, expected[name], atol=1e-6), name
