"""Calibration: expected calibration error (ECE) as DoKTra (Choi et al., ACL 2022, appendix) defines it."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field

from kinject.tasks.evaluators import undefined
from kinject.tasks.evaluators.scores import score_matrix, softmax
from kinject.api import Evaluator, PluginConfig


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """sum_m |B_m|/n * |acc(B_m) - conf(B_m)| over ``bins`` equal-width confidence bins (0, 1/M], ...

    A confidence exactly on an edge goes to the lower bin (bin m holds (m/M, (m+1)/M]); 0 joins the first.
    No examples: NaN (with a warning).
    """
    confidence = np.asarray(confidence, dtype=float)
    correct = np.asarray(correct, dtype=float)
    n = confidence.size
    if n == 0:
        return undefined("ece", "no examples")
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    total = 0.0
    for m in range(bins):
        members = index == m
        if members.any():
            total += members.sum() / n * abs(correct[members].mean() - confidence[members].mean())
    return float(total)


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

    def compute(self, references, predictions, scores=None, labels: Sequence[str] | None = None,
                **kwargs: Any) -> dict[str, float]:
        scores = score_matrix(scores, len(references), "ece")
        if scores.shape[1] == 1:  # binary, one sigmoid output
            p = scores[:, 0] if self.config.inputs == "probabilities" else 1 / (1 + np.exp(-scores[:, 0]))
            probs = np.stack([1 - p, p], axis=1)
        else:
            probs = scores if self.config.inputs == "probabilities" else softmax(scores)
        names = [str(x) for x in labels] if labels else [str(j) for j in range(probs.shape[1])]
        if len(names) != probs.shape[1]:
            raise ValueError(f"{len(names)} labels but {probs.shape[1]} score columns")
        predicted = probs.argmax(axis=1)
        index = {name: j for j, name in enumerate(names)}
        truth = np.array([index.get(str(r), -1) for r in references])
        return {self.config.name: expected_calibration_error(probs.max(axis=1), predicted == truth, self.config.bins)}
