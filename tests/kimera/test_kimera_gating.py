"""KIMERA head gates: exact head removal, eager == SDPA, architecture map, importance vs finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kinject.errors import KinjectError
from kinject.plugins.kimera.gating import HeadGates, head_layout
from kinject.plugins.kimera.importance import normalize_importance, score_heads, search_mask


def head_slices(layout, layer: int, head: int) -> dict[str, torch.Tensor]:
    """Views of one head's parameters: Q/K/V weight rows and bias entries, O weight columns."""
    att = layout.layers[layer]
    rows = slice(head * layout.head_dim, (head + 1) * layout.head_dim)
    out = {}
    for name in ("query", "key", "value"):
        lin = getattr(att, name)
        out[f"{name}.weight"] = lin.weight[rows]
        if lin.bias is not None:
            out[f"{name}.bias"] = lin.bias[rows]
    out["output.weight"] = att.output.weight[:, rows]
    return out


def snapshot(model) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """A copy of every head's parameters, by (layer, head)."""
    layout = head_layout(model)
    return {(l, h): {k: v.detach().clone() for k, v in head_slices(layout, l, h).items()}
            for l in range(layout.num_layers) for h in range(layout.num_heads)}


def tiny_bert(attn: str = "sdpa", layers: int = 2, heads: int = 4, kind: str = "bert", labels: int = 0):
    from transformers import AlbertConfig, AutoModel, AutoModelForSequenceClassification, BertConfig, RobertaConfig

    torch.manual_seed(0)
    common = dict(vocab_size=60, hidden_size=32, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  max_position_embeddings=64)
    if kind == "roberta":
        config = RobertaConfig(**common, pad_token_id=1)
    elif kind == "albert":
        config = AlbertConfig(**common, embedding_size=16)
    else:
        config = BertConfig(**common)
    if labels:
        config.num_labels = labels
        return AutoModelForSequenceClassification.from_config(config, attn_implementation=attn).eval()
    return AutoModel.from_config(config, attn_implementation=attn).eval()


def inputs(batch: int = 3, length: int = 9, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0  # padding in one row
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gate_zero_equals_zeroing_the_value_slice(attn):
    model = tiny_bert(attn)
    x = inputs()
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with torch.no_grad(), HeadGates(model, gates):
        gated = model(**x).last_hidden_state
    layout = head_layout(model)
    with torch.no_grad():
        for part in ("value.weight", "value.bias"):
            head_slices(layout, 1, 2)[part].zero_()
        zeroed = model(**x).last_hidden_state
    torch.testing.assert_close(gated, zeroed, rtol=0, atol=1e-6)
    assert not torch.allclose(gated, tiny_bert(attn)(**x).last_hidden_state, atol=1e-4)  # the head mattered


def test_eager_and_sdpa_give_the_same_gated_outputs():
    x = inputs()
    gates = torch.rand(2, 4, generator=torch.Generator().manual_seed(3))
    outs = []
    for attn in ("eager", "sdpa"):
        model = tiny_bert(attn)
        with torch.no_grad(), HeadGates(model, gates):
            outs.append(model(**x).last_hidden_state)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_ones_change_nothing_and_hooks_are_removed():
    model = tiny_bert()
    x = inputs()
    with torch.no_grad():
        plain = model(**x).last_hidden_state
        with HeadGates(model, torch.ones(2, 4)):
            same = model(**x).last_hidden_state
        with HeadGates(model, torch.zeros(2, 4)):
            off = model(**x).last_hidden_state
        after = model(**x).last_hidden_state
    torch.testing.assert_close(plain, same)
    torch.testing.assert_close(plain, after)
    assert not torch.allclose(plain, off, atol=1e-4)


@pytest.mark.parametrize("kind", ["roberta", "albert"])
def test_architecture_map_other_layouts(kind):
    model = tiny_bert(kind=kind)
    layout = head_layout(model)
    assert (layout.num_layers, layout.num_heads, layout.head_dim) == (2, 4, 8)
    x = inputs()
    with torch.no_grad():
        plain = model(**x).last_hidden_state
        results = []
        for layer in range(2):
            gates = torch.ones(2, 4)
            gates[layer] = 0.0
            with HeadGates(model, gates):
                results.append(model(**x).last_hidden_state)
    assert not torch.allclose(plain, results[0], atol=1e-4)
    # gating layer 0 and gating layer 1 differ, also for ALBERT whose layers share one module
    assert not torch.allclose(results[0], results[1], atol=1e-4)


def test_unknown_architecture_is_a_clear_error():
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=20))
    with pytest.raises(KinjectError, match="architecture map"):
        head_layout(model)


def test_importance_matches_finite_differences():
    model = tiny_bert("eager", labels=3).double()
    x = inputs(batch=4)
    labels = torch.tensor([0, 2, 1, 1])
    raw, logits = score_heads(model, [{**x, "labels": labels}], "single_label_classification")
    assert logits.shape == (4, 3)

    def loss(gates, b):
        with torch.no_grad(), HeadGates(model, gates.double()):
            out = model(**{k: v[b:b + 1] for k, v in x.items()}).logits
        return torch.nn.functional.cross_entropy(out, labels[b:b + 1]).item()

    eps = 1e-5
    expected = torch.zeros(2, 4, dtype=torch.float64)
    for b in range(4):
        for layer in range(2):
            for head in range(4):
                up, down = torch.ones(2, 4), torch.ones(2, 4)
                up[layer, head] += eps
                down[layer, head] -= eps
                expected[layer, head] += abs(loss(up, b) - loss(down, b)) / (2 * eps) / 4
    torch.testing.assert_close(raw.double(), expected, rtol=1e-3, atol=1e-7)


def test_normalisation_per_layer_then_global():
    raw = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    norm = normalize_importance(raw)
    assert float(norm.min()) == 0.0 and float(norm.max()) == 1.0
    torch.testing.assert_close(norm, torch.tensor([[0.6, 0.8], [1.0, 0.0]]))


def test_mask_search_stops_at_threshold_and_keeps_last_good_mask():
    model = tiny_bert("eager", labels=2)
    batches = [{**inputs(batch=4), "labels": torch.tensor([0, 1, 0, 1])}]
    # a synthetic metric that falls as heads are switched off (via the logits under the mask)
    plain = model(**inputs(batch=4)).logits.detach().numpy()

    def metric(logits):
        return 1.0 - float(abs(logits - plain).mean())

    hard = search_mask(model, batches, "single_label_classification", metric, rho=0.25, tau=0.98)
    assert set(hard.mask.unique().tolist()) <= {0.0, 1.0}
    kept = [r for r in hard.rounds if r["kept"]]
    assert hard.rounds[0]["masked"] == 0 and hard.rounds[0]["metric"] == pytest.approx(1.0, abs=1e-6)
    assert int((hard.mask == 0).sum()) == kept[-1]["masked"]
    if not hard.rounds[-1]["kept"]:
        assert hard.rounds[-1]["metric"] < 0.98 * hard.baseline
    # rho of the remaining heads per round: 8 -> 2 masked, then 6 -> 2 (round(1.5)), ...
    assert [r["masked"] for r in hard.rounds[:2]] == [0, 2][: len(hard.rounds[:2])]

    # rho of all heads per round (HF bertology's run_prune.py): 2 of the 8 every round, the last round what is left
    steady = search_mask(model, batches, "single_label_classification", lambda _: 1.0, rho=0.25, tau=0.5,
                         rho_of="all")
    assert [r["masked"] for r in steady.rounds] == [0, 2, 4, 6, 8] and steady.stopped == "every_head_masked"
    fewer = search_mask(model, batches, "single_label_classification", lambda _: 1.0, rho=0.375, tau=0.5,
                        rho_of="all")
    assert [r["masked"] for r in fewer.rounds] == [0, 3, 6, 8]  # round(0.375 x 8) = 3, capped by the 2 left
    everything = search_mask(model, batches, "single_label_classification", lambda _: 1.0, rho=0.5, tau=0.5)
    assert int(everything.mask.sum()) == 0  # a metric that never falls masks every head
    soft = search_mask(model, batches, "single_label_classification", lambda _: 1.0, rho=0.5, tau=0.5, soft=True)
    assert bool(((soft.mask >= 0) & (soft.mask <= 1)).all()) and soft.mask.min() == 0.0
    assert soft.rounds[-1]["masked"] == 8  # every head became a candidate and kept its normalised score
    assert int((soft.mask == 1).sum()) <= 1  # only the globally most important head can score exactly 1


def test_mask_search_refuses_an_undefined_metric():
    from kinject.errors import KinjectError

    model = tiny_bert("eager", labels=2)
    batches = [{**inputs(batch=4), "labels": torch.tensor([0, 1, 0, 1])}]
    with pytest.raises(KinjectError, match="search metric is nan"):
        search_mask(model, batches, "single_label_classification", lambda _: float("nan"))


def test_gates_follow_the_activations_device():
    """Gates made on the CPU reach activations on another device: "meta" refuses to mix with CPU tensors
    exactly as CUDA does, so without the move this forward fails. Fixed (L, H) and per-example (B, L, H)."""
    model = tiny_bert("eager").to("meta")
    x = {k: v.to("meta") for k, v in inputs().items()}
    for gates in (torch.ones(2, 4), torch.ones(3, 2, 4)):
        with torch.no_grad(), HeadGates(model, gates):
            out = model(**x).last_hidden_state
        assert out.device.type == "meta" and tuple(out.shape) == (3, 9, 32)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA accelerator on this machine: the gated forward on one was not run")
def test_gated_forward_and_importance_on_the_accelerator():
    x = inputs(batch=4)
    gates = torch.rand(2, 4, generator=torch.Generator().manual_seed(3))  # stays on the CPU
    batch = {**x, "labels": torch.tensor([0, 1, 1, 0])}
    results = {}
    for device in ("cpu", "cuda"):
        model = tiny_bert("sdpa", labels=2).to(device)
        with torch.no_grad(), HeadGates(model, gates):
            out = model(**{k: v.to(device) for k, v in x.items()}).logits
        raw, _ = score_heads(model, [batch], "single_label_classification", gates)
        results[device] = (out.cpu(), raw)
    torch.testing.assert_close(results["cuda"][0], results["cpu"][0], rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(results["cuda"][1], results["cpu"][1], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_importance_matches_the_bertology_reference_at_batch_size_one(attn):
    """HF bertology's compute_heads_importance (|d loss / d head_mask| through transformers' head_mask, eager
    attention, divided by the token count), with the gradient cleared before every batch and batches of one
    example: that is per-example |dL(x)/dxi_h|. Ours (per-example gates, batches of 4 and 2, either kernel)
    ranks the heads identically and normalises to the same scores."""
    from scipy.stats import spearmanr

    x = inputs(batch=6, seed=4)
    labels = torch.tensor([0, 2, 1, 1, 0, 2])
    reference_model = tiny_bert("eager", labels=3)
    head_mask = torch.ones(2, 4, requires_grad=True)
    reference, tokens = torch.zeros(2, 4), 0.0
    for b in range(6):
        head_mask.grad = None  # the original script never clears it (gradients would accumulate over batches)
        one = {k: v[b:b + 1] for k, v in x.items()}
        reference_model(**one, labels=labels[b:b + 1], head_mask=head_mask).loss.backward()
        reference += head_mask.grad.abs()
        tokens += float(one["attention_mask"].sum())
    reference /= tokens
    batches = [{**{k: v[s] for k, v in x.items()}, "labels": labels[s]} for s in (slice(0, 4), slice(4, 6))]
    raw, _ = score_heads(tiny_bert(attn, labels=3), batches, "single_label_classification")
    assert spearmanr(raw.flatten().numpy(), reference.flatten().numpy()).statistic == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(normalize_importance(raw), normalize_importance(reference), rtol=1e-4, atol=1e-5)


def test_mask_search_shows_every_round_s_logits_to_observe():
    """observe(round, logits) sees round 0 (unmasked) and every later round, the failing one included; the rounds'
    records hold no interval (kimera-search-report adds it)."""
    model = tiny_bert("eager", labels=2)
    batches = [{**inputs(batch=4), "labels": torch.tensor([0, 1, 0, 1])}]
    values, seen = iter([1.0, 0.99, 0.9]), []
    search = search_mask(model, batches, "single_label_classification", lambda _: next(values), rho=0.25, tau=0.95,
                         observe=lambda round_no, logits: seen.append((round_no, logits)))
    assert [r["kept"] for r in search.rounds] == [True, True, False] and search.stopped == "threshold"
    assert [r for r, _ in seen] == [0, 1, 2] and all(logits.shape == (4, 2) for _, logits in seen)
    assert set(search.rounds[1]) == {"round", "metric", "masked", "kept"} and search.redundant == 2


def test_metric_only_batches_join_the_metric_but_not_the_importance():
    model = tiny_bert("eager", labels=2)
    first = {**inputs(batch=4), "labels": torch.tensor([0, 1, 0, 1])}
    rest = {**inputs(batch=3, seed=5), "labels": torch.tensor([1, 1, 0])}
    seen = []

    def metric(logits):
        seen.append(logits)
        return 1.0

    search = search_mask(model, [first], "single_label_classification", metric, rho=0.5, tau=0.5, max_rounds=1,
                         metric_batches=[rest])
    raw, logits = score_heads(model, [first], "single_label_classification")
    with torch.no_grad():
        expected_rest = model(**{k: v for k, v in rest.items() if k != "labels"}).logits.numpy()
    assert seen[0].shape == (7, 2)
    np.testing.assert_allclose(seen[0][:4], logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen[0][4:], expected_rest, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(search.first_importance, normalize_importance(raw))  # importance: first batch only
    assert len(seen) == 2 and not np.allclose(seen[1][4:], expected_rest, rtol=0, atol=1e-6)  # round 1: gated


def test_importance_under_bf16_autocast_ranks_the_heads_as_float32_does():
    """The mask search runs under bf16 autocast where the run trains in bf16 (ScoringConfig.bf16): importance and
    logits stay close to float32's, the logits come back in float32 (the head runs in float32), and the heads keep
    their order, so the masks do not change (the headline's: the same 19 heads; docs/benchmarks.md)."""
    model = tiny_bert(labels=3, layers=3, heads=4)
    g = torch.Generator().manual_seed(5)
    batches = [{**inputs(8, 12, seed=s), "labels": torch.randint(0, 3, (8,), generator=g)} for s in range(4)]
    raw32, logits32 = score_heads(model, batches, "single_label_classification")
    raw16, logits16 = score_heads(model, batches, "single_label_classification", bf16=True)
    assert logits16.dtype == np.float32 and not np.array_equal(logits16, logits32)  # it did run in bf16 ...
    np.testing.assert_allclose(logits16, logits32, atol=0.05)  # ... close to float32
    torch.testing.assert_close(raw16, raw32, rtol=0.05, atol=1e-3)
    rank32, rank16 = raw32.flatten().argsort().argsort().float(), raw16.flatten().argsort().argsort().float()
    assert torch.corrcoef(torch.stack([rank32, rank16]))[0, 1] > 0.95
    hard32 = search_mask(model, batches, "single_label_classification", lambda _: 1.0, rho=0.25, tau=0.5, max_rounds=2)
    hard16 = search_mask(model, batches, "single_label_classification", lambda _: 1.0, rho=0.25, tau=0.5, max_rounds=2,
                         bf16=True)
    assert torch.equal(hard32.mask, hard16.mask)
