"""KIMERA's held-out KG evaluation (``strategy.kg_heldout``): the positive control that knowledge went in.

Before the KG training data is built, the distinct (head, relation, tail) triples among the first
``kg_max_triples`` of the source are split with a seed: ``kg_heldout`` of them are held out, the others (with
every repeat of them) are the retraining graph. Both parts go through the knowledge library's build_kg_data as
sources of their own, so the held-out rows are made exactly as the training rows are (triplet negatives: one
component replaced by the same component of another held-out triple, never a known held-out triple). Each
part checks its negatives against its own triples only, so :func:`drop_shared_negatives` then removes a
training negative that is a held-out triple and a held-out negative that is a training triple. After
retraining, the trained relation and triplet heads score the held-out rows; the levels to beat are the
majority class of the training rows and chance.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from itertools import islice
from typing import Iterator

import numpy as np

from kinject.api import DataError, Environment, KnowledgeSource, Triple

log = logging.getLogger("kinject")

HELDOUT_TASKS = ("relation", "triplet")


class TripleSplit:
    """One part (``train`` or ``heldout``) of :func:`split_source`: a source build_kg_data reads like any other
    (name, kind, fingerprint, iter_triples, bad_rows of the source it splits)."""

    kind = "triples"

    def __init__(self, source: KnowledgeSource, part: str, key: dict, heldout: dict[tuple, Triple], cap: int | None):
        self.source, self.part, self.key, self.heldout, self.cap = source, part, key, heldout, cap
        self.name = source.name

    @property
    def bad_rows(self):
        return getattr(self.source, "bad_rows", None)

    def fingerprint(self, env: Environment) -> str:
        data = {**self.key, "part": self.part, "source": self.source.fingerprint(env)}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def iter_triples(self, env: Environment) -> Iterator[Triple]:
        if self.part == "heldout":
            yield from self.heldout.values()
            return
        for triple in islice(self.source.iter_triples(env), self.cap):
            if (triple.head, triple.relation, triple.tail) not in self.heldout:
                yield triple


def split_source(source: KnowledgeSource, env: Environment, cap: int | None, heldout: int,
                 seed: int) -> tuple[TripleSplit, TripleSplit]:
    """(train part, held-out part) of the first ``cap`` triples of ``source`` (one pass to find the distinct
    triples; ``heldout`` of them drawn with ``seed``). DataError when fewer than ``heldout + 1`` are distinct."""
    distinct: dict[tuple, Triple] = {}
    for triple in islice(source.iter_triples(env), cap):
        distinct.setdefault((triple.head, triple.relation, triple.tail), triple)
    if len(distinct) <= heldout:
        where = f"the first {cap} triples of the KG hold" if cap else "the KG holds"
        raise DataError(f"strategy.kg_heldout: {heldout} held-out triples leave none to retrain on; {where} "
                        f"{len(distinct)} distinct triples")
    keys = list(distinct)
    chosen = sorted(random.Random(seed).sample(range(len(keys)), heldout))
    held = {keys[i]: distinct[keys[i]] for i in chosen}
    key = {"split": "kimera-heldout-v1", "cap": cap, "heldout": heldout, "seed": seed}
    return TripleSplit(source, "train", key, held, cap), TripleSplit(source, "heldout", key, held, cap)


def _labels(dataset) -> np.ndarray:
    return np.asarray(dataset.with_format("numpy")["labels"], dtype=np.int64)


def _rows(dataset) -> list[tuple]:
    return [tuple(ids) for ids in dataset.with_format(None)["input_ids"]]


def _without(dataset, drop: list[int]):
    if not drop:
        return dataset
    gone = set(drop)
    return dataset.select([i for i in range(len(dataset)) if i not in gone]).flatten_indices(keep_in_memory=True)


def drop_shared_negatives(train, heldout) -> dict[str, int]:
    """Remove (in place, on the two KGData) the triplet negatives that are real triples of the other part: a
    training negative with the token ids of a held-out triple, a held-out negative with those of a training
    triple. Returns how many were dropped from each part ({"train": n, "heldout": m})."""
    if train.triplet is None or heldout.triplet is None:
        return {}
    rows = {"train": _rows(train.triplet), "heldout": _rows(heldout.triplet)}
    labels = {"train": _labels(train.triplet), "heldout": _labels(heldout.triplet)}
    positives = {part: {r for r, y in zip(rows[part], labels[part]) if y == 1} for part in rows}
    other = {"train": "heldout", "heldout": "train"}
    drop = {part: [i for i, (r, y) in enumerate(zip(rows[part], labels[part]))
                   if y == 0 and r in positives[other[part]]] for part in rows}
    train.triplet, heldout.triplet = _without(train.triplet, drop["train"]), _without(heldout.triplet, drop["heldout"])
    return {part: len(indices) for part, indices in drop.items()}


def build_retraining_data(source: KnowledgeSource, env: Environment, tokenizer, seed: int, tasks: list[str], *,
                          max_length: int, max_triples: int | None, heldout: int = 0):
    """(training KGData, held-out KGData or None) of the retrain stage: rows of ``max_length`` tokens from the first
    ``max_triples`` triples. With ``heldout`` triples the source is split (:func:`split_source`) before either part
    is built, and the negatives shared between the parts are dropped (the counts go into the held-out data's
    stats)."""
    from kinject.knowledge import KGDataConfig, build_kg_data

    def config(kinds: list[str], cap: int | None) -> KGDataConfig:
        return KGDataConfig(tasks=kinds, max_length=max_length, max_triples=cap, negatives_seed=seed)

    if not heldout:
        return build_kg_data(source, env, tokenizer, config(tasks, max_triples)), None
    train, part = split_source(source, env, max_triples, heldout, seed)
    held = build_kg_data(part, env, tokenizer, config([t for t in HELDOUT_TASKS if t in tasks], None))
    data = build_kg_data(train, env, tokenizer, config(tasks, max_triples))
    held.stats = {**held.stats, "shared_negatives_dropped": drop_shared_negatives(data, held)}
    return data, held


def score_heldout(model, heldout, train, tasks: list[str], tokenizer, batch_size: int = 64, seed: int = 0) -> dict:
    """Accuracy of the trained relation / triplet heads of ``model`` (multitask.KGMultiTaskModel) on the held-out
    KG data (kinject.knowledge.KGData), with the levels to beat: ``majority`` (always the most frequent class of the
    training rows) and ``chance`` (1 / classes). A held-out relation the training graph lacks counts as wrong."""
    import torch

    from kinject.knowledge import KGCollator

    collate = KGCollator(tokenizer)
    device = next(model.parameters()).device
    out: dict = {"triples": int(heldout.stats["triples"]), "seed": seed,
                 "shared_negatives_dropped": heldout.stats.get("shared_negatives_dropped", {})}
    training = model.training
    model.eval()
    try:
        for kind in (t for t in HELDOUT_TASKS if t in tasks):
            rows = getattr(heldout, kind)
            gold = _labels(rows)
            if kind == "relation":  # the held-out graph numbers its relations itself: map them by name
                index = {name: i for i, name in enumerate(train.relations)}
                gold = np.array([index.get(heldout.relations[g], -1) for g in gold], dtype=np.int64)
            predicted = []
            with torch.no_grad():
                for lo in range(0, len(rows), batch_size):
                    batch = collate([rows[i] for i in range(lo, min(lo + batch_size, len(rows)))])
                    batch.pop("labels", None)
                    batch = {k: v.to(device) for k, v in batch.items()}
                    hidden = model.encode(**batch)
                    predicted.append(model.classify(kind, hidden, batch["attention_mask"]).argmax(-1).cpu().numpy())
            pred = np.concatenate(predicted) if predicted else np.zeros(0, np.int64)
            majority = int(np.bincount(_labels(getattr(train, kind))).argmax())
            classes = len(train.relations) if kind == "relation" else 2
            out[kind] = {"rows": int(len(gold)), "accuracy": float((pred == gold).mean()),
                         "majority": float((gold == majority).mean()), "chance": 1.0 / classes,
                         "majority_class": train.relations[majority] if kind == "relation" else majority}
    finally:
        model.train(training)
    log.info("kimera retrain: %d held-out KG triples: %s", out["triples"], ", ".join(
        f"{k} accuracy {v['accuracy']:.3f} (majority {v['majority']:.3f}, chance {v['chance']:.3f})"
        for k, v in out.items() if k in HELDOUT_TASKS))
    return out
