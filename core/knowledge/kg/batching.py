"""Dynamic padding for KG training sets (useful-token fraction >= 0.9); the length-grouped batches are
:func:`kinject.training.length_grouped_batches`."""

from __future__ import annotations

import numpy as np

IGNORE = -100
COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "labels")


def lengths_of(dataset) -> np.ndarray:
    """Row lengths of a tokenized dataset: its ``length`` column, else the length of each ``input_ids``."""
    if "length" in dataset.column_names:
        return dataset.data.column("length").to_numpy()
    return np.asarray([len(x) for x in dataset["input_ids"]])


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
