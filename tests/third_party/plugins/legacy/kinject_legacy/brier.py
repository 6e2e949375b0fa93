"""A probability metric: the macro Brier score, which needs the model's scores."""

from __future__ import annotations

import numpy as np

from kinject.api import Evaluator, PluginConfig


class Brier(Evaluator):
    """Macro Brier score [0 .. 1] of the softmax probabilities (lower is better; needs the scores)."""

    needs = ("scores",)

    class Config(PluginConfig):
        pass

    def metric_names(self):
        return ["brier_macro"]

    def greater_is_better(self, metric):
        return False

    def compute(self, references, predictions, scores=None, labels=None, **kwargs):
        if scores is None or labels is None:
            raise ValueError(f"brier needs the logits and the label order; got {sorted(kwargs)}")
        from kinject.tasks import softmax

        probabilities = softmax(np.asarray(scores, dtype=float))
        gold = np.array([[str(r) == label for label in labels] for r in references], dtype=float)
        return {"brier_macro": float(((probabilities - gold) ** 2).mean(axis=0).mean())}
