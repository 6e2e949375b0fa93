"""KIMERA masks: exact freeze under AdamW, (1 - m) update scaling, pruning that survives save/load, mask files."""

from __future__ import annotations

import json

import pytest
import torch

from kinject.errors import DataError
from kinject.plugins.kimera.gating import HeadGates
from kinject.plugins.kimera.masks import HeadUpdateScaler, load_mask, save_masks
from kinject.plugins.kimera.pruning import prune_by_mask

from test_kimera_gating import inputs, snapshot, tiny_bert


def train_steps(model, optimizer, steps=3):
    x = inputs()
    for _ in range(steps):
        optimizer.zero_grad()
        model(**x).last_hidden_state.pow(2).mean().backward()
        optimizer.step()


def test_hard_mask_freezes_heads_bit_exactly_under_adamw():
    model = tiny_bert().train()
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    before = snapshot(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)
    HeadUpdateScaler(model, mask).attach(optimizer)
    train_steps(model, optimizer, steps=4)
    after = snapshot(model)
    for (layer, head), parts in before.items():
        for name, old in parts.items():
            if mask[layer, head] == 1:
                assert torch.equal(after[(layer, head)][name], old), (layer, head, name)
            else:
                assert not torch.equal(after[(layer, head)][name], old), (layer, head, name)


def test_update_scaler_follows_the_parameters_after_the_model_moved():
    """The Trainer moves the model (to CUDA, to bf16) after the scaler was built: the per-head rates must
    follow, or lerp_ refuses to mix them. Here the model turns float64 after the scaler was built (the same
    code path moves the rates to the parameters' device; test_kimera_retrain runs it on CUDA when present)."""
    model = tiny_bert().train()
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    scaler = HeadUpdateScaler(model, mask)
    model.double()
    before = snapshot(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)
    scaler.attach(optimizer)
    train_steps(model, optimizer, steps=2)
    assert all((r.device, r.dtype) == (p.device, p.dtype) for p, r in scaler.targets)
    assert torch.equal(snapshot(model)[(0, 0)]["query.weight"], before[(0, 0)]["query.weight"])  # frozen head
    assert not torch.equal(snapshot(model)[(0, 1)]["query.weight"], before[(0, 1)]["query.weight"])


def test_without_the_scaler_adamw_moves_every_head():
    # the reason for scaling the update: zero gradients alone would not stop AdamW's weight decay
    model = tiny_bert().train()
    before = snapshot(model)
    for p in model.parameters():
        p.register_hook(lambda g: torch.zeros_like(g))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)
    train_steps(model, optimizer, steps=1)
    assert not torch.equal(snapshot(model)[(0, 0)]["query.weight"], before[(0, 0)]["query.weight"])


def test_soft_mask_scales_the_sgd_update_by_one_minus_m():
    mask = torch.tensor([[0.25, 0.5, 1.0, 0.0], [0.9, 0.1, 0.0, 0.75]])
    plain, scaled = tiny_bert().train(), tiny_bert().train()
    start = snapshot(plain)
    train_steps(plain, torch.optim.SGD(plain.parameters(), lr=0.1), steps=1)
    opt = torch.optim.SGD(scaled.parameters(), lr=0.1)
    HeadUpdateScaler(scaled, mask).attach(opt)
    train_steps(scaled, opt, steps=1)
    a, b = snapshot(plain), snapshot(scaled)
    for (layer, head), parts in start.items():
        for name, old in parts.items():
            expected = old + (1 - mask[layer, head]) * (a[(layer, head)][name] - old)
            torch.testing.assert_close(b[(layer, head)][name], expected, rtol=1e-5, atol=1e-7)
    # non-head parameters are untouched by the scaler: same SGD step in both models
    torch.testing.assert_close(scaled.encoder.layer[0].intermediate.dense.weight,
                               plain.encoder.layer[0].intermediate.dense.weight)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_pruned_model_equals_gated_model_after_save_and_load(tmp_path, attn):
    from transformers import AutoModel

    model = tiny_bert(attn)
    mask = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])  # layer 0 loses every head
    x = inputs()
    with torch.no_grad(), HeadGates(model, mask):
        gated = model(**x).last_hidden_state
    plan = prune_by_mask(model, mask)
    assert plan == {0: [1, 2, 3], 1: [1, 3]}
    model.save_pretrained(tmp_path / "pruned")
    loaded = AutoModel.from_pretrained(tmp_path / "pruned", attn_implementation=attn).eval()
    assert loaded.encoder.layer[1].attention.self.num_attention_heads == 2
    with torch.no_grad():
        torch.testing.assert_close(loaded(**x).last_hidden_state, gated, rtol=1e-5, atol=1e-5)
    # the kept "dead" head of layer 0 stays silent through training (zero gradients)
    loaded.train()
    opt = torch.optim.AdamW(loaded.parameters(), lr=1e-2, weight_decay=0.1)
    train_steps(loaded, opt, steps=2)
    assert float(loaded.encoder.layer[0].attention.output.dense.weight.detach().abs().max()) == 0.0


def test_mask_files_round_trip_and_reject_bad_masks(tmp_path):
    mask = torch.tensor([[1.0, 0.0], [0.5, 1.0]])
    save_masks(tmp_path / "masks.json", hard=mask, note="x")
    torch.testing.assert_close(load_mask(tmp_path / "masks.json", "hard", (2, 2)), mask)
    with pytest.raises(DataError, match="shape"):
        load_mask(tmp_path / "masks.json", "hard", (3, 2))
    with pytest.raises(DataError, match="no mask 'soft'"):
        load_mask(tmp_path / "masks.json", "soft")
    (tmp_path / "bad.json").write_text(json.dumps({"hard": [[2.0, 0.0]]}))
    with pytest.raises(DataError, match=r"outside \[0, 1\]"):
        load_mask(tmp_path / "bad.json", "hard")
    (tmp_path / "broken.json").write_text("{\n  \"hard\": [1,\n")
    with pytest.raises(DataError, match="broken.json"):
        load_mask(tmp_path / "broken.json", "hard")


def test_the_search_estimate_counts_the_rounds_that_mask_most_heads():
    """A search at rho 0.1 masks ~70 % of the heads (the paper's CAPR mask; the headline's: 79 %) before it stops:
    about 14 scored rounds, not 4 (the headline's took 17, 3x its old estimate); max_rounds caps it."""
    from kinject.plugins.kimera.search import expected_rounds

    assert expected_rounds(0.1, 40) == 14  # round 0, 12 kept (1 - 0.9**12 = 72 % masked), the failing one
    assert expected_rounds(0.5, 40) == 4
    assert expected_rounds(1.0, 40) == 3
    assert expected_rounds(0.1, 3) == 4  # rounds 0..3
    assert expected_rounds(0.1, 40, "all") == 9  # 10 % of all heads a round: 7 kept rounds reach 70 %
    assert expected_rounds(0.1, 3, "all") == 4
