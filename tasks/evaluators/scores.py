"""Metrics over model scores rather than decisions: area under the ROC curve (Mann-Whitney, as scikit-learn)."""

from __future__ import annotations

import re

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import ratio, undefined
from kinject.api import Evaluator, PluginConfig


def score_matrix(scores: Any, rows: int, metric: str) -> np.ndarray:
    """``scores`` as a 2-D float array with one row per reference (a 1-D array is one column)."""
    if scores is None:
        raise ValueError(f"{metric} needs the model's scores (scores=...)")
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.shape[0] != rows:
        raise ValueError(f"{rows} references but {scores.shape[0]} score rows")
    return scores


def softmax(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def weighted_auroc(scores: Any, labels: Any, weights: Any = None) -> np.ndarray:
    """AUROC along the last axis of ``scores`` against 0/1 ``labels``, each example counted ``weights`` times
    (default 1; all three broadcast, so one set of examples takes a replicates x examples matrix of counts): the
    Mann-Whitney statistic with ties counted half, equal to ``sklearn.metrics.roc_auc_score(labels, scores,
    sample_weight=weights)`` per row, vectorised over every leading axis. NaN where a class has no weight. The
    knowledge probe's gain interval and the evidence library's bootstrap both score with it."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    shape = np.broadcast_shapes(scores.shape, labels.shape, np.shape(1.0 if weights is None else weights))
    n = shape[-1]
    if n == 0:
        return np.full(shape[:-1], np.nan)
    order = np.argsort(np.broadcast_to(scores, shape), axis=-1)  # ties are handled as groups below
    scores = np.take_along_axis(np.broadcast_to(scores, shape), order, axis=-1)
    positive = np.take_along_axis(np.broadcast_to(labels, shape), order, axis=-1).astype(float)
    if weights is None:
        negative = 1.0 - positive
    else:
        weights = np.take_along_axis(np.broadcast_to(np.asarray(weights, dtype=float), shape), order, axis=-1)
        positive *= weights
        negative = weights - positive
    below = np.cumsum(negative, axis=-1)  # negative weight at or below each (sorted) score: nondecreasing
    new = np.ones(shape, dtype=bool)
    new[..., 1:] = scores[..., 1:] != scores[..., :-1]  # a tie group starts here
    last = np.ones(shape, dtype=bool)
    last[..., :-1] = new[..., 1:]  # ... ends here
    strictly = np.maximum.accumulate(np.where(new, below - negative, 0.0), axis=-1)  # below the tie group
    through = np.flip(np.minimum.accumulate(np.flip(np.where(last, below, np.inf), -1), axis=-1), -1)  # or in it
    with np.errstate(invalid="ignore", divide="ignore"):
        return (positive * (strictly + through)).sum(-1) / (2 * positive.sum(-1) * negative.sum(-1))


def _class_probabilities(scores: np.ndarray) -> np.ndarray:
    """Multi-class scores as probabilities: as given when every row is a distribution, else their softmax."""
    return scores if np.allclose(scores.sum(axis=1), 1.0) and (scores >= 0).all() else softmax(scores)


class AUROC(Evaluator):
    """Area under the ROC curve from scores: binary, multi-class (one-vs-rest) or multi-label; macro/weighted.

    Needs ``scores=`` (logits or probabilities, one column per entry of ``labels=``; a single column
    is the positive class of a binary task). Multi-label: one AUROC per label with both classes in the
    references (labels without positives are skipped and counted in ``auroc_skipped``), then averaged
    (macro) or support-weighted (weighted). Binary: every average equals the plain AUROC. Undefined (no
    references, one class only): NaN with a warning. It is no function of sums (ranks), so it declares
    :meth:`from_units`: a comparison recomputes it on every resample, vectorised (:func:`weighted_auroc`).
    """

    class Config(PluginConfig):
        averages: list[Literal["macro", "weighted", "micro"]] = Field(
            ["macro", "weighted"], description="Averages reported, as auroc_<average>.")
        positive: str | None = Field(None, description="Positive label of a binary task (default: the second label).")

    def metric_names(self) -> list[str]:
        return [f"auroc_{a}" for a in self.config.averages]

    @classmethod
    def options_for(cls, metric: str) -> dict | None:
        match = re.fullmatch(r"auroc_(macro|weighted|micro)", metric)
        return {"averages": [match[1]]} if match else None

    def _classes(self, references, scores, labels: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray]:
        """(gold, score) per example and scored class: (n, k) each. Multi-label: the labels with both classes in the
        references; binary: the positive class (its logit minus the other's); multi-class: one-vs-rest."""
        multilabel = bool(references) and isinstance(references[0], (list, tuple, set, frozenset))
        labels = list(labels) if labels else sorted({x for r in references for x in (r if multilabel else [r])})
        if multilabel:
            y = np.array([[name in set(r) for name in labels] for r in references], dtype=float).reshape(-1, len(labels))
            keep = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
            return y[:, keep], scores[:, keep]
        references = [str(r) for r in references]
        if scores.shape[1] <= 2:
            positive = self.config.positive or (labels[1] if len(labels) > 1 else labels[0])
            column = scores[:, -1:] if scores.shape[1] == 1 else \
                scores[:, [labels.index(positive)]] - scores[:, [1 - labels.index(positive)]]
            return np.array([[r == positive] for r in references], dtype=float).reshape(-1, 1), column
        y = np.array([[r == name for name in labels] for r in references], dtype=float)
        return y, _class_probabilities(scores)

    def statistics(self, references, predictions, scores=None, labels: Sequence[str] | None = None,
                   **kwargs: Any) -> dict[tuple[str, int], np.ndarray]:
        """Per example and scored class: its gold (0/1), then its score."""
        y, s = self._classes(references, score_matrix(scores, len(references), "auroc"), labels)
        return {**{("gold", j): y[:, j] for j in range(y.shape[1])},
                **{("score", j): s[:, j] for j in range(s.shape[1])}}

    def from_units(self, columns) -> dict[str, np.ndarray]:
        """Each average's AUROC over the units on the last axis (a class with one gold value left out)."""
        k = sum(kind == "gold" for kind, _ in columns)
        if k == 0:
            shape = next(iter(columns.values())).shape[:-1] if columns else ()
            return {f"auroc_{a}": np.zeros(shape) for a in self.config.averages}
        y = np.stack([columns[("gold", j)] for j in range(k)])
        s = np.stack([columns[("score", j)] for j in range(k)])
        out = {}
        for average in self.config.averages:
            if average == "micro":
                flat = (*y.shape[1:-1], k * y.shape[-1])
                out["auroc_micro"] = np.nan_to_num(weighted_auroc(np.moveaxis(s, 0, -2).reshape(flat),
                                                                  np.moveaxis(y, 0, -2).reshape(flat)))
                continue
            auc = weighted_auroc(s, y)
            valid = np.isfinite(auc)
            weights = valid * (y.sum(-1) if average == "weighted" else 1.0)
            out[f"auroc_{average}"] = ratio(np.where(valid, auc, 0) * weights, weights.sum(0, keepdims=True)).sum(0)
        return out

    def compute(self, references, predictions, scores=None, labels: Sequence[str] | None = None,
                **kwargs: Any) -> dict[str, float]:
        score_matrix(scores, len(references), "auroc")
        if not len(references):
            return self._undefined("no references")
        columns = self.statistics(references, predictions, scores=scores, labels=labels)
        gold = [column for (kind, _), column in columns.items() if kind == "gold"]
        multilabel = isinstance(references[0], (list, tuple, set, frozenset))
        out = {}
        if multilabel:
            names = len(labels) if labels else len({x for r in references for x in r})
            out["auroc_skipped"] = int(names - len(gold))
        if not any(0 < column.sum() < len(column) for column in gold):
            why = ("no label has both classes in the references" if multilabel else
                   f"the references hold one class only ({str(references[0])!r})")
            return {**self._undefined(why), **out}
        return {**self.metrics_of(columns), **out}

    def _undefined(self, why: str) -> dict[str, float]:
        value = undefined("auroc", why)
        return {f"auroc_{a}": value for a in self.config.averages}
