"""Retrieval tasks: score (query, passage) jointly (cross-encoder) or by the cosine of their embeddings
(``task.encoder=bi``: :mod:`kinject.tasks.biencoder`), rank each query's candidate set.

A retrieval task yields *queries*: ``{"qid", "query", "candidates": [{"pid", "text", "relevant"}]}``.
The generic finetune/evaluate stages see ordinary sequence-pair examples:

* train split: (query, passage, relevant/irrelevant) pairs - every relevant candidate plus
  ``train_negatives`` non-relevant ones per query - through a 2-class sequence head;
* eval splits: every (query, candidate) pair with ``group`` = query id; :meth:`RetrievalTask.score`
  ranks each group by the log-odds of the "relevant" class and reports recall@k and MRR.

The CAPR JSONL schema (one query per line) is read by :func:`read_queries`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from kinject.api import DataError, Environment, Head
from kinject.tasks.readers import read_jsonl, text_field
import kinject.tasks.biencoder as biencoder
from kinject.tasks.sequence import PairTaskConfig, SequenceClassificationTask, evaluate_all

LABELS = ("irrelevant", "relevant")


class RetrievalConfig(PairTaskConfig):
    candidates: int = Field(10, ge=2, le=1000, description="Candidates per query (relevant + hard + random "
                            "distractors); the cross-encoder scores every one, so this sets eval cost (the "
                            "studies use 20-50).")
    max_eval_queries: int | None = Field(100, ge=1, description="Queries per evaluation split (seeded sample; "
                                         "None: all).")
    max_train_queries: int | None = Field(500, ge=1, description="Training queries (seeded sample; None: all).")
    eval_sample_seed: int = Field(0, description="Seed of the evaluation query sample: fixed, so runs with "
                                  "different seeds (--repeats) are scored on the same queries.")
    train_negatives: int = Field(1, ge=0, le=100, description="Non-relevant passages per training query "
                                 "(the negative:positive ratio of the training pairs).")
    bi_loss: Literal["contrastive", "binary"] = Field(
        "contrastive", description="encoder=bi: contrastive (each relevant pair's query against every passage of "
        "the batch, in-batch negatives; MultipleNegativesRankingLoss) or binary (a logistic loss on the cosine of "
        "each training pair).")


def parse_query(row: dict, path: Path | str, line: int) -> dict:
    """Validate one CAPR JSONL record; DataError naming file:line on any defect."""
    for key in ("qid", "query", "candidates"):
        if key not in row:
            raise DataError(f"missing field {key!r} (schema: qid, query, candidates[pid, text, relevant])",
                            path, line)
    candidates = row["candidates"]
    qid, query = text_field(row, "qid", path, line), text_field(row, "query", path, line)
    if not isinstance(candidates, list) or not candidates:
        raise DataError("'candidates' must be a non-empty list", path, line)
    out = []
    for i, cand in enumerate(candidates):
        if not isinstance(cand, dict) or "text" not in cand or "relevant" not in cand:
            raise DataError(f"candidate {i}: needs 'text' and 'relevant' (and 'pid')", path, line)
        relevant = cand["relevant"]
        if relevant not in (True, False, 0, 1):
            raise DataError(f"candidate {i}: 'relevant' must be true/false or 0/1, got {relevant!r}", path, line)
        text = cand["text"]
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"candidate {i}: 'text' must be a non-empty string, got {text!r}", path, line)
        pid = str(cand["pid"]) if cand.get("pid") is not None else str(i)
        out.append({"pid": pid, "text": text, "relevant": bool(relevant)})
    if not any(c["relevant"] for c in out):
        raise DataError(f"query {qid!r}: no relevant candidate among {len(out)}", path, line)
    return {"qid": qid, "query": query, "candidates": out, "where": f"{path}:{line}"}


def read_queries(path: Path) -> list[dict]:
    """All queries of a CAPR JSONL file (empty file, bad JSON, bad UTF-8 -> DataError file:line)."""
    return [parse_query(row, path, number) for number, row in read_jsonl(path)]


def sample(items: list, n: int | None, seed: str) -> list:
    """A seeded sample of ``n`` items in their original order (all items when n is None or larger)."""
    if n is None or len(items) <= n:
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


class RetrievalTask(SequenceClassificationTask):
    """Base of passage retrieval tasks, cross- or bi-encoder (subclasses implement ``queries``)."""

    Config: ClassVar = RetrievalConfig
    kind: ClassVar[str] = "retrieval"
    unit: ClassVar[str] = "query"  # a query with its candidates
    example_unit: ClassVar[str] = "candidate pair"
    default_metrics: ClassVar[list[dict]] = [{"name": "recall-at-k", "options": {"ks": [1, 5]}}, {"name": "mrr"}]

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._examples: dict[str, list[dict]] = {}

    # -- what subclasses provide ------------------------------------------------------------- #
    def queries(self, split: str, env: Environment) -> list[dict]:
        """The queries of a split (before the max_*_queries / --limit caps)."""
        raise NotImplementedError

    # -- generic machinery ------------------------------------------------------------------- #
    def labels(self, env: Environment) -> list[str]:
        return list(LABELS)

    def head(self, env: Environment) -> Head:
        return Head(kind="sequence", num_labels=2, problem_type="single_label_classification", labels=LABELS,
                    **self.head_model())

    def bi_objective(self) -> str:
        return self.config.bi_loss

    counts: ClassVar[tuple[str, ...]] = ("queries",)

    def selection_metric(self) -> str:
        return "mrr"  # recall@1 moves in steps of 1/queries; MRR credits every rank

    def capped_queries(self, split: str, env: Environment) -> list[dict]:
        cfg = self.config
        cap = cfg.max_train_queries if split == self.train_split else cfg.max_eval_queries
        seed = env.seed if split == self.train_split else cfg.eval_sample_seed  # training data varies with seed
        chosen = sample(self.queries(split, env), cap, f"{seed}:{split}:queries")
        return chosen[: env.limit] if env.limit else chosen

    def examples(self, split: str, env: Environment) -> list[dict]:
        if split in self._examples:
            return self._examples[split]
        out = []
        for query in self.capped_queries(split, env):
            candidates = query["candidates"]
            if split == self.train_split:
                negatives = [c for c in candidates if not c["relevant"]]
                rng = random.Random(f"{env.seed}:{query['qid']}")
                chosen = rng.sample(negatives, min(self.config.train_negatives, len(negatives)))
                candidates = [c for c in candidates if c["relevant"]] + chosen
            for cand in candidates:
                out.append({"id": f"{query['qid']}|{cand['pid']}", "group": query["qid"], "text": query["query"],
                            "text_pair": cand["text"], "label": LABELS[int(cand["relevant"])],
                            "where": query.get("where", query["qid"])})
        self._examples[split] = out
        return out

    def featurize(self, tokenizer, examples: list[dict], max_length: int, env: Environment) -> list[dict]:
        texts, passages = [ex["text"] for ex in examples], [ex["text_pair"] for ex in examples]
        if self.encoder() != "cross":
            return [{**row, "labels": LABELS.index(ex["label"])}
                    for row, ex in zip(biencoder.pack(tokenizer, texts, passages, max_length), examples)]
        encoded = tokenizer(texts, passages, truncation="longest_first", max_length=max_length)
        return [{**{k: encoded[k][i] for k in encoded.keys()}, "labels": LABELS.index(ex["label"])}
                for i, ex in enumerate(examples)]

    @staticmethod
    def relevance_scores(logits: Any) -> np.ndarray:
        """Ranking score per pair: log-odds of "relevant" (2 logits) or the single logit."""
        logits = np.asarray(logits, dtype=float)
        if logits.ndim == 1 or logits.shape[-1] == 1:
            return logits.reshape(-1)
        return logits[:, 1] - logits[:, 0]

    def score(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
              env: Environment) -> dict[str, float]:
        scores = self.relevance_scores(predictions)
        refs = [ex["label"] == "relevant" for ex in examples]
        groups = [ex["group"] for ex in examples]
        metrics = evaluate_all(self.metric_refs(), refs, list(scores), groups=groups)
        metrics["queries"] = len(set(groups))
        return metrics

    def predictions(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
                    env: Environment) -> list[dict]:
        """One record per query: ``id`` = query id, ``gold`` = its relevant candidate ids, ``ranking`` = candidate
        ids best-first, ``scores`` = their relevance scores in that order, ``pred`` = the top candidate."""
        scores = self.relevance_scores(predictions)
        queries: dict[str, list[tuple[str, float, bool]]] = {}
        for ex, score in zip(examples, scores):
            prefix = f"{ex['group']}|"
            pid = ex["id"][len(prefix):] if str(ex["id"]).startswith(prefix) else str(ex["id"])
            queries.setdefault(ex["group"], []).append((pid, float(score), ex["label"] == "relevant"))
        records = []
        for qid, rows in queries.items():
            ranked = sorted(rows, key=lambda row: -row[1])  # stable: ties keep the candidate order
            records.append({"id": qid, "gold": [pid for pid, _, relevant in rows if relevant],
                            "pred": ranked[0][0], "ranking": [pid for pid, _, _ in ranked],
                            "scores": [score for _, score, _ in ranked]})
        return records
