"""MoP mixtures on the adapters library (tiny model): softmax / Gumbel / MoE weights, the losses added to training,
save -> load -> same logits, adapters loaded bit for bit (and a loud failure when not), one adapter alone, and the
frozen base (and the reference's frozen random entity head) during partition-adapter training."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

K = 4


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from kinject.api import load_tokenizer

    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def adapter_dirs(tiny_model, tmp_path_factory):
    """K trained-looking partition adapters (random, non-zero up projections) saved with save_adapter."""
    import adapters
    from adapters import SeqBnConfig
    from transformers import AutoModel

    root = tmp_path_factory.mktemp("mop-adapters")
    encoder = AutoModel.from_pretrained(tiny_model)
    adapters.init(encoder)
    torch.manual_seed(0)
    out = []
    for i in range(K):
        name = f"part-{i}"
        encoder.add_adapter(name, config=SeqBnConfig(reduction_factor=8))
        for n, p in encoder.named_parameters():
            if f".adapters.{name}." in n:
                torch.nn.init.normal_(p, std=0.3)
        encoder.save_adapter(str(root / name), name, use_safetensors=True)
        out.append(root / name)
    return out


def fused(tiny_model, adapter_dirs, mixture="softmax", joint=True, pooling="cls", **settings):
    from kinject.interfaces import Head
    from kinject.plugins.mop.fusion import attach_partition_adapters
    from kinject.training import build_task_model

    model = build_task_model(tiny_model, Head("sequence", 2), seed=0, pooling=pooling)
    torch.manual_seed(0)
    mix = {"mixture": mixture, "tau": settings.get("tau", 1.0), "top_k": settings.get("top_k", 2),
           "loss_coef": settings.get("loss_coef", 0.01)}
    fuse = attach_partition_adapters(model, adapter_dirs, mix, joint)
    return model, fuse, mix


def batch(tokenizer, labels=True):
    out = tokenizer(["gene expression in tumor cells", "the drug dose", "a cat sat on the mat today"],
                    padding=True, return_tensors="pt")
    if labels:
        out["labels"] = torch.tensor([0, 1, 1])
    return dict(out)


def weights(model, inputs) -> torch.Tensor:
    out = model(**{k: v for k, v in inputs.items() if k != "labels"}, output_adapter_fusion_attentions=True)
    layers = out.adapter_fusion_attentions[model.active_adapters.name]
    return torch.stack([torch.as_tensor(layers[i]["output_adapter"]) for i in sorted(layers)])  # L, B, T, K


def test_softmax_weights_sum_to_one_and_every_part_counts(tiny_model, adapter_dirs, tokenizer):
    model, fuse, _ = fused(tiny_model, adapter_dirs)
    model.eval()
    w = weights(model, batch(tokenizer))
    assert w.shape[-1] == K and fuse.name == "part-0,part-1,part-2,part-3"
    assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5)
    assert (w > 0).all()


def test_gumbel_is_near_one_hot_at_small_tau_and_deterministic_at_eval(tiny_model, adapter_dirs, tokenizer):
    from kinject.plugins.mop.fusion import GumbelFusion, fusion_layers

    model, fuse, _ = fused(tiny_model, adapter_dirs, "gumbel", tau=0.01)
    assert all(isinstance(layer, GumbelFusion) for _, layer in fusion_layers(model, fuse.name))
    inputs = batch(tokenizer)
    model.train()
    torch.manual_seed(1)
    w = weights(model, inputs)
    assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-4)
    assert (w.max(-1).values > 0.99).float().mean() > 0.95  # (nearly) one-hot
    torch.manual_seed(2)
    assert not torch.equal(w, weights(model, inputs))  # sampled while training
    model.eval()
    torch.manual_seed(3)
    a = weights(model, inputs)
    torch.manual_seed(4)
    assert torch.equal(a, weights(model, inputs))  # no noise at evaluation


def test_moe_keeps_exactly_k_per_token_and_its_balancing_loss_reaches_the_training_loss(
        tiny_model, adapter_dirs, tokenizer, tmp_path):
    from transformers import TrainingArguments

    from kinject.plugins.mop.fusion import MoEFusion, fusion_layers, fusion_losses, mixture_trainer_class

    model, fuse, _ = fused(tiny_model, adapter_dirs, "moe", top_k=2, loss_coef=0.5)
    layers = [layer for _, layer in fusion_layers(model, fuse.name)]
    assert len(layers) == 2 and all(isinstance(layer, MoEFusion) for layer in layers)
    inputs = batch(tokenizer)
    for mode in (True, False):
        model.train(mode)
        w = weights(model, inputs)
        assert ((w > 0).sum(-1) == 2).all()  # exactly k adapters per token, noisy or not
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5)
    model.eval()
    assert torch.equal(weights(model, inputs), weights(model, inputs))
    assert all(layer.aux_loss is None or layer.aux_loss.requires_grad for layer in layers)

    trainer = mixture_trainer_class()(model=model, args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True))
    model.train()
    torch.manual_seed(5)
    total = trainer.compute_loss(model, dict(inputs))
    torch.manual_seed(5)
    task = model(**inputs).loss
    aux = sum(layer.aux_loss for layer in layers)
    reg = model.get_fusion_regularization_loss()
    assert float(aux.detach()) > 0 and reg is not None
    assert torch.allclose(total, task + reg + aux, rtol=1e-5)
    assert fusion_losses(model) is not None and all(layer.aux_loss is None for layer in layers)  # consumed once


@pytest.mark.parametrize("mixture,pooling", [("softmax", "cls"), ("moe", "cls"), ("gumbel", "mean")])
def test_saved_model_reloads_to_identical_logits(tiny_model, adapter_dirs, tokenizer, tmp_path, mixture, pooling):
    import adapters
    from adapters import Fuse
    from transformers import BertForSequenceClassification

    from kinject.plugins.mop.fusion import load_fused_model, save_fused_model

    model, fuse, mix = fused(tiny_model, adapter_dirs, mixture, pooling=pooling, top_k=3)
    with torch.no_grad():  # make the trained parts non-trivial
        for name, p in model.named_parameters():
            if "adapter_fusion_layer" in name or "classifier" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.eval()
    inputs = batch(tokenizer, labels=False)
    expected = model(**inputs).logits
    save_fused_model(model, tokenizer, tmp_path / "model", fuse, mix)
    loaded = load_fused_model(tmp_path / "model")
    assert torch.equal(loaded(**inputs).logits, expected)
    if mixture == "softmax":  # the plain documented adapters API is enough
        plain = adapters.load_model(str(tmp_path / "model"), BertForSequenceClassification)
        plain.set_active_adapters(Fuse(*[f"part-{i}" for i in range(K)]))
        assert torch.equal(plain.eval()(**inputs).logits, expected)


def test_the_fusion_regulariser_can_be_left_out_as_the_reference_code_does(tiny_model, adapter_dirs, tokenizer,
                                                                           tmp_path):
    from transformers import TrainingArguments

    from kinject.plugins.mop.fusion import fusion_losses, mixture_trainer_class

    model, _, _ = fused(tiny_model, adapter_dirs)
    with torch.no_grad():  # value matrices away from the identity: the regulariser is > 0
        for name, p in model.named_parameters():
            if name.endswith("value.weight"):
                p.add_(0.1)
    inputs = batch(tokenizer)
    model.eval()
    task, regulariser = model(**inputs).loss, model.get_fusion_regularization_loss()
    assert float(regulariser) > 0 and fusion_losses(model, regularization=False) is None
    for regularization in (True, False):
        trainer = mixture_trainer_class(regularization)(model=model, args=TrainingArguments(
            str(tmp_path), report_to=[], use_cpu=True))
        total = trainer.compute_loss(model, dict(inputs))
        assert torch.allclose(total, task + regulariser) if regularization else torch.equal(total, task)


def test_loaded_adapters_are_the_saved_ones_bit_for_bit(tiny_model, adapter_dirs):
    from safetensors.torch import load_file

    model, _, _ = fused(tiny_model, adapter_dirs)
    state = model.state_dict()
    for i, folder in enumerate(adapter_dirs):
        saved = load_file(str(folder / "adapter.safetensors"))
        loaded = [k for k in state if f".adapters.part-{i}." in k]
        assert len(loaded) == len(saved) > 0
        for key, tensor in saved.items():
            assert torch.equal(state[f"bert.{key}"], tensor), key


@pytest.mark.parametrize("damage,message", [
    ("omitted", "1 adapter tensors missing from the file, left at initialisation"),
    ("renamed", "1 saved tensors not loaded"),
    ("corrupted", "the file no longer holds what the adapter stage saved (sha256 differs)"),
])
def test_an_adapter_that_does_not_load_as_saved_fails_loudly(tiny_model, adapter_dirs, tmp_path, damage, message):
    import shutil

    from safetensors.torch import load_file, save_file

    from kinject.errors import DataError
    from kinject.interfaces import Head
    from kinject.plugins.mop.fusion import attach_partition_adapters
    from kinject.plugins.mop.part_adapters import saved_adapter_digest
    from kinject.training import build_task_model

    folders = [tmp_path / folder.name for folder in adapter_dirs]
    for source, copy in zip(adapter_dirs, folders):
        shutil.copytree(source, copy)
    digests = [saved_adapter_digest(folder) for folder in folders]  # what the adapter stages record
    weights = folders[2] / "adapter.safetensors"
    tensors = load_file(str(weights))
    key = sorted(tensors)[1]
    if damage == "omitted":  # the library only logs the missing key, at INFO
        del tensors[key]
    elif damage == "renamed":  # ... and the unexpected one
        tensors[key.replace("adapter_", "adaptor_")] = tensors.pop(key)
    else:  # loads without complaint; only the recorded digest tells
        tensors[key] = tensors[key] + 1e-3
    save_file(tensors, str(weights))
    mixture = {"mixture": "softmax", "tau": 1.0, "top_k": 2, "loss_coef": 0.01}
    with pytest.raises(DataError) as caught:
        attach_partition_adapters(build_task_model(tiny_model, Head("sequence", 2), seed=0), folders, mixture, True,
                                  digests)
    text = str(caught.value)
    assert text.startswith(f"{folders[2]}: partition adapter 'part-2' did not load as saved") and message in text
    assert len(text.splitlines()) == 1
    attach_partition_adapters(build_task_model(tiny_model, Head("sequence", 2), seed=0), folders[:2], mixture, True,
                              digests[:2])  # the intact ones load


@pytest.mark.parametrize("joint", [True, False])
def test_one_adapter_is_used_alone_without_a_fusion(tiny_model, adapter_dirs, tokenizer, tmp_path, joint):
    from kinject.interfaces import Head
    from kinject.plugins.mop.fusion import load_fused_model, save_fused_model
    from kinject.training import build_task_model

    model, setup, mix = fused(tiny_model, adapter_dirs[2:3], joint=joint)
    assert setup == "part-2" and str(model.active_adapters) == "Stack[part-2]"
    names = [n for n, _ in model.named_parameters()]
    assert not any("adapter_fusion_layer" in n for n in names) and any(".adapters.part-2." in n for n in names)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == (set(names) if joint else {"classifier.weight", "classifier.bias"})
    inputs = batch(tokenizer, labels=False)
    expected = model.eval()(**inputs).logits
    plain = build_task_model(tiny_model, Head("sequence", 2), seed=0).eval()  # same base and head, no adapter
    assert not torch.allclose(plain(**inputs).logits, expected)
    save_fused_model(model, tokenizer, tmp_path / "model", setup, mix)
    assert json.loads((tmp_path / "model" / "config.json").read_text())["mop"]["adapters"] == ["part-2"]
    assert torch.equal(load_fused_model(tmp_path / "model")(**inputs).logits, expected)


def test_the_mixture_settings_are_typed_and_a_misspelt_one_is_refused():
    from pydantic import ValidationError

    from kinject.plugins.mop.fusion import MixtureSettings

    good = {"mixture": "gumbel", "tau": 0.5, "top_k": 2, "loss_coef": 0.01}
    assert MixtureSettings.model_validate(good).model_dump() == good  # what install_mixture and config.mop get
    for bad in ({**good, "tua": 0.1}, {**good, "mixture": "sparse"}, {k: v for k, v in good.items() if k != "top_k"}):
        with pytest.raises(ValidationError):
            MixtureSettings.model_validate(bad)


def test_fusion_only_training_freezes_base_and_adapters(tiny_model, adapter_dirs):
    model, _, _ = fused(tiny_model, adapter_dirs, joint=False)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("adapter_fusion_layer" in n or n.startswith("classifier") for n in trainable)
    model, _, _ = fused(tiny_model, adapter_dirs, joint=True)
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("entity_head", ["linear", "names", "frozen-random"])
def test_adapter_training_leaves_base_weights_bit_identical(tiny_model, tokenizer, tmp_path, entity_head):
    from kinject.knowledge.kg.batching import KGCollator
    from kinject.api import load_encoder
    from kinject.plugins.mop.entity_prediction import EntityPredictor, frozen_random_head, name_embeddings
    from kinject.plugins.mop.part_adapters import adapter_encoder, base_digest
    from kinject.spec import TrainingSpec
    from kinject.training import train

    from adapters import SeqBnConfig

    encoder = load_encoder(tiny_model)
    names = name_embeddings(encoder, tokenizer, ["gene", "drug", "tumor", "protein", "dose"], 16) \
        if entity_head == "names" else None
    encoder = adapter_encoder(encoder, "part-0", SeqBnConfig(reduction_factor=8).to_dict())
    head = frozen_random_head(encoder, 5) if entity_head == "frozen-random" else None
    model = EntityPredictor(encoder, 5, names, head)
    head_before = {k: v.clone() for k, v in model.head.state_dict().items()}
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    digest = base_digest(encoder)
    rows = tokenizer(["gene", "drug dose", "tumor cells", "protein level"] * 4, ["causes"] * 16)
    features = [{"input_ids": ids, "attention_mask": m, "token_type_ids": t, "labels": i % 5}
                for i, (ids, m, t) in enumerate(zip(rows["input_ids"], rows["attention_mask"], rows["token_type_ids"]))]
    stats = train(model, features, KGCollator(tokenizer), TrainingSpec(epochs=2, batch_size=4, learning_rate=1e-2),
                  tmp_path, seed=0)
    assert stats["global_step"] == 8
    after = encoder.state_dict()
    adapter_keys = [k for k in after if ".adapters.part-0." in k]
    assert adapter_keys and any(not torch.equal(before[k], after[k]) for k in adapter_keys)  # the adapter learned
    assert all(torch.equal(before[k], after[k]) for k in after if k not in adapter_keys)  # the base did not move
    assert base_digest(encoder) == digest
    head_after = model.head.state_dict()
    if entity_head == "frozen-random":  # the reference's head: a random map that never trains, on the pooler output
        assert sorted(head_after) == ["linear.bias", "linear.weight"]
        assert all(torch.equal(head_before[k], head_after[k]) for k in head_after)
        inputs = {k: torch.tensor(features[0][k])[None] for k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            pooled = encoder.eval()(**inputs).pooler_output
            assert torch.equal(model.eval()(**inputs).logits, model.head.linear(pooled))
        return
    assert any(not torch.equal(head_before[k], head_after[k]) for k in head_after if k != "names")  # head trained
    if entity_head == "names":
        assert torch.equal(head_before["names"], head_after["names"])  # the name embeddings are a frozen buffer


def test_name_embeddings_are_mean_pooled_per_name_whatever_the_batch(tiny_model, tokenizer):
    from kinject.api import load_encoder
    from kinject.plugins.mop.entity_prediction import name_embeddings

    encoder = load_encoder(tiny_model)
    names = ["a much longer entity name with many words", "gene", "tumor cell line", "x"]
    together = name_embeddings(encoder, tokenizer, names, 32, batch_size=4)  # padded to the longest
    one_by_one = torch.cat([name_embeddings(encoder, tokenizer, [n], 32) for n in names])
    assert torch.allclose(together, one_by_one, atol=1e-5)  # padding masked out, rows back in input order
    with torch.inference_mode():
        batch = tokenizer(["gene"], return_tensors="pt")
        assert torch.allclose(one_by_one[1], encoder(**batch).last_hidden_state[0].mean(0), atol=1e-5)



@pytest.mark.slow
def test_kinject_eval_scores_a_saved_mop_model_like_its_own_loader(tiny_model, adapter_dirs, tokenizer, tmp_path,
                                                                   textcls_dir, capsys):
    from helpers import run_kinject

    from kinject.interfaces import Environment
    from kinject.plugins.mop.fusion import load_fused_model, save_fused_model
    from kinject.registry import registry
    from kinject.training import predict

    model, fuse, mix = fused(tiny_model, adapter_dirs, "gumbel", tau=0.5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "adapter_fusion_layer" in name or "classifier" in name:
                p.add_(torch.randn_like(p))
    save_fused_model(model, tokenizer, tmp_path / "model", fuse, mix)
    evaluate = ["eval", str(tmp_path / "model"), "--task", "textcls", "--set", f"task.path={textcls_dir}",
                "--set", "model.max_length=32", "--set", "training.bf16=false", "-o", str(tmp_path / "eval")]
    # alone, the folder does not say how to load it: one line, not scores of the model without its adapters
    assert run_kinject(*evaluate) == 2 and "holds adapters" in capsys.readouterr().err
    # in a run folder, run.json names the stage config that scored it, whose load_model is the one route
    (tmp_path / "run.json").write_text(json.dumps({"stages": [
        {"name": "mop-finetune", "config_type": "kinject.plugins.mop.fusion.FusionConfig"},
        {"name": "mop-evaluate", "config_type": "kinject.plugins.mop.fusion.FusedEvaluateConfig"}]}))
    assert run_kinject(*evaluate) == 0
    task = registry("tasks").get("textcls")(path=str(textcls_dir))
    env = Environment(tmp_path, tmp_path / "cache")
    examples = task.examples("test", env)
    features = task.featurize(tokenizer, examples, 32, env)
    logits = predict(load_fused_model(tmp_path / "model"), features, task.collator(tokenizer), 64, tmp_path / "w")
    expected = [r["scores"] for r in task.predictions("test", examples, features, logits, env)]
    got = [json.loads(line)["scores"] for line in (tmp_path / "eval" / "predictions" / "test.jsonl").read_text()
           .splitlines()]
    assert np.allclose(got, expected, atol=1e-6)


@pytest.mark.slow
def test_adapter_training_resumes_from_its_checkpoint(tiny_model, tokenizer, tmp_path):
    """An adapter run killed after its step-2 checkpoint and resumed ends where an uninterrupted run ends."""
    from adapters import SeqBnConfig

    from kinject.knowledge.kg.batching import KGCollator
    from kinject.api import load_encoder
    from kinject.plugins.mop.entity_prediction import EntityPredictor
    from kinject.plugins.mop.part_adapters import adapter_encoder
    from kinject.spec import TrainingSpec
    from kinject.training import train

    rows = tokenizer(["gene", "drug dose", "tumor cells", "protein level"] * 4, ["causes"] * 16)
    features = [{"input_ids": ids, "attention_mask": m, "labels": i % 3}
                for i, (ids, m) in enumerate(zip(rows["input_ids"], rows["attention_mask"]))]

    class Crash(KGCollator):  # the run dies after its checkpoint at step 2
        calls = 0

        def __call__(self, batch):
            Crash.calls += 1
            if Crash.calls == 4:  # (accelerate fetches one batch ahead)
                raise KeyboardInterrupt
            return super().__call__(batch)

    def run(work, resume: bool, collator):
        torch.manual_seed(0)
        model = EntityPredictor(adapter_encoder(load_encoder(tiny_model), "part-0",
                                                SeqBnConfig(reduction_factor=8).to_dict()), 3)
        spec = TrainingSpec(max_steps=4, batch_size=4, learning_rate=1e-2, save_steps=2)
        return model, train(model, features, collator, spec, work, seed=0, resume=resume)

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "work", False, Crash(tokenizer))
    model, resumed = run(tmp_path / "work", True, KGCollator(tokenizer))
    assert resumed["resumed_from_step"] == 2 and resumed["global_step"] == 4
    reference, _ = run(tmp_path / "fresh", False, KGCollator(tokenizer))
    state, expected = model.state_dict(), reference.state_dict()
    assert all(torch.allclose(state[k], expected[k], atol=1e-6) for k in expected)
