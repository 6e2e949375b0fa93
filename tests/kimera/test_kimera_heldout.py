"""KIMERA's held-out KG evaluation (strategy.kg_heldout): a seeded split of the distinct triples before the KG
data is built, no held-out triple in any training row, the accuracy of the trained heads next to majority and
chance levels in retrain.json, and kg_heldout=0 leaving the KG data as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kinject.errors import DataError
from kinject.interfaces import Environment
from kinject.plugins.kimera.heldout import build_retraining_data, score_heldout, split_source
from kinject.plugins.kimera.multitask import KG_TASKS, KGMultiTaskModel
from kinject.knowledge.sources.triples import TriplesSource

from test_kimera_controls import ENTITIES, KG_ROWS, RELATIONS, prepared, stage_dirs
from test_kimera_retrain import parts

KG = {"max_length": 32, "max_triples": 20000}  # the retraining's rows (KGSettings)


@pytest.fixture
def graph(tmp_path, tiny_model):
    """A triples source with repeats (the first two rows twice), its environment and the tiny tokenizer."""
    from kinject.api import load_tokenizer

    (tmp_path / "kg.tsv").write_text("".join("\t".join(r) + "\n" for r in KG_ROWS + KG_ROWS[:2]))
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    return TriplesSource(path=str(tmp_path / "kg.tsv")), env, load_tokenizer(tiny_model)


def texts(part, env) -> list[tuple]:
    return [(t.head, t.relation, t.tail) for t in part.iter_triples(env)]


def test_split_holds_out_distinct_triples_with_a_seed(graph):
    source, env, _ = graph
    train, held = split_source(source, env, None, 5, seed=0)
    held_rows, train_rows = texts(held, env), texts(train, env)
    assert len(held_rows) == len(set(held_rows)) == 5 and not set(held_rows) & set(train_rows)
    assert set(held_rows) | set(train_rows) == set(KG_ROWS) and len(train_rows) == len(KG_ROWS) + 2 - 5 - \
        sum(row in held_rows for row in KG_ROWS[:2])  # a held-out triple's repeat is held out with it
    assert texts(split_source(source, env, None, 5, seed=0)[1], env) == held_rows
    assert set(texts(split_source(source, env, None, 5, seed=1)[1], env)) != set(held_rows)
    capped_train, capped_held = split_source(source, env, 8, 3, seed=0)
    assert set(texts(capped_train, env)) | set(texts(capped_held, env)) == set(KG_ROWS[:8])
    assert held.fingerprint(env) != train.fingerprint(env) != capped_train.fingerprint(env)
    with pytest.raises(DataError, match=f"strategy.kg_heldout: 20 held-out .* the KG holds {len(KG_ROWS)} distinct"):
        split_source(source, env, None, len(KG_ROWS), seed=0)


DENSE = [(h, r, t) for h in ENTITIES[:4] for r in RELATIONS[:2] for t in ENTITIES[:4] if h != t]  # every pair


@pytest.mark.parametrize("dense", [False, True])
def test_no_held_out_triple_reaches_a_training_row(graph, tmp_path, dense):
    """Sparse: the graph of the other tests. Dense (every ordered pair under both relations): nearly every
    corruption of a training triple is a held-out triple and vice versa, so the shared negatives must go."""
    source, env, tokenizer = graph
    real = set(DENSE if dense else KG_ROWS)
    if dense:
        (tmp_path / "dense.tsv").write_text("".join("\t".join(r) + "\n" for r in DENSE))
        source = TriplesSource(path=str(tmp_path / "dense.tsv"))
    data, held = build_retraining_data(source, env, tokenizer, 0, list(KG_TASKS), **KG, heldout=6)
    held_out = set(texts(split_source(source, env, None, 6, seed=0)[1], env))
    seen = set()
    for kind in KG_TASKS:
        for row in getattr(data, kind):
            ids = np.array(row["input_ids"])
            if kind == "entity":
                labels = np.array(row["labels"])
                ids = np.where(labels != -100, labels, ids)
            pieces = parts(tokenizer, ids.tolist())
            if kind == "relation":
                pieces = [pieces[0], data.relations[row["labels"]], pieces[1]]
            seen.add(tuple(pieces))
            assert tuple(pieces) not in held_out, (kind, pieces)  # negatives included
    assert real - held_out <= seen
    rows = [(tuple(parts(tokenizer, r["input_ids"])), r["labels"]) for r in held.triplet]
    assert {t for t, y in rows if y == 1} == held_out
    assert all(t not in real for t, y in rows if y == 0)  # no held-out negative is a training (or any) triple
    dropped = held.stats["shared_negatives_dropped"]
    assert (dropped["train"] > 0 and dropped["heldout"] > 0) if dense else dropped == {"train": 0, "heldout": 0}
    assert sorted(held.relations[r["labels"]] for r in held.relation) == sorted(t[1] for t in held_out)


def test_kg_heldout_zero_builds_the_kg_data_as_before(graph):
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data

    source, env, tokenizer = graph
    data, held = build_retraining_data(source, env, tokenizer, 3, list(KG_TASKS), **KG, heldout=0)
    before = build_kg_data(source, env, tokenizer, KGDataConfig(tasks=list(KG_TASKS), max_length=32,
                                                                max_triples=20000, negatives_seed=3))
    assert held is None and data.path == before.path and before.cached  # the same cache entry


def test_score_heldout_counts_what_the_heads_predict(graph, tiny_model):
    """Heads rigged to always answer one class score exactly that class's share of the held-out rows."""
    from transformers import AutoModel

    source, env, tokenizer = graph
    data, held = build_retraining_data(source, env, tokenizer, 0, list(KG_TASKS), **KG, heldout=8)
    model = KGMultiTaskModel(AutoModel.from_pretrained(tiny_model), len(data.relations))
    with torch.no_grad():
        for head, answer in ((model.relation_head, 2), (model.triplet_head, 1)):
            head.weight.zero_()
            head.bias.zero_()
            head.bias[answer] = 1.0
    out = score_heldout(model, held, data, list(KG_TASKS), tokenizer, batch_size=3, seed=0)
    gold = [data.relations.index(held.relations[r["labels"]]) for r in held.relation]
    assert out["triples"] == 8 and out["relation"]["rows"] == 8
    assert out["relation"]["accuracy"] == pytest.approx(np.mean([g == 2 for g in gold]))
    assert out["relation"]["chance"] == pytest.approx(1 / 3)
    train_gold = list(data.relation["labels"])
    majority = max(set(train_gold), key=train_gold.count)
    assert out["relation"]["majority_class"] == data.relations[majority]
    assert out["relation"]["majority"] == pytest.approx(np.mean([g == majority for g in gold]))
    triplet = [r["labels"] for r in held.triplet]
    assert out["triplet"]["accuracy"] == pytest.approx(np.mean(triplet)) and out["triplet"]["chance"] == 0.5
    assert model.training  # left as it was


@pytest.mark.slow
def test_retrain_stage_reports_held_out_accuracy(tmp_path, textcls_dir, tiny_model):
    from kinject.engine import execute

    run = prepared(tmp_path, textcls_dir, variant="no-mask", kg_heldout=4)
    execute(run, tmp_path / "run")
    retrained = json.loads((stage_dirs(tmp_path / "run")["kimera-retrain"] / "retrain.json").read_text())
    heldout = retrained["heldout"]
    assert heldout["triples"] == 4 and heldout["seed"] == 42
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    train = split_source(TriplesSource(path=str(tmp_path / "kg.tsv")), env, 20000, 4, seed=42)[0]
    assert retrained["kg"]["triples"] == len(texts(train, env)) <= len(KG_ROWS) + 2 - 4
    for kind in ("relation", "triplet"):
        for field in ("accuracy", "majority", "chance"):
            assert 0.0 <= heldout[kind][field] <= 1.0, (kind, field)
    assert heldout["relation"]["rows"] == 4 and heldout["triplet"]["rows"] >= 5
    plain = prepared(tmp_path, textcls_dir, variant="no-mask")
    execute(plain, tmp_path / "plain")
    retrained = json.loads((stage_dirs(tmp_path / "plain")["kimera-retrain"] / "retrain.json").read_text())
    assert "heldout" not in retrained and retrained["kg"]["triples"] == len(KG_ROWS) + 2
    with pytest.raises(DataError, match="strategy.kg_heldout: 40 held-out"):
        prepared(tmp_path, textcls_dir, variant="no-mask", kg_heldout=40)
