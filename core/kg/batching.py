"""Length-grouped batches and dynamic padding for KG training sets (useful-token fraction >= 0.9)."""

from __future__ import annotations

import numpy as np

IGNORE = -100


def lengths_of(dataset) -> np.ndarray:
    if "length" in dataset.column_names:
        return dataset.data.column("length").to_numpy()
    return np.asarray([len(x) for x in dataset["input_ids"]])


def length_grouped_batches(dataset, batch_size: int, seed: int = 0, mega: int = 50) -> list[list[int]]:
    """Shuffled batches of similar-length rows: shuffle, sort inside mega-batches of ``mega`` batches,
    cut into batches, shuffle the batch order."""
    lengths = lengths_of(dataset)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    span = batch_size * mega
    batches = []
    for lo in range(0, len(order), span):
        block = order[lo:lo + span]
        block = block[np.argsort(-lengths[block], kind="stable")]
        batches.extend(block[i:i + batch_size].tolist() for i in range(0, len(block), batch_size))
    perm = rng.permutation(len(batches))
    return [batches[i] for i in perm]


def useful_token_fraction(dataset, batches: list[list[int]]) -> float:
    """Non-pad tokens / all tokens when each batch is padded to its longest row."""
    lengths = lengths_of(dataset)
    useful = sum(int(lengths[b].sum()) for b in batches)
    total = sum(int(lengths[b].max()) * len(b) for b in batches)
    return useful / total if total else float("nan")


class KGCollator:
    """Pads a list of KG rows to the longest one: input_ids with [PAD], masks 0, list labels -100."""

    def __init__(self, pad_token_id: int):
        self.pad = int(pad_token_id)

    def __call__(self, features: list[dict]) -> dict:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        batch = {}
        for name, fill in (("input_ids", self.pad), ("attention_mask", 0), ("token_type_ids", 0)):
            batch[name] = torch.tensor([list(f[name]) + [fill] * (width - len(f[name])) for f in features],
                                       dtype=torch.long)
        labels = [f["labels"] for f in features]
        if isinstance(labels[0], (list, tuple, np.ndarray)):
            batch["labels"] = torch.tensor([list(x) + [IGNORE] * (width - len(x)) for x in labels], dtype=torch.long)
        else:
            batch["labels"] = torch.tensor(labels, dtype=torch.long)
        return batch
