"""Sequence-tagging metrics: entity-level F1 (seqeval) for NER, word-level F1 for PICO elements."""

from __future__ import annotations

import re

from typing import Any, Literal, Sequence

from pydantic import Field

from kinject.tasks.evaluators import undefined
from kinject.api import Evaluator, PluginConfig


def _check_aligned(references: Sequence[Sequence], predictions: Sequence[Sequence]) -> None:
    if len(references) != len(predictions):
        raise ValueError(f"{len(references)} reference sequences but {len(predictions)} predicted ones")
    for i, (ref, pred) in enumerate(zip(references, predictions)):
        if len(ref) != len(pred):
            raise ValueError(f"sequence {i}: {len(ref)} reference tags but {len(pred)} predicted tags")


class EntityF1(Evaluator):
    """Entity-level precision, recall and F1 over tag sequences (seqeval; an entity counts when exact).

    ``references``/``predictions``: one list of tags per sentence (``B-X``/``I-X``/``O``; IOBES/BILOU
    with ``mode: strict``). Default mode is conlleval's: an ``I-X`` after ``O`` starts an entity.
    """

    class Config(PluginConfig):
        mode: Literal["default", "strict"] = Field(
            "default", description="default: conlleval rules; strict: only well-formed chunks of `scheme` count.")
        scheme: Literal["IOB2", "IOBES", "BILOU"] = Field("IOB2", description="Tagging scheme for mode strict.")
        prefix: str = Field("entity_", description="Prefix of the metric keys (entity_f1, entity_precision, ...).")

    def metric_names(self) -> list[str]:
        return [f"{self.config.prefix}{k}" for k in ("f1", "precision", "recall")]

    @classmethod
    def options_for(cls, metric: str) -> dict | None:
        match = re.fullmatch(r"(\w*_)?(f1|precision|recall)", metric)
        return {"prefix": match[1]} if match and (match[1] or "").startswith("entity") else None

    def compute(self, references, predictions, **kwargs: Any) -> dict[str, float]:
        from seqeval.metrics import f1_score, precision_score, recall_score

        references = [list(r) for r in references]
        predictions = [list(p) for p in predictions]
        _check_aligned(references, predictions)
        p = self.config.prefix
        if not any(references):
            value = undefined("entity-f1", "no tagged words")
            return {f"{p}f1": value, f"{p}precision": value, f"{p}recall": value}
        options: dict[str, Any] = {"zero_division": 0}
        if self.config.mode == "strict":
            from seqeval import scheme

            options.update(mode="strict", scheme=getattr(scheme, self.config.scheme))
        return {f"{p}f1": float(f1_score(references, predictions, **options)),
                f"{p}precision": float(precision_score(references, predictions, **options)),
                f"{p}recall": float(recall_score(references, predictions, **options))}


def _elements_of(label: Any) -> set[str]:
    """A word's label -> the set of elements it belongs to (str: one element; collection: several)."""
    if label is None:
        return set()
    if isinstance(label, str):
        return {label}
    return set(label)


class PicoWordF1(Evaluator):
    """Word-level F1 per PICO element (participants, interventions, outcomes) and their macro average.

    ``references``/``predictions``: one list per document of word labels; a label is an element name,
    a collection of names (a word in overlapping spans), or anything else for "no element". As BLURB:
    for each element, binary F1 over all words; the score is the mean over the elements.
    """

    class Config(PluginConfig):
        elements: list[str] = Field(["participants", "interventions", "outcomes"],
                                    description="Element names scored (others count as no element).")
        name: str = Field("pico_f1", description="Key of the macro average (per element: <name>_<element>).")

    def metric_names(self) -> list[str]:
        return [self.config.name, *(f"{self.config.name}_{e}" for e in self.config.elements)]

    def compute(self, references, predictions, **kwargs: Any) -> dict[str, float]:
        from sklearn.metrics import f1_score

        _check_aligned(references, predictions)
        out: dict[str, float] = {}
        gold = [_elements_of(x) for doc in references for x in doc]
        pred = [_elements_of(x) for doc in predictions for x in doc]
        if not gold or not self.config.elements:
            value = undefined("pico-f1", "no words" if not gold else "no elements configured")
            return {self.config.name: value, **{f"{self.config.name}_{e}": value for e in self.config.elements}}
        for element in self.config.elements:
            y_true = [element in g for g in gold]
            y_pred = [element in p for p in pred]
            out[f"{self.config.name}_{element}"] = float(f1_score(y_true, y_pred, zero_division=0))
        per = [out[f"{self.config.name}_{e}"] for e in self.config.elements]
        out[self.config.name] = float(sum(per) / len(per))
        return out
