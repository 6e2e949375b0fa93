"""The importance scoring set: what the mask search and the analysis score.

The scoring set is the task's ``score_split`` (default: its first evaluation split), whole or capped at
``score_examples`` (the first ones, or with ``score_seed`` a seeded random draw of whole groups); the search
metric is measured on all of it. Head importance (forward+backward) is computed
on its first ``importance_examples`` (None: all), the rest only runs forward, so the stop decision can rest on
every query at a fraction of the cost. Retrieval tasks keep each query's candidates together in both caps.
Batches are sorted by length (less padding; importance is a sum over examples, so the order does not change it)
and ``restore`` puts the logits back in the split's order before the task scores them. :class:`ScoringConfig`
describes the set in the configs of the mask search and the report, which score the same set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from kinject.api import StageConfig, TaskRef


class ScoringConfig(StageConfig):
    """The importance scoring set and the metric the mask search watches."""

    task: TaskRef
    split: str
    examples: int | None  # None: the whole split
    importance_examples: int | None = None  # importance on the first N of them (None: all)
    batch_size: int
    metric: str
    max_length: int
    attn: str = "sdpa"
    seed: int | None = None  # None: the first `examples`; else a seeded random draw of whole groups
    bf16: bool = False  # importance and metric passes under bfloat16 autocast (training.bf16; same masks, 1.3x)

    def flops(self, run, rounds: int, metric: bool = True) -> float:
        """``rounds`` of importance (forward + backward on the first importance_examples) and, with ``metric``, of
        the forward-only metric pass over the rest of the scoring set."""
        from kinject.training import scored_flops

        first = scored_flops(run, self.task, self.split, self.max_length, self.importance_examples or self.examples)
        every = scored_flops(run, self.task, self.split, self.max_length, self.examples) if metric else first
        return rounds * (every + 2 * first)


@dataclass
class ScoringSet:
    """Examples, their features, the (length-sorted) importance batches then metric-only batches, and the
    permutation between batch rows and features."""

    examples: list[dict]
    features: list[dict]
    batches: list[dict]  # forward+backward: importance (and metric)
    order: np.ndarray  # batches + metric_batches hold features[order[0]], features[order[1]], ...
    metric_batches: list[dict] = field(default_factory=list)  # forward only: metric

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


def draw_examples(examples: list[dict], seed: int | None) -> list[dict]:
    """``examples`` as they are (seed None), or their groups (retrieval queries with their candidates; an example
    without a ``group`` is a group of its own) in a seeded random order, each group's examples together and in
    their order: :func:`choose_examples` then takes a random sample of whole groups."""
    if seed is None:
        return list(examples)
    groups: dict = {}
    for i, ex in enumerate(examples):
        group = ex.get("group")
        groups.setdefault(("group", group) if group is not None else ("example", i), []).append(ex)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    return [ex for key in keys for ex in groups[key]]


def build_scoring_set(task, env, split: str, cap: int | None, tokenizer, max_length: int, batch_size: int,
                      importance_cap: int | None = None, seed: int | None = None) -> ScoringSet:
    """The first ``cap`` examples of ``split`` (None: all; with ``seed``: of a seeded random order of its groups,
    :func:`draw_examples`); importance on the first ``importance_cap`` of them."""
    chosen = choose_examples(draw_examples(task.examples(split, env), seed), cap)
    first = choose_examples(chosen, importance_cap)
    features = task.featurize(tokenizer, first, max_length, env)  # featurized in two parts: where they split
    head = len(features)
    if len(first) < len(chosen):
        features = features + task.featurize(tokenizer, chosen[len(first):], max_length, env)
    lengths = np.array([len(f["input_ids"]) for f in features])
    order = np.concatenate([np.argsort(lengths[:head], kind="stable"),
                            head + np.argsort(lengths[head:], kind="stable")]).astype(int)
    collator = task.collator(tokenizer)
    keep = ("input_ids", "attention_mask", "token_type_ids", "labels")

    def batches(rows: np.ndarray) -> list[dict]:
        return [dict(collator([{k: v for k, v in features[i].items() if k in keep}  # model inputs only (NER
                               for i in rows[s:s + batch_size]]))  # features carry word positions)
                for s in range(0, len(rows), batch_size)]
    return ScoringSet(chosen, features, batches(order[:head]), order, batches(order[head:]))


def scoring_set(scoring: ScoringConfig, task, env, tokenizer) -> ScoringSet:
    """The scoring set a stage's :class:`ScoringConfig` describes."""
    return build_scoring_set(task, env, scoring.split, scoring.examples, tokenizer, scoring.max_length,
                             scoring.batch_size, scoring.importance_examples, scoring.seed)
