"""Regression metrics: Pearson correlation from per-pair moments, as BLURB reports for BIOSSES."""

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

    def statistics(self, references, predictions, **kwargs: Any) -> dict[str, np.ndarray]:
        """Per pair the moments: x (reference), y (prediction), x², y², xy."""
        x = np.asarray(references, dtype=float).reshape(-1)
        y = np.asarray(predictions, dtype=float).reshape(-1)
        if x.shape != y.shape:
            raise ValueError(f"{x.size} references but {y.size} predictions")
        return {"x": x, "y": y, "xx": x * x, "yy": y * y, "xy": x * y}

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        """Pearson's r from the moments; 0 where either side is constant."""
        sx, sy, sxx, syy, sxy = (sums[k] for k in ("x", "y", "xx", "yy", "xy"))
        vx, vy = n * sxx - sx * sx, n * syy - sy * sy
        ok = (vx > 1e-12 * np.maximum(1, n * sxx)) & (vy > 1e-12 * np.maximum(1, n * syy))
        with np.errstate(invalid="ignore", divide="ignore"):
            return {self.config.name: np.where(ok, (n * sxy - sx * sy) / np.sqrt(np.where(ok, vx * vy, 1)), 0.0)}

    def compute(self, references, predictions, **kwargs: Any) -> dict[str, float]:
        columns = self.statistics(references, predictions)
        y, p = columns["x"], columns["y"]
        if y.size < 2:
            return {self.config.name: undefined("pearson", f"{y.size} pair(s)")}
        if np.ptp(y) == 0 or np.ptp(p) == 0:
            side = "references" if np.ptp(y) == 0 else "predictions"
            return {self.config.name: undefined("pearson", f"constant {side}")}
        return self.metrics_of(columns)
