"""Ranking metrics over candidate groups: recall@k and mean reciprocal rank.

Two input forms (both give the same numbers):

* nested: ``references`` = one list of relevance flags per query (1/True = relevant candidate),
  ``predictions`` = one list of scores per query, aligned with the flags;
* flat (one row per query-candidate pair, as a cross-encoder predicts them): ``references`` = flags,
  ``predictions`` = scores, and ``groups=`` = the query id of each row.

Ties are broken pessimistically: a relevant candidate is ranked below every non-relevant one with
the same score, so a constant scorer earns no credit. Queries without any relevant candidate are
left out (their number is reported as ``<metric>_queries_skipped``); with none left, the metrics are NaN
(with a warning).
"""

from __future__ import annotations

import re

from typing import Any, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import undefined
from kinject.api import Evaluator, PluginConfig


def _flags(values: Sequence) -> np.ndarray:
    """Relevance flags: bools/ints, or strings "1"/"true"/"relevant" (anything else is not relevant)."""
    return np.asarray([v.strip().lower() in ("1", "true", "relevant", "yes") if isinstance(v, str) else bool(v)
                       for v in values], dtype=bool)


def _groups(references: Sequence, predictions: Sequence, groups: Sequence | None) -> list[tuple[np.ndarray, np.ndarray]]:
    if len(references) != len(predictions):
        raise ValueError(f"{len(references)} references but {len(predictions)} predictions")
    if groups is None:
        out = []
        for i, (flags, scores) in enumerate(zip(references, predictions)):
            if len(flags) != len(scores):
                raise ValueError(f"query {i}: {len(flags)} relevance flags but {len(scores)} scores")
            out.append((_flags(flags), np.asarray(scores, dtype=float)))
        return out
    if len(groups) != len(references):
        raise ValueError(f"{len(groups)} group ids but {len(references)} rows")
    order: dict[Any, list[int]] = {}
    for row, group in enumerate(groups):
        order.setdefault(group, []).append(row)
    flags = _flags(references)
    scores = np.asarray(predictions, dtype=float).reshape(len(groups), -1)[:, -1]  # logit of 'relevant'
    return [(flags[rows], scores[rows]) for rows in order.values()]


def relevant_ranks(flags: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """1-based rank of each relevant candidate (pessimistic ties: counted after equal-score others)."""
    ranks = []
    for j in np.flatnonzero(flags):
        higher = int((scores > scores[j]).sum())
        tied_other = int(((scores == scores[j]) & ~flags).sum())
        tied_relevant_before = int(((scores == scores[j]) & flags)[:j].sum())
        ranks.append(1 + higher + tied_other + tied_relevant_before)
    return np.asarray(ranks, dtype=int)


def _ranked(references, predictions, groups) -> tuple[list, int]:
    """The ranks of the relevant candidates of every query that has one, and how many queries had none."""
    ranked, skipped = [], 0
    for flags, scores in _groups(references, predictions, groups):
        ranks = relevant_ranks(flags, scores)
        if ranks.size:
            ranked.append(ranks)
        else:
            skipped += 1
    return ranked, skipped


class RecallAtK(Evaluator):
    """Recall@k over candidate groups: the share of a query's relevant candidates ranked in its top k."""

    class Config(PluginConfig):
        ks: list[int] = Field([1, 5], description="Cut-offs; one metric recall@<k> each.")

    def metric_names(self) -> list[str]:
        return [f"recall@{k}" for k in self.config.ks]

    @classmethod
    def options_for(cls, metric: str) -> dict | None:
        match = re.fullmatch(r"recall@(\d+)", metric)
        return {"ks": [int(match[1])]} if match else None

    def compute(self, references, predictions, groups: Sequence | None = None, **kwargs: Any) -> dict[str, float]:
        ranked, skipped = _ranked(references, predictions, groups)
        if not ranked:
            value = undefined("recall@k", f"no query with a relevant candidate ({skipped} skipped)")
        out = {f"recall@{k}": (sum(float((r <= k).mean()) for r in ranked) / len(ranked) if ranked else value)
               for k in self.config.ks}
        out["recall_queries_skipped"] = int(skipped)
        return out


class MRR(Evaluator):
    """Mean reciprocal rank of the first relevant candidate per query group."""

    class Config(PluginConfig):
        name: str = Field("mrr", description="Metric key.")

    def metric_names(self) -> list[str]:
        return [self.config.name, f"{self.config.name}_queries_skipped"]

    def compute(self, references, predictions, groups: Sequence | None = None, **kwargs: Any) -> dict[str, float]:
        ranked, skipped = _ranked(references, predictions, groups)
        value = (sum(1.0 / r.min() for r in ranked) / len(ranked) if ranked else
                 undefined("mrr", f"no query with a relevant candidate ({skipped} skipped)"))
        return {self.config.name: value, f"{self.config.name}_queries_skipped": int(skipped)}
