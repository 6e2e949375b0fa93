"""Regression metrics: Pearson correlation (scipy), as BLURB reports for BIOSSES."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import undefined
from kinject.api import Evaluator, PluginConfig


class Pearson(Evaluator):
    """Pearson correlation between reference and predicted scores (NaN with a warning when undefined: fewer
    than two pairs, or either side constant)."""

    class Config(PluginConfig):
        name: str = Field("pearson", description="Metric key.")

    def metric_names(self) -> list[str]:
        return [self.config.name]

    def compute(self, references, predictions, **kwargs: Any) -> dict[str, float]:
        from scipy.stats import pearsonr

        y = np.asarray(references, dtype=float).reshape(-1)
        p = np.asarray(predictions, dtype=float).reshape(-1)
        if y.shape != p.shape:
            raise ValueError(f"{y.size} references but {p.size} predictions")
        if y.size < 2:
            return {self.config.name: undefined("pearson", f"{y.size} pair(s)")}
        if np.ptp(y) == 0 or np.ptp(p) == 0:
            side = "references" if np.ptp(y) == 0 else "predictions"
            return {self.config.name: undefined("pearson", f"constant {side}")}
        return {self.config.name: float(pearsonr(y, p)[0])}
