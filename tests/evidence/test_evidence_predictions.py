"""Task.predictions: one JSON record per evaluation unit, per task shape, from which the task's own metrics
are recomputed exactly (what ``kinject compare`` pairs across runs)."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest

from kinject.evidence.comparison import pair
from kinject.evidence.metrics import define
from kinject.interfaces import Environment
from kinject.tasks.sequence import SequenceClassificationTask, unit_ids

RNG = np.random.default_rng(11)


def recomputed(task, records, key, labels=()) -> float:
    return pair(define(key, task.metric_refs(), labels), {0: records}, [])[0]["value"]


def check(task, split, examples, features, logits, env, labels=()) -> list[dict]:
    """The records are JSON, ids unique, and every metric the task reports is recomputed from them."""
    records = task.predictions(split, examples, features, logits, env)
    assert json.loads(json.dumps(records)) == records
    assert len({r["id"] for r in records}) == len(records)
    scored = task.score(split, examples, features, logits, env)
    for key in scored:
        if key in ("queries", "abstracts") or key.endswith("_skipped"):
            continue
        assert recomputed(task, records, key, labels) == pytest.approx(scored[key], abs=1e-9), key
    return records


@pytest.fixture
def env(tmp_path):
    return Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")


def test_unit_ids_are_stable_unique_and_fall_back_to_split_index():
    examples = [{"id": "a"}, {}, {"id": "a"}, {"id": None}, {"id": 7}]
    assert unit_ids("test", examples) == ["a", "test-1", "a#1", "test-3", "7"]


def test_single_label_records_gold_pred_and_logits(env, textcls_dir):
    from kinject.tasks.textcls import TextClassificationTask

    task = TextClassificationTask(path=textcls_dir)
    examples = task.examples("test", env)
    logits = RNG.normal(size=(len(examples), 2)).astype(np.float32)
    records = check(task, "test", examples, [], logits, env, task.labels(env))
    first = records[0]
    assert first["id"] == examples[0]["id"] == "test-1" and first["gold"] == examples[0]["label"]
    assert first["pred"] == task.labels(env)[int(np.argmax(logits[0]))]
    assert first["scores"] == pytest.approx(logits[0].tolist())


def test_multi_label_records_label_lists(env, tmp_path):
    from kinject.tasks.textcls import TextClassificationTask

    folder = tmp_path / "ml"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        rows = [{"text": f"t{i}", "label": ",".join(["x", "y", "z"][: 1 + i % 3])} for i in range(12)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = TextClassificationTask(path=folder, multi_label=True)
    examples = task.examples("test", env)
    logits = RNG.normal(size=(len(examples), 3))
    records = check(task, "test", examples, [], logits, env, task.labels(env))
    assert records[2]["gold"] == ["x", "y", "z"]
    assert records[0]["pred"] == [name for name, v in zip(task.labels(env), logits[0]) if v >= 0]


class Regression(SequenceClassificationTask):
    """A regression task on in-memory examples."""

    problem_type: ClassVar[str] = "regression"
    default_metrics: ClassVar[list[dict]] = [{"name": "pearson"}]

    def examples(self, split, env):
        return [{"id": f"r{i}", "text": "x", "label": float(i % 5)} for i in range(20)]


def test_regression_records_floats(env):
    task = Regression()
    examples = task.examples("test", env)
    logits = RNG.normal(size=(20, 1))
    records = check(task, "test", examples, [], logits, env)
    mean, std = task.target_scale(env)  # the head predicts standardised targets; records are in label units
    assert (mean, std) == (2.0, pytest.approx(np.sqrt(2.0)))
    assert records[3] == {"id": "r3", "gold": 3.0, "pred": pytest.approx(float(logits[3, 0]) * std + mean)}


class ThreeClasses(SequenceClassificationTask):
    """Multi-class with AUROC and ECE (scores needed: the label order comes from the head)."""

    default_metrics: ClassVar[list[dict]] = [{"name": "auroc", "options": {"averages": ["macro", "weighted"]}},
                                             {"name": "ece"}]

    def examples(self, split, env):
        return [{"id": str(i), "text": "x", "label": "abc"[i % 3]} for i in range(30)]


def test_scores_follow_the_head_label_order(env):
    task = ThreeClasses()
    examples = task.examples("test", env)
    check(task, "test", examples, [], RNG.normal(size=(30, 3)), env, task.head(env).labels)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from kinject.api import load_tokenizer

    return load_tokenizer(tiny_model)


def test_token_task_one_record_per_sentence(env, tokenizer):
    from kinject.tasks.token import TokenClassificationTask

    class Tagging(TokenClassificationTask):
        entity_types: ClassVar[tuple[str, ...]] = ("X", "Y")

        def examples(self, split, env):
            tags = ["B-X", "I-X", "O", "B-Y", "O", "O"]
            return [{"id": f"s{i}", "words": ["w"] * (3 + i % 4), "tags": tags[: 3 + i % 4]} for i in range(12)]

    task = Tagging()
    examples = task.examples("test", env)
    features = task.featurize(tokenizer, examples, 16, env)
    width = max(len(f["input_ids"]) for f in features)
    logits = RNG.normal(size=(len(features), width, len(task.labels(env))))
    records = check(task, "test", examples, features, logits, env)
    assert [r["id"] for r in records] == [f"s{i}" for i in range(12)]
    assert all(len(r["gold"]) == len(r["pred"]) == len(ex["words"]) for r, ex in zip(records, examples))
    assert records[0]["gold"] == ["B-X", "I-X", "O"]


def test_pico_records_elements_per_word(env, tokenizer):
    from kinject.tasks.pico import EBMPicoTask

    task = EBMPicoTask()
    examples = [{"id": f"{i}-0", "group": str(i), "words": ["a", "b", "c", "d"],
                 "tags": ["B-PAR", "I-PAR", "O", "B-OUT"],
                 "elements": [["participants"], ["participants", "outcomes"], [], ["outcomes"]]} for i in range(8)]
    features = task.featurize(tokenizer, examples, 16, env)
    logits = RNG.normal(size=(len(features), max(len(f["input_ids"]) for f in features), len(task.labels(env))))
    records = check(task, "test", examples, features, logits, env)
    assert records[0]["gold"][1] == ["participants", "outcomes"]
    assert all(len(word) <= 1 for r in records for word in r["pred"])


def test_hoc_one_record_per_abstract(env):
    from kinject.tasks.hoc import HALLMARKS, HoCTask

    task = HoCTask()
    examples = [{"id": f"{p}_s{s}", "group": str(p), "text": "x", "label": [HALLMARKS[(p + s) % 10]] if s else []}
                for p in range(6) for s in range(3)]
    logits = RNG.normal(size=(len(examples), 10)) - 1
    records = check(task, "test", examples, [], logits, env, HALLMARKS)
    assert [r["id"] for r in records] == [str(p) for p in range(6)]
    assert records[1]["gold"] == sorted({HALLMARKS[2], HALLMARKS[3]})
    assert records[1]["scores"] == pytest.approx(logits[3:6].max(axis=0).tolist())


def test_retrieval_one_record_per_query_with_ranking(env):
    from kinject.tasks.retrieval import RetrievalTask

    class Passages(RetrievalTask):
        def queries(self, split, env):
            return [{"qid": f"q{i}", "query": f"query {i}", "candidates": [
                {"pid": f"p{j}", "text": f"passage {j}", "relevant": j in (i % 5, (i + 2) % 5)} for j in range(5)]}
                for i in range(10)]

    task = Passages()
    examples = task.examples("test", env)
    logits = np.round(RNG.normal(size=(len(examples), 2)), 1)  # ties in the ranking
    records = check(task, "test", examples, [], logits, env)
    first = records[0]
    assert first["id"] == "q0" and first["gold"] == ["p0", "p2"] and first["pred"] == first["ranking"][0]
    assert sorted(first["ranking"]) == [f"p{j}" for j in range(5)]
    assert first["scores"] == sorted(first["scores"], reverse=True)
