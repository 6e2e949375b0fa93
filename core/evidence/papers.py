"""The seed papers' reported figures (``papers.yaml``, package data) for the tasks kinject has."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from typing import Any

import yaml

FIELDS = ("task", "model", "method", "metric", "intermediate", "note", "match", "split")


@dataclass(frozen=True)
class Figure:
    """One reported number: paper, table, task, model, setting, kinject metric name, value (as printed)."""

    paper: str
    table: str
    task: str
    metric: str
    value: float
    std: float | None = None
    mark: str = ""
    model: str = ""
    method: str = ""
    intermediate: str = ""
    note: str = ""
    split: str = ""
    match: dict[str, Any] = field(default_factory=dict)

    def applies_to(self, task: str, task_config: dict[str, Any]) -> bool:
        """True for ``task`` when every ``match`` field equals the run's task config."""
        return self.task == task and all(task_config.get(k) == v for k, v in self.match.items())

    def shown(self) -> str:
        text = f"{self.value:.2f}" + (f" ± {self.std:.2f}" if self.std is not None else "")
        return text + (f" {self.mark}" if self.mark else "")


@lru_cache(maxsize=1)
def paper_data() -> dict[str, Any]:
    """The parsed papers.yaml."""
    return yaml.safe_load(files("kinject.evidence").joinpath("papers.yaml").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def figures() -> tuple[Figure, ...]:
    """Every transcribed figure, flattened from the YAML blocks."""
    data = paper_data()
    out = []
    for block in data["blocks"]:
        shared = {k: block[k] for k in FIELDS if k in block}
        for key, values in block["rows"].items():
            for column, value in zip(block["columns"], values):
                if value is None:
                    continue
                fields = {**shared, **column, block["rows_are"]: key}
                mean, std, mark = (list(value) + [None, None])[:3] if isinstance(value, list) else (value, None, None)
                metric = fields.pop("metric", None) or data["task_metrics"][fields["task"]]
                out.append(Figure(paper=block["paper"], table=block["table"], metric=metric, value=float(mean),
                                  std=None if std is None else float(std), mark=mark or "",
                                  **{k: v for k, v in fields.items() if k in FIELDS}))
    return tuple(out)


def figures_for(task: str, task_config: dict[str, Any], intermediates: set[str] | None = None) -> list[Figure]:
    """The figures for a task (matching its config); transfer-matrix cells only for ``intermediates`` (and
    the matrices' own baselines)."""
    keep = set(intermediates or ()) | {"baseline"}
    return [f for f in figures() if f.applies_to(task, task_config) and (not f.intermediate or f.intermediate in keep)]


def paper_title(key: str) -> str:
    return paper_data()["papers"].get(key, {}).get("title", key)
