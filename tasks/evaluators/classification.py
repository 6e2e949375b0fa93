"""Accuracy and F1 (micro/macro/weighted/positive-class; single- or multi-label), from per-example counts."""

from __future__ import annotations

import re

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import f1_of_counts, ratio, undefined
from kinject.api import Evaluator, PluginConfig


def _is_multilabel(references: Sequence[Any]) -> bool:
    return bool(references) and isinstance(references[0], (list, tuple, set, frozenset))


class Accuracy(Evaluator):
    """Accuracy: the fraction of exactly right predictions (subset accuracy for multi-label)."""

    class Config(PluginConfig):
        pass

    def metric_names(self) -> list[str]:
        return ["accuracy"]

    def statistics(self, references, predictions, **kwargs) -> dict[str, np.ndarray]:
        """Per example: right (0/1), and 1 (the examples counted)."""
        if _is_multilabel(references):
            right = [set(r) == set(p) for r, p in zip(references, predictions)]
        else:
            right = [r == p for r, p in zip(references, predictions)]
        return {"right": np.asarray(right, dtype=float), "examples": np.ones(len(references))}

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        return {"accuracy": ratio(sums["right"], sums["examples"])}

    def compute(self, references, predictions, **kwargs) -> dict[str, float]:
        if not len(references):
            return {"accuracy": undefined("accuracy", "no examples")}
        return super().compute(references, predictions)


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

    def _fixed(self, multilabel: bool) -> list[str] | None:
        """The scored labels when the config fixes them (binary: the positive one; else `positive`), else None."""
        cfg = self.config
        if cfg.average == "binary" and not multilabel:
            return [(cfg.positive or ["1"])[0]]
        return list(dict.fromkeys(cfg.positive)) if cfg.positive else None

    def statistics(self, references, predictions, labels: Sequence[str] | None = None,
                   **kwargs) -> dict[tuple[str, str], np.ndarray]:
        """Per example and scored label: true positives, false positives, false negatives, and 1 (the label counts
        in this run). Scored: the fixed labels, else scikit-learn's set - every label in the references or
        predictions, plus ``labels`` when multi-label."""
        multilabel = _is_multilabel(references)
        gold = [{str(x) for x in r} if multilabel else {str(r)} for r in references]
        pred = [{str(x) for x in p} if multilabel else {str(p)} for p in predictions]
        classes = self._fixed(multilabel)
        if classes is None:
            seen = {c for row in (*gold, *pred) for c in row}
            classes = sorted(seen | ({str(x) for x in labels or ()} if multilabel else set()))
        counts = {kind: {c: np.zeros(len(references)) for c in classes} for kind in ("tp", "fp", "fn")}
        for i, (g, p) in enumerate(zip(gold, pred)):
            for c in g | p:
                if c in counts["tp"]:
                    counts["tp" if c in g and c in p else "fp" if c in p else "fn"][c][i] = 1.0
        ones = np.ones(len(references))
        return {**{(kind, c): counts[kind][c] for kind in ("tp", "fp", "fn") for c in classes},
                **{("counted", c): ones for c in classes}}

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        present = {c for kind, c in sums if kind == "tp"}
        positive = dict.fromkeys(self.config.positive or ())
        classes = [c for c in positive if c in present] if positive else sorted(present)
        tp, fp, fn = (np.stack([sums[(kind, c)] for c in classes]) for kind in ("tp", "fp", "fn"))
        counts = np.stack([sums[("counted", c)] for c in classes]) > 0
        average, key = self.config.average, self.metric_names()[0]
        if average in ("micro", "binary"):
            return {key: f1_of_counts((tp * counts).sum(0), (fp * counts).sum(0), (fn * counts).sum(0))}
        per_class = f1_of_counts(tp, fp, fn) * counts
        if average == "macro":
            return {key: ratio(per_class.sum(0), counts.sum(0))}
        support = (tp + fn) * counts
        return {key: ratio((per_class * support).sum(0), support.sum(0))}

    def compute(self, references, predictions, labels: Sequence[str] | None = None, **kwargs) -> dict[str, float]:
        if not len(references):
            return {self.metric_names()[0]: undefined("f1", "no examples")}
        if self.config.average == "binary" and not _is_multilabel(references):
            _check_binary(self._fixed(False)[0], {str(x) for x in (*references, *predictions)})
        return super().compute(references, predictions, labels=labels)


def _check_binary(positive: str, present: set[str]) -> None:
    """scikit-learn's checks of a binary F1: at most two labels, the positive one among them when there are two."""
    if len(present) > 2:
        raise ValueError(f"binary F1 of {positive!r}, but the references and predictions hold {len(present)} labels "
                         f"({', '.join(sorted(present))}): choose another average")
    if positive not in present and len(present) == 2:
        raise ValueError(f"binary F1 of {positive!r}, which is not a label here ({', '.join(sorted(present))})")
