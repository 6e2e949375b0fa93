"""Calibration: expected calibration error (ECE) as DoKTra (Choi et al., ACL 2022, appendix) defines it."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import undefined
from kinject.tasks.evaluators.scores import score_matrix, softmax
from kinject.api import Evaluator, PluginConfig


def _bins(confidence: np.ndarray, correct: np.ndarray, bins: int) -> dict[tuple[str, int], np.ndarray]:
    """Per example and bin: right-in-bin-m (0/1), then confidence-in-bin-m. Bin m holds (m/M, (m+1)/M]; a
    confidence on an edge goes to the lower bin, and 0 joins the first."""
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    rows = np.arange(len(confidence))
    right, sure = np.zeros((len(confidence), bins)), np.zeros((len(confidence), bins))
    right[rows, index] = correct
    sure[rows, index] = confidence
    return {**{("right", m): right[:, m] for m in range(bins)}, **{("confidence", m): sure[:, m] for m in range(bins)}}


def _error(sums: dict, n: int, bins: int) -> np.ndarray:
    """sum_m |B_m|/n * |acc(B_m) - conf(B_m)|, from the per-bin sums of right and confidence."""
    right = np.stack([sums[("right", m)] for m in range(bins)])
    sure = np.stack([sums[("confidence", m)] for m in range(bins)])
    return np.abs(right - sure).sum(0) / n


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """sum_m |B_m|/n * |acc(B_m) - conf(B_m)| over ``bins`` equal-width confidence bins (0, 1/M], ...

    A confidence exactly on an edge goes to the lower bin (bin m holds (m/M, (m+1)/M]); 0 joins the first.
    No examples: NaN (with a warning).
    """
    confidence = np.asarray(confidence, dtype=float)
    correct = np.asarray(correct, dtype=float)
    if confidence.size == 0:
        return undefined("ece", "no examples")
    columns = _bins(confidence, correct, bins)
    return float(_error({key: column.sum() for key, column in columns.items()}, confidence.size, bins))


class ECE(Evaluator):
    """Expected calibration error of the predicted class's probability (10 equal-width bins; lower is better).

    Needs ``scores=`` (logits, or probabilities with ``inputs: probabilities``) and ``labels=`` (the
    score columns' label names). A single score column is a sigmoid binary classifier.
    """

    class Config(PluginConfig):
        bins: int = Field(10, ge=1, description="Number of equal-width confidence bins over [0, 1].")
        inputs: Literal["logits", "probabilities"] = Field("logits", description="What `scores` hold.")
        name: str = Field("ece", description="Metric key.")

    def metric_names(self) -> list[str]:
        return [self.config.name]

    def greater_is_better(self, metric: str) -> bool:
        return False  # an error: lower is better

    def statistics(self, references, predictions, scores=None, labels: Sequence[str] | None = None,
                   **kwargs: Any) -> dict[tuple[str, int], np.ndarray]:
        """Per example and confidence bin: right (0/1) and the predicted class's probability, in its bin only."""
        scores = score_matrix(scores, len(references), "ece")
        if scores.shape[1] == 1:  # binary, one sigmoid output
            p = scores[:, 0] if self.config.inputs == "probabilities" else 1 / (1 + np.exp(-scores[:, 0]))
            probs = np.stack([1 - p, p], axis=1)
        else:
            probs = scores if self.config.inputs == "probabilities" else softmax(scores)
        if not labels:
            raise ValueError("ece needs labels= (the label names of the score columns)")
        names = [str(x) for x in labels]
        if len(names) != probs.shape[1]:
            raise ValueError(f"{len(names)} labels but {probs.shape[1]} score columns")
        index = {name: j for j, name in enumerate(names)}
        truth = np.array([index.get(str(r), -1) for r in references])
        return _bins(probs.max(axis=1), (probs.argmax(axis=1) == truth).astype(float), self.config.bins)

    def from_statistics(self, sums, n) -> dict[str, np.ndarray]:
        return {self.config.name: _error(sums, n, self.config.bins)}

    def compute(self, references, predictions, scores=None, labels: Sequence[str] | None = None,
                **kwargs: Any) -> dict[str, float]:
        if not len(references):
            return {self.config.name: undefined("ece", "no examples")}
        return super().compute(references, predictions, scores=scores, labels=labels)
