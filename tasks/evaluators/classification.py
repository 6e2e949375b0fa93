"""Accuracy and F1 (micro/macro/weighted/positive-class; single- or multi-label), from scikit-learn."""

from __future__ import annotations

import re

from typing import Any, Literal, Sequence

from pydantic import Field

from kinject.tasks.evaluators import undefined
from kinject.api import Evaluator, PluginConfig


def _is_multilabel(references: Sequence[Any]) -> bool:
    return bool(references) and isinstance(references[0], (list, tuple, set, frozenset))


class Accuracy(Evaluator):
    """Accuracy: the fraction of exactly right predictions (subset accuracy for multi-label)."""

    class Config(PluginConfig):
        pass

    def metric_names(self) -> list[str]:
        return ["accuracy"]

    def compute(self, references, predictions, **kwargs) -> dict[str, float]:
        from sklearn.metrics import accuracy_score

        if not len(references):
            return {"accuracy": undefined("accuracy", "no examples")}
        if _is_multilabel(references):
            return {"accuracy": float(sum(set(r) == set(p) for r, p in zip(references, predictions))
                                      / len(references))}
        return {"accuracy": float(accuracy_score(references, predictions))}


class F1(Evaluator):
    """F1 score: micro, macro or weighted over labels, or over a chosen set of positive labels."""

    class Config(PluginConfig):
        average: Literal["micro", "macro", "weighted", "binary"] = Field(
            "micro", description="How per-label F1 is combined (binary: F1 of `positive`).")
        positive: list[str] | None = Field(
            None, description="Labels scored (e.g. every class but 'false' for ChemProt/DDI); None: all.")
        name: str | None = Field(None, description="Metric key (default f1_<average>).")

    def metric_names(self) -> list[str]:
        return [self.config.name or f"f1_{self.config.average}"]

    @classmethod
    def options_for(cls, metric: str) -> dict | None:
        match = re.fullmatch(r"f1_(micro|macro|weighted|binary)", metric)
        return {"average": match[1]} if match else None

    def compute(self, references, predictions, labels: Sequence[str] | None = None, **kwargs) -> dict[str, float]:
        from sklearn.metrics import f1_score
        from sklearn.preprocessing import MultiLabelBinarizer

        cfg = self.config
        key = cfg.name or f"f1_{cfg.average}"
        if not len(references):
            return {key: undefined("f1", "no examples")}
        if _is_multilabel(references):
            classes = sorted(set(labels or []) | {x for r in references for x in r} | {x for p in predictions for x in p})
            mlb = MultiLabelBinarizer(classes=classes)
            y_true, y_pred = mlb.fit_transform(references), mlb.transform(predictions)
            chosen = [classes.index(c) for c in cfg.positive] if cfg.positive else None
            average = "micro" if cfg.average == "binary" else cfg.average
            if chosen is not None:
                y_true, y_pred = y_true[:, chosen], y_pred[:, chosen]
            return {key: float(f1_score(y_true, y_pred, average=average, zero_division=0))}
        references = [str(r) for r in references]
        predictions = [str(p) for p in predictions]
        if cfg.average == "binary":
            pos = (cfg.positive or ["1"])[0]
            return {key: float(f1_score(references, predictions, average="binary", pos_label=pos, zero_division=0))}
        return {key: float(f1_score(references, predictions, average=cfg.average, labels=cfg.positive,
                                    zero_division=0))}
