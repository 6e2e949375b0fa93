"""KIMERA retraining: well-formed multi-task KG batches, exact head freezing through the HF Trainer, pooling."""

from __future__ import annotations

import collections

import pytest
import torch

from kinject.interfaces import Environment
from kinject.plugins.kimera.multitask import KG_TASKS, KGMultiTaskModel, pretrained_mlm_head
from kinject.plugins.kimera.retrain import KGBatchDataset, MultiTaskBatchSampler, TaskCollator, retrain
from kinject.spec import TrainingSpec

from test_kimera_gating import snapshot

ENTITIES = ["disease", "gene", "protein", "cell", "drug", "cancer", "chemical", "treatment", "dose", "patients"]
RELATIONS = ["causes", "associated", "effect"]


@pytest.fixture(scope="module")
def kg(tmp_path_factory, tiny_model):
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data
    from kinject.api import load_tokenizer
    from kinject.knowledge.sources.triples import TriplesSource

    folder = tmp_path_factory.mktemp("kg")
    rows = [(ENTITIES[i], RELATIONS[i % 3], ENTITIES[(i * 3 + 1) % 10]) for i in range(10)]
    rows += [(ENTITIES[i], RELATIONS[(i + 1) % 3], ENTITIES[(i + 5) % 10]) for i in range(10)]
    rows = [r for r in rows if r[0] != r[2]]
    (folder / "kg.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    env = Environment(data_dir=folder, cache_dir=folder / "cache")
    tokenizer = load_tokenizer(tiny_model)
    data = build_kg_data(TriplesSource(path=str(folder / "kg.tsv")), env, tokenizer,
                         KGDataConfig(tasks=list(KG_TASKS), max_length=32))
    return data, tokenizer, set(rows)


def batches_of(data, tokenizer, batch_size=4, seed=0):
    from kinject.training import length_grouped_batches

    datasets = {t: getattr(data, t) for t in KG_TASKS}
    ds = KGBatchDataset(datasets)
    sampler = MultiTaskBatchSampler(ds, batch_size, seed, {t: 1.0 for t in KG_TASKS}, length_grouped_batches)
    collate = TaskCollator(tokenizer)
    return [collate([ds[i] for i in idx]) for idx in sampler], sampler


def parts(tokenizer, ids) -> list[str]:
    text = tokenizer.decode([i for i in ids if i != tokenizer.pad_token_id])
    return [p.strip() for p in text.replace("[CLS]", "").split("[SEP]")][:-1]


def test_kg_batches_keep_their_shape_after_sampler_and_collator(kg):
    data, tokenizer, real = kg
    batches, sampler = batches_of(data, tokenizer)
    tasks_seen = [KG_TASKS[int(b["task"][0])] for b in batches]
    assert set(tasks_seen) == set(KG_TASKS)
    assert tasks_seen != sorted(tasks_seen, key=KG_TASKS.index)  # tasks are interleaved, not one after another
    triplet = collections.Counter()
    entity_names = set(ENTITIES)
    for batch in batches:
        assert bool((batch["task"] == batch["task"][0]).all())  # one task per batch
        kind = KG_TASKS[int(batch["task"][0])]
        for row in range(len(batch["input_ids"])):
            ids, labels = batch["input_ids"][row], batch["labels"][row]
            mask = batch["attention_mask"][row].bool()
            if kind == "entity":
                masked = ids == tokenizer.mask_token_id
                assert bool(masked.any()) and torch.equal(masked, labels != -100)  # labels only on masked tokens
                gold = tokenizer.decode(labels[labels != -100])
                assert gold in entity_names  # every token of one entity, nothing else
                s, r, o = parts(tokenizer, torch.where(masked, labels, ids)[mask].tolist())
                assert (s, r, o) in real and gold in (s, o)
            elif kind == "relation":
                s, o = parts(tokenizer, ids[mask].tolist())
                assert (s, data.relations[int(labels)], o) in real
            else:
                triplet[int(labels)] += 1
                triple = tuple(parts(tokenizer, ids[mask].tolist()))
                assert (triple in real) == (int(labels) == 1)  # no corrupted triple equals a real one
    assert triplet[1] == len(real) and abs(triplet[1] - triplet[0]) <= 1  # balanced
    # every row of every task is used exactly once per epoch
    again = [i for b in iter(sampler) for i in b]
    assert sorted(again) == list(range(len(KGBatchDataset({t: getattr(data, t) for t in KG_TASKS}))))


def test_kg_batch_dataset_is_a_tagged_concat_dataset(kg):
    data, _, _ = kg
    sets = {"entity": data.entity, "relation": data.relation.select([]), "triplet": data.triplet}
    ds = KGBatchDataset(sets)
    assert isinstance(ds, torch.utils.data.ConcatDataset) and ds.names == ["entity", "triplet"]  # empty left out
    assert ds.offsets == {"entity": 0, "triplet": len(data.entity)} and len(ds) == len(data.entity) + len(data.triplet)
    first, last = ds[0], ds[len(ds) - 1]
    assert first["task"] == KG_TASKS.index("entity") and last["task"] == KG_TASKS.index("triplet")
    assert last["input_ids"] == data.triplet[len(data.triplet) - 1]["input_ids"]


@pytest.mark.parametrize("pooling", ["cls", "mean", "max", "learned"])
def test_pooling_ignores_padding(pooling):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32))
    model = KGMultiTaskModel(encoder, num_relations=3, pooling=pooling).eval()
    hidden = torch.randn(1, 5, 16)
    padded = torch.cat([hidden, torch.full((1, 3, 16), 1e4)], dim=1)
    short = model.pool(hidden, torch.ones(1, 5, dtype=torch.long))
    long = model.pool(padded, torch.tensor([[1] * 5 + [0] * 3]))
    torch.testing.assert_close(short, long)


@pytest.mark.parametrize("forward_mask", [False, True])
def test_hard_mask_retraining_through_the_trainer_freezes_heads_exactly(kg, tiny_model, tmp_path, forward_mask):
    from transformers import AutoModel

    from kinject.training import length_grouped_batches

    data, tokenizer, _ = kg
    encoder = AutoModel.from_pretrained(tiny_model)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    before = snapshot(encoder)
    ffn = encoder.encoder.layer[0].intermediate.dense.weight.detach().clone()
    training = TrainingSpec(max_steps=6, learning_rate=5e-3, batch_size=4, weight_decay=0.1, warmup_ratio=0.0,
                            save_steps=100, logging_steps=3)
    stats = retrain(encoder, tokenizer, {t: getattr(data, t) for t in KG_TASKS}, len(data.relations), training,
                    tmp_path / "work", seed=0, mask=mask, forward_mask=forward_mask, batches_of=length_grouped_batches)
    assert stats["global_step"] == 6
    after = snapshot(encoder)
    for (layer, head), slices in before.items():
        for name, old in slices.items():
            same = torch.equal(after[(layer, head)][name], old)
            if mask[layer, head] == 1:
                assert same, (layer, head, name)
            else:
                assert not same, (layer, head, name)
    assert not torch.equal(encoder.encoder.layer[0].intermediate.dense.weight, ffn)  # other_params: train
    assert not encoder.encoder.layer[0].attention.output.dense._forward_pre_hooks  # gates removed afterwards


def test_other_params_freeze_leaves_non_attention_weights_alone(kg, tiny_model, tmp_path):
    from transformers import AutoModel

    from kinject.training import length_grouped_batches

    data, tokenizer, _ = kg
    encoder = AutoModel.from_pretrained(tiny_model)
    frozen = {n: p.detach().clone() for n, p in encoder.named_parameters()
              if "attention.self" not in n and not n.endswith("attention.output.dense.weight")}
    training = TrainingSpec(max_steps=3, learning_rate=5e-3, batch_size=4, warmup_ratio=0.0, save_steps=100)
    retrain(encoder, tokenizer, {t: getattr(data, t) for t in KG_TASKS}, len(data.relations), training,
            tmp_path / "work", seed=0, other_params="freeze", batches_of=length_grouped_batches)
    for name, p in encoder.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name
    assert not torch.equal(encoder.encoder.layer[0].attention.self.query.weight,
                           AutoModel.from_pretrained(tiny_model).encoder.layer[0].attention.self.query.weight)


@pytest.mark.parametrize("sampling", ["proportional", "uniform"])
def test_task_sampling_batch_counts_per_task(kg, sampling):
    """proportional: each task's own batches once per epoch (a task's share = its size); uniform: every task
    the same number of batches, one of each per turn, smaller tasks starting new passes over all their rows."""
    from kinject.knowledge.kg.batching import lengths_of
    from kinject.training import length_grouped_batches

    data, _, _ = kg
    datasets = {t: getattr(data, t) for t in KG_TASKS}
    ds = KGBatchDataset(datasets)
    own = {t: len(list(length_grouped_batches(lengths_of(datasets[t]), 4, 0))) for t in KG_TASKS}
    assert len(set(own.values())) > 1  # the tasks differ in size, else the two samplings would agree
    sampler = MultiTaskBatchSampler(ds, 4, 0, {t: 1.0 for t in KG_TASKS}, length_grouped_batches, sampling)
    for _ in range(2):  # two epochs
        plan = list(iter(sampler))
        tasks = [KG_TASKS[ds[batch[0]]["task"]] for batch in plan]
        assert all(KG_TASKS[ds[i]["task"]] == task for batch, task in zip(plan, tasks) for i in batch)
        counts = collections.Counter(tasks)
        if sampling == "proportional":
            assert counts == own and sorted(i for b in plan for i in b) == list(range(len(ds)))
        else:
            turns = max(own.values())
            assert counts == {t: turns for t in KG_TASKS} and len(plan) == len(sampler) == 3 * turns
            assert all(sorted(tasks[i:i + 3]) == sorted(KG_TASKS) for i in range(0, len(tasks), 3))
            for task in KG_TASKS:  # every row of every task is seen; the largest task's exactly once
                rows = [i for b, t in zip(plan, tasks) if t == task for i in b]
                start = ds.offsets[task]
                assert set(rows) == set(range(start, start + len(datasets[task])))
                if own[task] == turns:
                    assert len(rows) == len(datasets[task])


def test_entity_head_starts_from_the_pretrained_mlm_head(tmp_path, caplog):
    """With the checkpoint's MLM head loaded, the entity head computes exactly BertForMaskedLM's logits; an
    encoder-only checkpoint gives None and a log line (the head then starts random)."""
    from transformers import AutoModel, BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    mlm = BertForMaskedLM(BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64)).eval()
    with torch.no_grad():
        mlm.cls.predictions.bias.normal_()  # zeros at init: make the bias tell
    mlm.save_pretrained(tmp_path / "with-head")
    mlm.bert.save_pretrained(tmp_path / "encoder-only")
    weights = pretrained_mlm_head(str(tmp_path / "with-head"))
    assert weights is not None and set(weights) == {"dense.weight", "dense.bias", "norm.weight", "norm.bias", "bias"}
    model = KGMultiTaskModel(AutoModel.from_pretrained(tmp_path / "with-head"), num_relations=2).eval()
    random_start = model.mlm_transform[0].weight.detach().clone()
    model.load_mlm_head(weights)
    assert not torch.equal(model.mlm_transform[0].weight, random_start)
    ids = torch.randint(5, 60, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = model.encoder(input_ids=ids).last_hidden_state
        ours = model.mlm_transform(hidden) @ model.encoder.get_input_embeddings().weight.t() + model.mlm_bias
        torch.testing.assert_close(ours, mlm(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    with caplog.at_level("INFO", logger="kinject"):
        assert pretrained_mlm_head(str(tmp_path / "encoder-only")) is None
    assert "no pre-trained MLM head" in caplog.text and "starts random" in caplog.text


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA accelerator on this machine: the b+f retraining step on one was not run")
def test_bf_retraining_step_on_the_accelerator(kg, tiny_model, tmp_path):
    """b+f on CUDA: the CPU-made gates (1 - m) and update rates follow the model the Trainer moved."""
    from transformers import AutoModel

    data, tokenizer, _ = kg
    encoder = AutoModel.from_pretrained(tiny_model)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    before = snapshot(encoder)
    training = TrainingSpec(max_steps=2, learning_rate=5e-3, batch_size=4, warmup_ratio=0.0, save_steps=100)
    retrain(encoder, tokenizer, {t: getattr(data, t) for t in KG_TASKS}, len(data.relations), training,
            tmp_path / "work", seed=0, mask=mask, forward_mask=True)
    assert next(encoder.parameters()).device.type == "cuda"
    after = snapshot(encoder)
    for (layer, head), slices in before.items():
        for name, old in slices.items():
            assert torch.equal(after[(layer, head)][name].cpu(), old) == bool(mask[layer, head] == 1)
