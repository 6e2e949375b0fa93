"""Sequence-head pooling: [CLS] (the model's pooler) or the masked mean of token states, saved and restored."""

from __future__ import annotations

import json

import pytest
import torch


def test_mean_pooling_ignores_padding_and_survives_save_and_load(tmp_path, tiny_model):
    from transformers import AutoModel, AutoTokenizer

    from kinject.interfaces import Head
    from kinject.training import build_task_model, load_task_model

    head = Head("sequence", 2, labels=("a", "b"))
    model = build_task_model(tiny_model, head, seed=0, pooling="mean").eval()
    tok = AutoTokenizer.from_pretrained(tiny_model)
    alone = tok(["the gene"], return_tensors="pt")
    padded = tok(["the gene", "the gene expression increased in tumor cells"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a = model(**alone).logits[0]
        b = model(**padded).logits[0]
    assert torch.allclose(a, b, atol=1e-5)  # padding does not leak into the mean
    with torch.no_grad():  # and it is the mean, not [CLS]: the pooled vector equals the masked mean
        hidden = model.base_model(**alone).last_hidden_state
        assert torch.allclose(model.base_model.pooler(hidden), hidden.mean(1), atol=1e-6)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["kinject_pooling"] == "mean"
    again = load_task_model(tmp_path / "m", head).eval()
    with torch.no_grad():
        assert torch.allclose(again(**padded).logits, model(**padded).logits, atol=1e-6)
    assert AutoModel.from_pretrained(tmp_path / "m").config.hidden_size == 32  # plain transformers still loads it
    cls_model = build_task_model(tiny_model, head, seed=0, pooling="cls").eval()
    with torch.no_grad():
        assert not torch.allclose(cls_model(**alone).logits[0], a)


def test_pooling_is_a_keyed_model_option(tmp_path, textcls_dir, tiny_model):
    from kinject import keys, preparation
    from kinject.spec_reading import build_spec

    def key(pooling):
        spec = build_spec({"task": {"name": "textcls", "path": str(textcls_dir)},
                           "model": {"name": "tiny", "pooling": pooling}, "cache_dir": str(tmp_path)})
        return {p.stage.name: p.key for p in keys.plan(preparation.prepare(spec))}["finetune"]

    assert key("cls") != key("mean")
    with pytest.raises(Exception, match="model.pooling"):
        build_spec({"task": {"name": "textcls"}, "model": {"pooling": "max"}})
