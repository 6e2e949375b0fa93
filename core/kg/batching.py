"""Length-grouped batches (the one implementation behind KG training and the fine-tuning sampler) and
dynamic padding for KG training sets (useful-token fraction >= 0.9)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

IGNORE = -100
COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "labels")


def lengths_of(dataset) -> np.ndarray:
    """Row lengths of a tokenized dataset: its ``length`` column, else the length of each ``input_ids``."""
    if "length" in dataset.column_names:
        return dataset.data.column("length").to_numpy()
    return np.asarray([len(x) for x in dataset["input_ids"]])


def length_grouped_batches(lengths: np.ndarray | Sequence[int], batch_size: int, seed: int | None = None,
                           mega: int = 50, rng: np.random.Generator | None = None,
                           permutation: Callable[[int], Sequence[int]] | None = None) -> list[list[int]]:
    """Shuffled batches of rows of similar length.

    Shuffle the rows, sort them by length (longest first, stable) inside mega-batches of ``mega``
    batches, cut into batches, shuffle the full batches. The batch with the longest row comes first (memory
    errors show at once); the one partial batch comes last, so a DataLoader re-batching the flattened index
    stream keeps every batch intact. Randomness: ``permutation(n)`` (e.g. ``lambda n: torch.randperm(n)
    .tolist()`` for the global torch RNG), else ``rng``, else ``np.random.default_rng(seed)``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if permutation is None:
        generator = rng if rng is not None else np.random.default_rng(seed)
        permutation = generator.permutation
    span = batch_size * max(1, mega)
    order = np.asarray(permutation(len(lengths)), dtype=np.int64)
    full, partial = [], []
    for lo in range(0, len(order), span):
        block = order[lo:lo + span]
        block = block[np.argsort(-lengths[block], kind="stable")]
        for i in range(0, len(block), batch_size):
            (full if len(block[i:i + batch_size]) == batch_size else partial).append(block[i:i + batch_size].tolist())
    batches = [full[int(i)] for i in permutation(len(full))]
    if batches:
        longest = max(range(len(batches)), key=lambda b: lengths[batches[b][0]])
        batches[0], batches[longest] = batches[longest], batches[0]
    return batches + partial


def useful_token_fraction(lengths: np.ndarray | Sequence[int], batches: list[list[int]]) -> float:
    """Non-pad tokens / all tokens when each batch is padded to its longest row."""
    lengths = np.asarray(lengths)
    useful = sum(int(lengths[b].sum()) for b in batches)
    total = sum(int(lengths[b].max()) * len(b) for b in batches)
    return useful / total if total else float("nan")


class KGCollator:
    """Pads KG rows to the longest one with transformers' collators: input_ids with [PAD], masks and token
    types 0, per-token labels -100 (DataCollatorForTokenClassification); class labels stay scalars
    (DataCollatorWithPadding). Columns other than the model inputs and labels are dropped."""

    def __init__(self, tokenizer):
        from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

        self.tokens = DataCollatorForTokenClassification(tokenizer, label_pad_token_id=IGNORE)
        self.classes = DataCollatorWithPadding(tokenizer)

    def __call__(self, features: list[dict]) -> dict:
        features = [{k: f[k] for k in COLUMNS if k in f} for f in features]
        per_token = isinstance(features[0].get("labels"), (list, tuple, np.ndarray))
        return (self.tokens if per_token else self.classes)(features)
