"""CAPR: the retrieval task base (pairs, grouping, ranking), MedQuAD/HPO/JSONL candidate sets, zero-shot,
bad input through the CLI, and a tiny end-to-end run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kinject.errors import DataError, SpecError
from kinject.interfaces import Environment
from kinject.registry import registry
from kinject.tasks.retrieval import read_queries
from kinject.tasks import capr, prepare_medquad

KINJECT = str(Path(sys.executable).parent / "kinject")


def write_capr(path: Path, n: int, candidates: int = 4, seed: int = 0) -> Path:
    """n queries 'what treats dN' whose relevant passage says 'drug dN treats ...'."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for q in range(n):
            cands = [{"pid": f"p{q}", "text": f"drug d{q} treats the disease", "relevant": True}]
            for j in rng.choice([x for x in range(n + candidates) if x != q], candidates - 1, replace=False):
                cands.append({"pid": f"p{j}", "text": f"the weather of town {j} was cold", "relevant": 0})
            handle.write(json.dumps({"qid": f"q{q}", "query": f"what treats d{q}", "candidates": cands}) + "\n")
    return path


@pytest.fixture
def capr_dir(tmp_path) -> Path:
    folder = tmp_path / "capr"
    folder.mkdir()
    for split, n in (("train", 12), ("dev", 6), ("test", 6)):
        write_capr(folder / f"{split}.jsonl", n, seed=len(split))
    return folder


def env_for(tmp_path, data_dir=None) -> Environment:
    return Environment(data_dir=data_dir or tmp_path / "nodata", cache_dir=tmp_path / "cache")


def test_examples_pairs_and_ranking_metrics(capr_dir, tmp_path):
    task = registry("tasks").get("capr")(dataset="jsonl", path=capr_dir, train_negatives=2)
    env = env_for(tmp_path)
    train = task.examples("train", env)
    assert len(train) == 12 * 3 and sum(ex["label"] == "relevant" for ex in train) == 12
    dev = task.examples("dev", env)
    assert len(dev) == 6 * 4 and {ex["group"] for ex in dev} == {f"q{i}" for i in range(6)}
    # relevant ranked first for q0..q2; third for q3..q5 (two distractors score higher)
    logits, seen = [], {}
    for ex in dev:
        q = int(ex["group"][1:])
        if ex["label"] == "relevant":
            s = 3.0 if q < 3 else 0.5
        else:
            seen[q] = seen.get(q, 0) + 1
            s = 1.0 if q >= 3 and seen[q] <= 2 else 0.0
        logits.append([0.0, s])
    rel_scores = np.array(logits)
    ranks = {f"q{q}": 1 if q < 3 else 3 for q in range(6)}
    metrics = task.score("dev", dev, [], rel_scores, env)
    assert metrics["recall@1"] == pytest.approx(np.mean([r == 1 for r in ranks.values()]))
    assert metrics["mrr"] == pytest.approx(np.mean([1 / r for r in ranks.values()]))
    assert metrics["recall@1"] == pytest.approx(0.5) and metrics["queries"] == 6
    # log-odds, not the raw relevant logit, decides the order
    shifted = np.stack([rel_scores[:, 1] * -1, np.zeros(len(dev))], axis=1)
    assert task.score("dev", dev, [], shifted, env)["recall@1"] == pytest.approx(0.5)


@pytest.mark.parametrize("line,message", [
    ('{"qid": "a", "query": "q", "candidates": [{"pid": "x", "text": "t", "relevant": false}]}',
     ":2: query 'a': no relevant candidate"),
    ('{"qid": "a", "query": "q"}', ":2: missing field 'candidates'"),
    ('{"qid": "a", "query": "q", "candidates": [{"pid": "x", "text": "t", "relevant": "maybe"}]}',
     ":2: candidate 0: 'relevant' must be"),
    ('{"qid": "a", "query": ', ":2: invalid JSON"),
])
def test_bad_capr_jsonl_names_file_and_line(tmp_path, line, message):
    path = write_capr(tmp_path / "bad.jsonl", 1)
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(DataError) as err:
        read_queries(path)
    assert f"{path}{message}" in str(err.value)


def test_empty_and_non_utf8_files(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match="empty file"):
        read_queries(tmp_path / "empty.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b'{"qid": "\xff"}\n')
    with pytest.raises(DataError, match=r"bin.jsonl:1: invalid UTF-8"):
        read_queries(tmp_path / "bin.jsonl")


@pytest.mark.slow
def test_cli_bad_capr_file_exits_2_naming_file_line(tmp_path):
    bad = write_capr(tmp_path / "bad.jsonl", 2)
    bad.write_text(bad.read_text() + '{"qid": "z", "query": "q", "candidates": [{"text": "t", "relevant": 0}]}\n')
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run([KINJECT, "run", "finetune", "--task", "capr", "--model", "tiny", "--set",
                             "task.dataset=jsonl", "--set", f"task.path={bad}", "--set", "task.setting=zero-shot",
                             "--data-dir", str(tmp_path / "nodata"), "--cache-dir", str(tmp_path / "c"),
                             "-o", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [x for x in (result.stdout + result.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and f"{bad}:3: query 'z': no relevant candidate" in lines[0]
    assert not (tmp_path / "out").exists()


def write_medquad(data_dir: Path) -> Path:
    rows = []
    for source, foci in (("GHR", ["alpha", "beta"]), ("NIDDK", ["gamma", "delta", "eps", "zeta"])):
        for focus in foci:
            for qtype in ("information", "treatment", "symptoms"):
                rows.append({"qid": f"{source}:{focus}:{qtype}", "question": f"What is the {qtype} of {focus} ?",
                             "answer": f"The {qtype} of {focus} is described here.", "focus": focus,
                             "source": source, "qtype": qtype})
    rows.append(dict(rows[-1], qid="dup", answer="Another answer to the same question."))
    (data_dir / "medquad").mkdir(parents=True)
    with gzip.open(data_dir / prepare_medquad.FILE, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows)
    return data_dir


def test_medquad_candidates_hard_negatives_and_source_split(tmp_path):
    data = write_medquad(tmp_path / "data")
    splits = prepare_medquad.build(data, ("GHR",), ("NIDDK",), candidates=5, seed=0)
    assert {q["qid"].split(":")[0] for q in splits["train"]} == {"GHR"}
    eval_queries = splits["dev"] + splits["test"]
    assert len(eval_queries) == 12  # 13 NIDDK pairs, one question asked twice
    dev_foci = {q["query"].split()[-2] for q in splits["dev"]}
    assert dev_foci.isdisjoint({q["query"].split()[-2] for q in splits["test"]})
    for query in eval_queries:
        focus = query["query"].split()[-2]
        cands = query["candidates"]
        assert len(cands) == len({c["pid"] for c in cands}) <= 5
        same_focus = [c for c in cands if f" of {focus} " in c["text"]]
        assert len(same_focus) >= 3  # the other answers about the topic are the hard negatives
        relevant = [c["text"] for c in cands if c["relevant"]]
        qtype = query["query"].split()[3]
        assert f"The {qtype} of {focus} is described here." in relevant
    dup = next(q for q in eval_queries if q["query"] == "What is the symptoms of zeta ?")
    assert sum(c["relevant"] for c in dup["candidates"]) == 2
    with pytest.raises(DataError, match="both a train and an eval source"):
        prepare_medquad.build(data, ("GHR",), ("GHR",))


@pytest.mark.slow
def test_hpo_default_and_zero_shot_settings(tmp_path, capr_dir):
    from kinject.knowledge.sources.hpo import iter_terms

    data = tmp_path / "nodata"
    env = env_for(tmp_path, data)
    task = registry("tasks").get("capr")()
    assert task.eval_dataset(env) == "hpo"
    assert "capr:hpo" in task.describe_data(env) and "hp.obo" in task.describe_data(env)
    test = task.queries("test", env)
    assert len(test) > 1000
    terms = {term.id: term for term in iter_terms(capr.hpo_obo_path())}
    for query in test[:50]:
        assert len(query["candidates"]) == 10 and sum(c["relevant"] for c in query["candidates"]) == 1
        term = terms[query["qid"]]
        assert query["query"] in [term.name, *term.synonyms]
        pids = {c["pid"] for c in query["candidates"]}
        assert set(p for p in term.parents if p in terms and terms[p].definition) <= pids
    with pytest.raises(SpecError, match="zero-shot"):
        registry("tasks").get("capr")(setting="zero-shot").train_dataset(env)
    zero = registry("tasks").get("capr")(dataset="jsonl", path=capr_dir, setting="zero-shot")
    assert zero.train_dataset(env) == "hpo" and "trained on hpo" in zero.describe_data(env)
    assert {ex["group"] for ex in zero.examples("train", env)} <= {q["qid"] for q in task.queries("train", env)}


@pytest.mark.slow
def test_end_to_end_finetune_tiny(capr_dir, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = tmp_path / "run"
    result = subprocess.run([KINJECT, "run", "finetune", "--task", "capr", "--model", "tiny", "--set",
                             "task.dataset=jsonl", "--set", f"task.path={capr_dir}", "--set", "training.epochs=1",
                             "--data-dir", str(tmp_path / "nodata"), "--cache-dir", str(tmp_path / "c"),
                             "-o", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    for split in ("dev", "test"):
        assert metrics[split]["queries"] == 6
        assert 0 <= metrics[split]["recall@1"] <= metrics[split]["recall@5"] <= 1
        assert 0.25 <= metrics[split]["mrr"] <= 1  # 4 candidates: the worst rank is 4


def test_evaluation_queries_do_not_depend_on_the_run_seed(tmp_path):
    """--repeats must score every seed on the same queries (training data may vary with the seed)."""
    from kinject.interfaces import Environment
    from kinject.registry import registry

    cls = registry("tasks").get("capr")
    task = cls(cls.Config(dataset="hpo", max_eval_queries=5, max_train_queries=5))
    envs = [Environment(data_dir=tmp_path, cache_dir=tmp_path, seed=s) for s in (1, 2)]
    dev = [[ex["group"] for ex in cls(task.config).examples("dev", env)] for env in envs]
    train = [[ex["group"] for ex in cls(task.config).examples("train", env)] for env in envs]
    assert dev[0] == dev[1]
    assert train[0] != train[1]
