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

from kinject.tasks.evaluators import ratio, undefined
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


def _ranked(references, predictions, groups) -> list[np.ndarray]:
    """The ranks of the relevant candidates of every query, in query order (empty for a query without one)."""
    return [relevant_ranks(flags, scores) for flags, scores in _groups(references, predictions, groups)]


def _query_columns(ranked: list[np.ndarray], values: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per query: each of ``values`` (name -> ranks -> number) for a query with a relevant candidate, else 0, then
    whether it counts (``queries``) or is skipped (``skipped``)."""
    counted = np.array([r.size > 0 for r in ranked], dtype=float)
    columns = {name: np.array([value(r) if r.size else 0.0 for r in ranked], dtype=float)
               for name, value in values.items()}
    return {**columns, "queries": counted, "skipped": 1.0 - counted}


def _defined(evaluator: Evaluator, metric: str, columns: dict[str, np.ndarray], keys: list[str],
             skipped_key: str) -> dict[str, float]:
    """``compute``'s result from the per-query columns: NaN (with a warning) when no query has a relevant
    candidate; the skipped count as an int."""
    skipped = int(columns["skipped"].sum())
    if not columns["queries"].any():
        value = undefined(metric, f"no query with a relevant candidate ({skipped} skipped)")
        return {**{key: value for key in keys}, skipped_key: skipped}
    return {**evaluator.metrics_of(columns), skipped_key: skipped}


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

    def statistics(self, references, predictions, groups: Sequence | None = None,
                   **kwargs: Any) -> dict[str, np.ndarray]:
        """Per query: the share of its relevant candidates in the top k, for each k; whether it counts."""
        return _query_columns(_ranked(references, predictions, groups),
                              {f"recall@{k}": (lambda ranks, k=k: float((ranks <= k).mean())) for k in self.config.ks})

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        return {**{f"recall@{k}": ratio(sums[f"recall@{k}"], sums["queries"]) for k in self.config.ks},
                "recall_queries_skipped": sums["skipped"]}

    def compute(self, references, predictions, groups: Sequence | None = None, **kwargs: Any) -> dict[str, float]:
        return _defined(self, "recall@k", self.statistics(references, predictions, groups), self.metric_names(),
                        "recall_queries_skipped")


class MRR(Evaluator):
    """Mean reciprocal rank of the first relevant candidate per query group."""

    class Config(PluginConfig):
        name: str = Field("mrr", description="Metric key.")

    def metric_names(self) -> list[str]:
        return [self.config.name, f"{self.config.name}_queries_skipped"]

    def statistics(self, references, predictions, groups: Sequence | None = None,
                   **kwargs: Any) -> dict[str, np.ndarray]:
        """Per query: the reciprocal rank of its first relevant candidate; whether it counts."""
        return _query_columns(_ranked(references, predictions, groups), {"reciprocal_rank": lambda r: 1.0 / r.min()})

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        return {self.config.name: ratio(sums["reciprocal_rank"], sums["queries"]),
                f"{self.config.name}_queries_skipped": sums["skipped"]}

    def compute(self, references, predictions, groups: Sequence | None = None, **kwargs: Any) -> dict[str, float]:
        return _defined(self, "mrr", self.statistics(references, predictions, groups), [self.config.name],
                        f"{self.config.name}_queries_skipped")
