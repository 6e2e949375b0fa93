"""Sequence-tagging metrics: entity-level F1 (seqeval's chunks) for NER, word-level F1 for PICO elements."""

from __future__ import annotations

import re

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import f1_of_counts, ratio, undefined
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

    def _entities(self):
        """tags -> the set of entities in them (seqeval's chunking: conlleval's rules, or `scheme`'s when strict)."""
        if self.config.mode == "strict":
            from seqeval import scheme as schemes
            from seqeval.scheme import Entities

            scheme = getattr(schemes, self.config.scheme)
            return lambda tags: {e.to_tuple()[1:] for e in Entities([list(tags)], scheme).entities[0]}
        from seqeval.metrics.sequence_labeling import get_entities

        return lambda tags: set(get_entities(list(tags)))

    def statistics(self, references, predictions, **kwargs: Any) -> dict[str, np.ndarray]:
        """Per sentence: entities found (tp), predicted but wrong (fp), missed (fn)."""
        references = [list(r) for r in references]
        predictions = [list(p) for p in predictions]
        _check_aligned(references, predictions)
        entities = self._entities()
        out = np.zeros((len(references), 3))
        for i, (ref, pred) in enumerate(zip(references, predictions)):
            gold, found = entities(ref), entities(pred)
            tp = len(gold & found)
            out[i] = (tp, len(found) - tp, len(gold) - tp)
        return {"tp": out[:, 0], "fp": out[:, 1], "fn": out[:, 2]}

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        tp, fp, fn, p = sums["tp"], sums["fp"], sums["fn"], self.config.prefix
        return {f"{p}f1": f1_of_counts(tp, fp, fn), f"{p}precision": ratio(tp, tp + fp),
                f"{p}recall": ratio(tp, tp + fn)}

    def compute(self, references, predictions, **kwargs: Any) -> dict[str, float]:
        columns = self.statistics(references, predictions)
        if not any(len(r) for r in references):
            value = undefined("entity-f1", "no tagged words")
            return {name: value for name in self.metric_names()}
        return self.metrics_of(columns)


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

    def statistics(self, references, predictions, **kwargs: Any) -> dict[tuple[str, str], np.ndarray]:
        """Per document and element: words in it in both (tp), predicted only (fp), gold only (fn)."""
        _check_aligned(references, predictions)
        elements = self.config.elements
        out = np.zeros((len(references), 3 * len(elements)))
        for i, (ref, pred) in enumerate(zip(references, predictions)):
            for g, p in zip(ref, pred):
                g, p = _elements_of(g), _elements_of(p)
                for j, e in enumerate(elements):
                    out[i, 3 * j:3 * j + 3] += (e in g and e in p, e in p and e not in g, e in g and e not in p)
        return {(kind, e): out[:, 3 * j + k] for j, e in enumerate(elements) for k, kind in enumerate(("tp", "fp", "fn"))}

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        name, elements = self.config.name, self.config.elements
        per = {e: f1_of_counts(sums[("tp", e)], sums[("fp", e)], sums[("fn", e)]) for e in elements}
        return {name: np.mean(list(per.values()), axis=0), **{f"{name}_{e}": value for e, value in per.items()}}

    def compute(self, references, predictions, **kwargs: Any) -> dict[str, float]:
        columns = self.statistics(references, predictions)
        if not any(len(doc) for doc in references) or not self.config.elements:
            value = undefined("pico-f1", "no words" if not any(len(doc) for doc in references) else
                              "no elements configured")
            return {self.config.name: value, **{f"{self.config.name}_{e}": value for e in self.config.elements}}
        return self.metrics_of(columns)
