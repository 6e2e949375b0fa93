"""The BLURB suite (Gu et al., 2021): every available BLURB dataset, and the BLURB score.

BLURB score = macro average over the six task types (NER, PICO, relation extraction, sentence
similarity, document classification, question answering) of the mean test score of each type's
datasets (each dataset's primary metric). Types or datasets that could not run are named in the
summary; the score then averages the types that did run (``complete`` says whether all six did).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from kinject.api import Environment, PluginConfig, TaskGroup

TYPES: dict[str, tuple[str, ...]] = {
    "ner": ("bc5chem", "bc5disease", "ncbi-disease", "bc2gm", "jnlpba"),
    "pico": ("ebmpico",),
    "relation_extraction": ("chemprot", "ddi", "gad"),
    "sentence_similarity": ("biosses",),
    "document_classification": ("hoc",),
    "question_answering": ("pubmedqa", "bioasq"),
}
TYPE_OF = {member: kind for kind, members in TYPES.items() for member in members}


class BlurbConfig(PluginConfig):
    members: list[str] | None = Field(None, description="Run only these BLURB datasets (default: all 13).")
    split: str = Field("test", description="Split whose scores make the BLURB score.")


class BlurbGroup(TaskGroup):
    """BLURB: the 13 biomedical datasets in six task types, summarised as the BLURB score."""

    Config: ClassVar = BlurbConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.unavailable: dict[str, str] = {}

    def members(self, env: Environment) -> list[str]:
        """The selected datasets whose task plugin loads (the others are reported as unavailable)."""
        from kinject.api import KinjectError, registry

        chosen = self.config.members or list(TYPE_OF)
        unknown = [m for m in chosen if m not in TYPE_OF]
        if unknown:
            raise KinjectError(f"task.members: {', '.join(unknown)} not in BLURB ({', '.join(TYPE_OF)})")
        out = []
        for name in chosen:
            error = registry("tasks").check(name)
            if error:
                self.unavailable[name] = error
            else:
                out.append(name)
        return out

    @staticmethod
    def primary_metric_of(name: str) -> str:
        from kinject.api import registry

        return registry("tasks").get(name)().primary_metric()

    def primary_metric(self) -> str:
        return "blurb_score"

    def validate(self, env: Environment) -> None:
        """Nothing to read here: each member is checked and validated when the group runs it."""

    def summarize(self, member_metrics: dict[str, dict], env: Environment) -> dict[str, Any]:
        split = self.config.split
        datasets: dict[str, dict[str, Any]] = {}
        per_type: dict[str, list[float]] = {}
        for name, metrics in member_metrics.items():
            metric = self.primary_metric_of(name)
            value = metrics.get(split, {}).get(metric)
            if not isinstance(value, (int, float)):
                self.unavailable[name] = f"no {split} {metric!r} in its metrics"
                continue
            datasets[name] = {"type": TYPE_OF[name], "metric": metric, "value": float(value)}
            per_type.setdefault(TYPE_OF[name], []).append(float(value))
        type_scores = {kind: sum(v) / len(v) for kind, v in per_type.items()}
        chosen = self.config.members or list(TYPE_OF)
        return {
            "blurb_score": sum(type_scores.values()) / len(type_scores) if type_scores else None,
            "complete": len(type_scores) == len(TYPES) and len(datasets) == len(TYPE_OF),
            "split": split,
            "types": type_scores,
            "missing_types": [kind for kind in TYPES if kind not in type_scores],
            "datasets": datasets,
            "missing_datasets": [m for m in chosen if m not in datasets],
            "unavailable": dict(self.unavailable),
        }
