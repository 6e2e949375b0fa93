"""MedQuAD -> CAPR queries (answer passage retrieval).

A query is a distinct question; its relevant passages are the answers given to that question text.
Candidates = the relevant answers + the other answers about the same focus topic (the hard negatives:
"What is X?" vs "What are the treatments for X?") + random answers of the same split, up to
``candidates`` per query, in a seeded order. Splits are by source: ``train_sources`` give the train
split; ``eval_sources`` are divided by focus topic (seeded) into dev and test, so a topic never lands
in both.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from pathlib import Path

from kinject.api import DataError, DataMissingError
from kinject.tasks.readers import read_jsonl
from kinject.tasks.prepare_util import write_splits

FILE = "medquad/medquad.jsonl.gz"
SOURCES = ("CancerGov", "GARD", "GHR", "MPlusHealthTopics", "NIDDK", "NINDS", "NIHSeniorHealth", "NHLBI", "CDC")
TRAIN_SOURCES = ("GHR", "GARD")
EVAL_SOURCES = ("CancerGov", "MPlusHealthTopics", "NIDDK", "NINDS", "NIHSeniorHealth", "NHLBI", "CDC")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def load(data_dir: Path) -> list[dict]:
    path = Path(data_dir) / FILE
    if not path.exists():
        raise DataMissingError(f"MedQuAD not found: {path} (see medquad/PROVENANCE.md: github.com/abachaa/MedQuAD "
                               "converted to JSONL)")
    out = []
    for number, row in read_jsonl(path):
        for key in ("qid", "question", "answer", "focus", "source"):
            if not isinstance(row.get(key), str):
                raise DataError(f"missing or non-text field {key!r}", path, number)
        if row["source"] not in SOURCES:
            raise DataError(f"unknown source {row['source']!r} (known: {', '.join(SOURCES)})", path, number)
        out.append(row)
    return out


def _dev_side(focus: str, seed: int) -> bool:
    return int(hashlib.sha256(f"{seed}:{_norm(focus)}".encode()).hexdigest(), 16) % 2 == 0


def build_queries(records: list[dict], candidates: int, seed: int, tag: str) -> list[dict]:
    """CAPR queries from MedQuAD records of one split (see module doc)."""
    answers: dict[str, str] = {}  # normalised answer -> pid
    texts: dict[str, str] = {}
    by_question: dict[str, dict] = {}
    by_focus: dict[str, list[str]] = defaultdict(list)
    for rec in records:
        key = _norm(rec["answer"])
        pid = answers.setdefault(key, rec["qid"])
        texts.setdefault(pid, rec["answer"])
        focus = _norm(rec["focus"])
        if pid not in by_focus[focus]:
            by_focus[focus].append(pid)
        query = by_question.setdefault(_norm(rec["question"]), {"qid": rec["qid"], "query": rec["question"],
                                                                "relevant": [], "foci": []})
        if pid not in query["relevant"]:
            query["relevant"].append(pid)
        if focus not in query["foci"]:
            query["foci"].append(focus)
    every = sorted(texts)
    out = []
    for query in by_question.values():
        rng = random.Random(f"{seed}:{tag}:{query['qid']}")
        relevant = query["relevant"][:candidates - 1]
        hard = [p for f in query["foci"] for p in by_focus[f] if p not in relevant]
        rng.shuffle(hard)
        chosen = relevant + list(dict.fromkeys(hard))[: candidates - len(relevant)]
        taken = set(chosen)
        while len(chosen) < min(candidates, len(every)):
            pid = every[rng.randrange(len(every))]
            if pid not in taken:
                taken.add(pid)
                chosen.append(pid)
        rng.shuffle(chosen)
        out.append({"qid": query["qid"], "query": query["query"],
                    "candidates": [{"pid": p, "text": texts[p], "relevant": p in relevant} for p in chosen]})
    return out


def build(data_dir: Path, train_sources=TRAIN_SOURCES, eval_sources=EVAL_SOURCES, candidates: int = 20,
          seed: int = 0) -> dict[str, list[dict]]:
    """{train, dev, test} CAPR queries; unknown or overlapping source names are errors."""
    unknown = [s for s in (*train_sources, *eval_sources) if s not in SOURCES]
    if unknown:
        raise DataError(f"unknown MedQuAD source {unknown[0]!r} (known: {', '.join(SOURCES)})")
    both = set(train_sources) & set(eval_sources)
    if both:
        raise DataError(f"MedQuAD source {sorted(both)[0]!r} is both a train and an eval source")
    records = load(data_dir)
    train = [r for r in records if r["source"] in train_sources]
    pool = [r for r in records if r["source"] in eval_sources]
    dev = [r for r in pool if _dev_side(r["focus"], seed)]
    test = [r for r in pool if not _dev_side(r["focus"], seed)]
    return {split: build_queries(rows, candidates, seed, split) for split, rows in
            (("train", train), ("dev", dev), ("test", test)) if rows}


def prepare(data_dir: Path, out: Path | None = None, candidates: int = 20, seed: int = 0, **_options) -> dict:
    """Write CAPR-schema ``{train,dev,test}.jsonl`` (+ manifest.json) to ``out``."""
    out = Path(out) if out else Path(data_dir) / "medquad" / "capr"
    splits = build(data_dir, candidates=candidates, seed=seed)
    return write_splits(out, splits, {"dataset": "medquad-capr", "train_sources": list(TRAIN_SOURCES),
                                      "eval_sources": list(EVAL_SOURCES), "candidates": candidates, "seed": seed,
                                      "format": "kinject-capr-v1"})
