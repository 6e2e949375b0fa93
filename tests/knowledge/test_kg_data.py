"""KG training data: well-formed sequences, balanced valid/corrupted triples, cache hit/miss, atomic cache."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from kinject.errors import DataError
from kinject.interfaces import Environment, KnowledgeSource, Triple
from kinject.knowledge.kg.data import KGCollator, KGDataConfig, build_kg_data, lengths_of
from kinject.training import length_grouped_batches, useful_token_fraction
from kinject.knowledge.sources.triples import TriplesSource


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def write_kg(folder: Path, n_ent: int = 30, n_rows: int = 200, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rels = ["causes", "treats", "is part of", "located in"]
    with open(folder / "kg.tsv", "w") as handle:
        for _ in range(n_rows):
            h, t = rng.integers(0, n_ent, 2)
            handle.write(f"entity {'x' * (h % 5)} {h}\t{rels[rng.integers(0, 4)]}\tthing {t}{'y' * (t % 7)}\n")
    return folder / "kg.tsv"


@pytest.fixture
def kg(tmp_path, tokenizer):
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    source = TriplesSource(path=str(write_kg(tmp_path / "kg")))
    return env, source, build_kg_data(source, env, tokenizer, KGDataConfig(max_length=64, chunk_size=37))


def test_entity_mlm_labels_only_on_masked_entity(kg, tokenizer):
    env, source, data = kg
    triples = list(source.iter_triples(env))
    assert len(data.entity) == 2 * len(triples)
    for row in data.entity.select(range(0, len(data.entity), 7)):
        ids, labels = np.array(row["input_ids"]), np.array(row["labels"])
        masked = labels != -100
        assert masked.any()
        assert (ids[masked] == tokenizer.mask_token_id).all() and (ids[~masked] != tokenizer.mask_token_id).all()
        # the masked positions form one contiguous span: one entity, never the relation
        span = np.flatnonzero(masked)
        assert (np.diff(span) == 1).all()
        seps = np.flatnonzero(ids == tokenizer.sep_token_id)
        assert len(seps) == 3 and ids[0] == tokenizer.cls_token_id
        assert span[-1] < seps[0] or span[0] > seps[1]
        target = tokenizer.decode(labels[masked]).replace(" ", "")
        assert target in {e.replace(" ", "")[: len(target)] for e in data.entities}
        assert len(row["attention_mask"]) == len(ids) == row["length"] <= 64


def test_entity_rows_reconstruct_the_triple(kg, tokenizer):
    env, source, data = kg
    first = next(iter(source.iter_triples(env)))
    row = data.entity[0]  # tail masked: given (s, r) predict o
    ids, labels = np.array(row["input_ids"]), np.array(row["labels"])
    filled = np.where(labels != -100, labels, ids)
    text = tokenizer.decode(filled, skip_special_tokens=True).replace(" ", "")
    assert text == (first.head + first.relation + first.tail).replace(" ", "").lower()


def test_relation_tail_labels_in_range(kg):
    _, _, data = kg
    rel = np.array(data.relation["labels"])
    assert rel.min() >= 0 and rel.max() < len(data.relations) and len(set(rel)) == len(data.relations)
    tail = np.array(data.tail["labels"])
    assert tail.min() >= 0 and tail.max() < len(data.entities)
    assert (tail == np.array(data.triples["tail"])).all()


def test_triplets_balanced_and_negatives_never_real(kg):
    _, _, data = kg
    labels = np.array(data.triplet["labels"])
    assert labels.sum() == len(labels) - labels.sum() == len(data.triples)
    real = {tuple(x) for x in zip(data.triples["head"], data.triples["relation"], data.triples["tail"])}
    positives = {tuple(r["input_ids"]) for r in data.triplet if r["labels"] == 1}
    negatives = [tuple(r["input_ids"]) for r in data.triplet if r["labels"] == 0]
    assert not set(negatives) & positives
    assert len(real) > 0 and data.stats["negatives_dropped"] == 0


def test_cache_hit_then_miss_when_a_filter_changes(kg, tokenizer):
    env, source, data = kg
    again = build_kg_data(source, env, tokenizer, KGDataConfig(max_length=64, chunk_size=37))
    assert again.cached and again.path == data.path and not data.cached
    filtered = TriplesSource(path=source.config.path, keep_relations=["causes", "treats"])
    other = build_kg_data(filtered, env, tokenizer, KGDataConfig(max_length=64, chunk_size=37))
    assert not other.cached and other.path != data.path and set(other.relations) == {"causes", "treats"}
    other_cfg = build_kg_data(source, env, tokenizer, KGDataConfig(max_length=32, chunk_size=37))
    assert not other_cfg.cached and other_cfg.path != data.path


def test_bad_input_leaves_no_cache(tmp_path, tokenizer):
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    path = tmp_path / "bad.tsv"
    path.write_text("a\tr\tb\nc\tr\n")
    with pytest.raises(DataError, match="bad.tsv:2"):
        build_kg_data(TriplesSource(path=str(path)), env, tokenizer, KGDataConfig(tasks=["relation"]))
    assert not list((tmp_path / "cache" / "kg").iterdir())
    data = build_kg_data(TriplesSource(path=str(path), on_bad_rows="skip"), env, tokenizer,
                         KGDataConfig(tasks=["relation"]))
    assert data.stats["bad_rows_skipped"] == 1 and len(data.relation) == 1 and data.entity is None


class Endless(KnowledgeSource):
    """An endless stream: building from it must stop at max_triples without materialising the source."""

    def iter_triples(self, env):
        for i in itertools.count():
            yield Triple(f"head {i % 50}", f"rel {i % 3}", f"tail {i}")

    def fingerprint(self, env):
        return "endless"


def test_build_streams_the_source(tmp_path, tokenizer):
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    data = build_kg_data(Endless(), env, tokenizer, KGDataConfig(tasks=["tail"], max_triples=500, chunk_size=128))
    assert len(data.tail) == 500 and len(data.entities) == 550


def test_length_grouped_batches_and_collator(kg, tokenizer):
    _, _, data = kg
    lengths = lengths_of(data.entity)
    batches = length_grouped_batches(lengths, 8, seed=0)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(data.entity)))
    assert useful_token_fraction(lengths, batches) >= 0.9
    assert batches != length_grouped_batches(lengths, 8, seed=1)
    assert batches == length_grouped_batches(lengths, 8, rng=np.random.default_rng(0))
    batch = KGCollator(tokenizer)([data.entity[i] for i in batches[0]])
    rows = [data.entity[i]["length"] for i in batches[0]]
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}  # no `length` column
    assert batch["input_ids"].shape == (len(rows), max(rows)) == batch["labels"].shape
    assert int(batch["attention_mask"].sum()) == sum(rows)
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()
    assert (batch["input_ids"][batch["attention_mask"] == 0] == tokenizer.pad_token_id).all()
    assert (batch["token_type_ids"][batch["attention_mask"] == 0] == 0).all()
    scalar = KGCollator(tokenizer)([data.relation[0], data.relation[1]])
    assert scalar["labels"].tolist() == [data.relation[0]["labels"], data.relation[1]["labels"]]


def test_length_grouped_batches_partial_last_longest_first():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 120, 203)
    batches = length_grouped_batches(lengths, 16, seed=3)
    assert [len(b) for b in batches] == [16] * 12 + [11]  # the one partial batch last
    assert max(lengths[batches[0]]) == lengths.max()  # the longest batch first
    assert sorted(i for b in batches for i in b) == list(range(203))
    assert useful_token_fraction(lengths, batches) > 0.9  # random batches: ~0.6


def test_length_grouped_batches_serves_the_training_sampler():
    """With a generator seeded by (seed, epoch) it is exactly kinject.training.loop's sampler in that epoch."""
    import random

    from kinject.training.batching import LengthBucketSampler

    lengths = [random.Random(1).randint(5, 120) for _ in range(203)]
    sampler = LengthBucketSampler(lengths, batch_size=16, seed=7)
    sampler.set_epoch(2)
    batches = length_grouped_batches(lengths, 16, rng=np.random.default_rng([7, 2]))
    assert [i for b in batches for i in b] == list(sampler)
