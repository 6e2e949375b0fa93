"""Pretraining data (the knowledge library's MLM building blocks): packing (order, separators, word ids, useful
tokens), whole-word masking statistics, sparse prediction."""

from __future__ import annotations

import random

import pytest
import torch

from kinject.plugins.knowledge.masking import WholeWordMaskCollator
from kinject.plugins.knowledge.packing import SEP_WORD, Packer, pack_to_arrow


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from kinject.models import load_tokenizer

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


def test_a_batch_always_has_a_target(tokenizer):
    rows = _batch(tokenizer, 3, 64)[:1]
    collator = WholeWordMaskCollator(tokenizer, probability=1e-9, generator=torch.Generator().manual_seed(0))
    labels = collator(rows)["labels"]
    assert (labels != -100).any()


def test_sparse_prediction_gives_the_full_forward_loss_and_gradients(tokenizer, tiny_model):
    from transformers import AutoModelForMaskedLM

    from kinject.plugins.knowledge.masked_lm import sparse_prediction

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
