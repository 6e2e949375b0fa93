"""The importance scoring set (what the mask search and the analysis score) and the paired confidence
interval of a search round's metric against the unmasked round's.

The scoring set is the task's ``score_split`` (default: its first evaluation split), whole or capped at
``score_examples`` (retrieval tasks keep each query's candidates together). Its batches are sorted by length
(less padding; importance is a sum over examples, so the order does not change it) and ``restore`` puts the
logits back in the split's order before the task scores them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from kinject.errors import KinjectError

log = logging.getLogger("kinject")


@dataclass
class ScoringSet:
    """Examples, their features, the (length-sorted) model batches and the permutation between them."""

    examples: list[dict]
    features: list[dict]
    batches: list[dict]
    order: np.ndarray  # the batches hold features[order[0]], features[order[1]], ...

    def restore(self, logits: np.ndarray) -> np.ndarray:
        """Logits in batch order -> the features' order."""
        out = np.empty_like(logits)
        out[self.order] = logits
        return out


def choose_examples(examples: list[dict], cap: int | None) -> list[dict]:
    """The first ``cap`` examples (None: all); an example whose ``group`` was already chosen is always added, so
    retrieval queries stay whole."""
    if cap is None:
        return list(examples)
    chosen, groups = [], set()
    for ex in examples:
        group = ex.get("group")
        if len(chosen) >= cap and (group is None or group not in groups):
            break
        chosen.append(ex)
        groups.add(group)
    return chosen


def build_scoring_set(task, env, split: str, cap: int | None, tokenizer, max_length: int,
                      batch_size: int) -> ScoringSet:
    chosen = choose_examples(task.examples(split, env), cap)
    features = task.featurize(tokenizer, chosen, max_length, env)
    order = np.argsort([len(f["input_ids"]) for f in features], kind="stable")
    collator = task.collator(tokenizer)
    keep = ("input_ids", "attention_mask", "token_type_ids", "labels")
    batches = []
    for start in range(0, len(order), batch_size):
        batch = collator([features[i] for i in order[start:start + batch_size]])
        batches.append({k: v for k, v in dict(batch).items() if k in keep})
    return ScoringSet(chosen, features, batches, order)


class RoundInterval:
    """``interval(baseline_logits, logits)`` for :func:`importance.search_mask`: the round's metric minus the
    unmasked round's, with a paired bootstrap interval over the scoring set's evaluation units (queries for
    retrieval, examples otherwise), computed by kinject.evidence from the task's per-example predictions.

    A task without per-example predictions, or a metric that cannot be recomputed from them, gives no
    interval (one warning, then None).
    """

    def __init__(self, task, env, split: str, metric: str, scoring: ScoringSet, resamples: int = 2000,
                 confidence: float = 0.95, seed: int = 0):
        self.task, self.env, self.split, self.metric, self.scoring = task, env, split, metric, scoring
        self.resamples, self.confidence, self.seed = resamples, confidence, seed
        self._baseline: list[dict] | None = None
        self.disabled = False

    def records(self, logits: np.ndarray) -> list[dict]:
        s = self.scoring
        return self.task.predictions(self.split, s.examples, s.features, s.restore(logits), self.env)

    def __call__(self, baseline_logits: np.ndarray, logits: np.ndarray) -> dict | None:
        if self.disabled:
            return None
        from kinject.evidence.compare import pair
        from kinject.evidence.metrics import define, task_metric_refs

        try:
            if self._baseline is None:
                self._baseline = self.records(baseline_logits)
            definition = define(self.metric, task_metric_refs(self.task), self.task.head(self.env).labels)
            _, row = pair(definition, {0: self._baseline}, [{0: self.records(logits)}], self.resamples,
                          self.confidence, self.seed)
        except (NotImplementedError, KinjectError, ValueError) as exc:
            log.warning("kimera mask search: no confidence interval for the rounds (%s)",
                        str(exc) or type(exc).__name__)
            self.disabled = True
            return None
        return {"difference": row["difference"], "ci_low": row["ci_low"], "ci_high": row["ci_high"],
                "confidence": self.confidence, "units": len(self._baseline)}


def no_redundant_head_warning(kind: str, metric: str, rounds: list[dict], threshold: float) -> str:
    """The loud message for a search that marked no head redundant (the retraining then moves no head)."""
    first = rounds[1] if len(rounds) > 1 else rounds[0]
    ci = (f", {first['difference']:+.4f} vs unmasked [95% CI {first['ci_low']:+.4f}, {first['ci_high']:+.4f}]"
          if "ci_low" in first else "")
    return (f"KIMERA mask search found NO redundant head: masking {first['masked']} head(s) in round "
            f"{first['round']} gave {metric}={first['metric']:.4f}{ci}, below the threshold {threshold:.4f}. "
            f"The {kind} mask freezes every attention head, so KG retraining changes only the non-attention "
            "parameters (other_params=train: FFN, embeddings, LayerNorms) and the new KG heads. Score more "
            "examples (strategy.score_examples), or lower strategy.tau or strategy.rho.")
