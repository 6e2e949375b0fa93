"""Metrics over model scores rather than decisions: area under the ROC curve (scikit-learn)."""

from __future__ import annotations

import re

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import undefined
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


class AUROC(Evaluator):
    """Area under the ROC curve from scores: binary, multi-class (one-vs-rest) or multi-label; macro/weighted.

    Needs ``scores=`` (logits or probabilities, one column per entry of ``labels=``; a single column
    is the positive class of a binary task). Multi-label: one AUROC per label with both classes in the
    references (labels without positives are skipped and counted in ``auroc_skipped``), then averaged
    (macro) or support-weighted (weighted). Binary: every average equals the plain AUROC. Undefined (no
    references, one class only): NaN with a warning.
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

    def compute(self, references, predictions, scores=None, labels: Sequence[str] | None = None,
                **kwargs: Any) -> dict[str, float]:
        from sklearn.metrics import roc_auc_score

        scores = score_matrix(scores, len(references), "auroc")
        if not len(references):
            return self._undefined("no references")
        multilabel = bool(references) and isinstance(references[0], (list, tuple, set, frozenset))
        labels = list(labels) if labels else sorted({x for r in references for x in (r if multilabel else [r])})
        out: dict[str, float] = {}
        if multilabel:
            y = np.array([[name in set(r) for name in labels] for r in references], dtype=int)
            keep = [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
            out["auroc_skipped"] = int(y.shape[1] - len(keep))
            if not keep:
                return {**self._undefined("no label has both classes in the references"), **out}
            for average in self.config.averages:
                out[f"auroc_{average}"] = float(roc_auc_score(y[:, keep], scores[:, keep], average=average))
            return out
        references = [str(r) for r in references]
        if scores.shape[1] <= 2:  # binary
            positive = self.config.positive or (labels[1] if len(labels) > 1 else labels[0])
            column = scores[:, -1] if scores.shape[1] == 1 else scores[:, labels.index(positive)] - \
                scores[:, 1 - labels.index(positive)]
            y = np.array([r == positive for r in references], dtype=int)
            if not 0 < y.sum() < len(y):
                return self._undefined(f"the references hold one class only ({references[0]!r})")
            value = float(roc_auc_score(y, column))
            return {f"auroc_{a}": value for a in self.config.averages}
        probs = scores if np.allclose(scores.sum(axis=1), 1.0) and (scores >= 0).all() else softmax(scores)
        for average in self.config.averages:
            if average == "micro":
                y = np.array([[r == name for name in labels] for r in references], dtype=int)
                out["auroc_micro"] = float(roc_auc_score(y, probs, average="micro"))
            else:
                out[f"auroc_{average}"] = float(roc_auc_score(references, probs, multi_class="ovr", average=average,
                                                              labels=labels))
        return out

    def _undefined(self, why: str) -> dict[str, float]:
        value = undefined("auroc", why)
        return {f"auroc_{a}": value for a in self.config.averages}
