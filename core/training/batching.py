"""Batches by length: length-grouped batch order (seeded, per epoch), the sampler a Trainer uses for it, the rows a
budget of steps consumes (the knowledge dose), and padding counters."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np



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


def token_budget_batches(lengths: np.ndarray | Sequence[int], max_tokens: int, seed: int | None = None,
                         mega: int = 50, rng: np.random.Generator | None = None) -> list[list[int]]:
    """Shuffled batches of rows of similar length, each holding as many rows as fit ``max_tokens`` padded tokens.

    Token-budget batching (as fairseq's ``--max-tokens``): short rows pack into large batches, long rows into small
    ones, so every step costs about the same. Rows are shuffled, sorted by length (longest first, stable) inside
    blocks of ``mega`` x (the rows of an average-length batch), then cut greedily while rows x the batch's longest
    row stays within the budget; the batches are shuffled and the one with the longest row comes first. A row longer
    than the budget gets a batch of its own. Randomness: ``rng``, else ``np.random.default_rng(seed)``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    generator = rng if rng is not None else np.random.default_rng(seed)
    if not len(lengths):
        return []
    per_batch = max(1, int(max_tokens // max(1.0, float(lengths.mean()))))
    span = per_batch * max(1, mega)
    order = generator.permutation(len(lengths))
    batches: list[list[int]] = []
    for lo in range(0, len(order), span):
        block = order[lo:lo + span]
        block = block[np.argsort(-lengths[block], kind="stable")]
        current: list[int] = []
        for index in block.tolist():
            longest = int(lengths[current[0]]) if current else int(lengths[index])
            if current and (len(current) + 1) * longest > max_tokens:
                batches.append(current)
                current = []
            current.append(index)
        if current:
            batches.append(current)
    batches = [batches[int(i)] for i in generator.permutation(len(batches))]
    longest = max(range(len(batches)), key=lambda b: lengths[batches[b][0]])
    batches[0], batches[longest] = batches[longest], batches[0]
    return batches


def useful_token_fraction(lengths: np.ndarray | Sequence[int], batches: list[list[int]]) -> float:
    """Non-pad tokens / all tokens when each batch is padded to its longest row."""
    lengths = np.asarray(lengths)
    useful = sum(int(lengths[b].sum()) for b in batches)
    total = sum(int(lengths[b].max()) * len(b) for b in batches)
    return useful / total if total else float("nan")


class PaddingCounter:
    """Wraps a collator and counts useful (non-pad) vs all tokens it emits.

    In a DataLoader worker process the counts travel inside the batch (``TOKEN_COUNTS``, two ints; the trainers of
    :func:`with_length_buckets` take them out before the forward), so they are right when workers collate."""

    def __init__(self, collator: Callable):
        self.collator = collator
        self.useful = 0
        self.total = 0

    def __call__(self, features: list[dict]) -> dict:
        from torch.utils.data import get_worker_info

        batch = self.collator(features)
        mask = batch.get("attention_mask")
        if mask is not None:
            if get_worker_info() is None:
                self.useful += int(mask.sum())
                self.total += int(mask.numel())
            else:
                batch[TOKEN_COUNTS] = (int(mask.sum()), int(mask.numel()))
        return batch

    def count(self, batch: dict) -> None:
        """Take a worker's counts out of ``batch`` (in the training process)."""
        useful, total = batch.pop(TOKEN_COUNTS, (0, 0))
        self.useful += useful
        self.total += total

    @property
    def useful_fraction(self) -> float:
        return self.useful / self.total if self.total else float("nan")


TOKEN_COUNTS = "kinject_token_counts"


class LengthBucketSampler:
    """Length-grouped sampling that stays tight on small datasets.

    Shuffle, cut into mega-batches of ``megabatch_mult`` batches, sort each by length, cut into batches, shuffle
    the batches. (transformers' LengthGroupedSampler shrinks mega-batches to a quarter of the data, so on a few
    hundred examples it barely groups: useful-token fractions of ~0.4 on CAPR pairs.) The one partial batch
    goes last, so the DataLoader's re-batching of the index stream keeps every batch intact.

    The order of an epoch depends only on ``seed`` and the epoch (the Trainer calls :meth:`set_epoch`), never on
    the global random state, so a run resumed in the middle of any epoch sees the batches it would have seen.
    """

    def __init__(self, lengths: list[int], batch_size: int, megabatch_mult: int = 50, seed: int = 0):
        self.lengths, self.batch_size, self.megabatch_mult = list(lengths), batch_size, megabatch_mult
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        batches = length_grouped_batches(self.lengths, self.batch_size, mega=self.megabatch_mult, rng=rng)
        return iter([i for batch in batches for i in batch])


def consumed_rows(lengths: Sequence[int] | np.ndarray, batch_size: int, steps: int, seed: int,
                  accumulation: int = 1) -> np.ndarray:
    """The rows, in order and with repeats, that the first ``steps`` optimiser steps of :func:`train` (one process,
    length-grouped: :class:`LengthBucketSampler` seeded with ``seed``) consumed: epoch after epoch, each step takes
    ``batch_size x accumulation`` rows of that epoch's order (the last step of an epoch fewer). What a stage's
    knowledge dose counts (:func:`kinject.knowledge.write_dose`)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    per_step = batch_size * accumulation
    if not len(lengths) or steps <= 0:
        return np.zeros(0, dtype=np.int64)
    steps_per_epoch = max(-(-len(lengths) // batch_size) // accumulation, 1)
    out, epoch, left = [], 0, int(steps)
    while left > 0:
        sampler = LengthBucketSampler(lengths, per_step, seed=seed)
        sampler.set_epoch(epoch)
        order = np.fromiter(iter(sampler), dtype=np.int64, count=len(lengths))
        take = min(left, steps_per_epoch)
        out.append(order[: take * per_step] if take < steps_per_epoch else order)
        left -= take
        epoch += 1
    return np.concatenate(out)


def row_lengths(dataset) -> list[int]:
    """Token count of each row of a dataset: its ``length`` column, else the lengths of its ``input_ids`` (read from
    the Arrow column, not row by row)."""
    columns = getattr(dataset, "column_names", [])
    if "length" in columns:
        return list(dataset["length"])
    table = getattr(dataset, "data", None)
    if table is not None and "input_ids" in columns and getattr(dataset, "_indices", None) is None:
        import pyarrow.compute as pc

        return pc.list_value_length(table.column("input_ids")).to_numpy(zero_copy_only=False).tolist()
    return [len(x["input_ids"]) for x in dataset]


def with_length_buckets(trainer_cls):
    """A subclass of ``trainer_cls`` whose training sampler is :class:`LengthBucketSampler` (and which takes the
    :class:`PaddingCounter`'s counts out of each batch)."""

    class LengthBucketTrainer(trainer_cls):
        def training_step(self, model, inputs, *args, **kwargs):
            if TOKEN_COUNTS in inputs:
                counter = self.data_collator
                counter.count(inputs) if isinstance(counter, PaddingCounter) else inputs.pop(TOKEN_COUNTS)
            return super().training_step(model, inputs, *args, **kwargs)

        def _get_train_sampler(self, train_dataset=None):
            if not self.args.group_by_length or self.train_dataset is None:
                return super()._get_train_sampler(train_dataset)
            lengths = row_lengths(self.train_dataset)
            return LengthBucketSampler(lengths, self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                       seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed)

    LengthBucketTrainer.__name__ = f"LengthBucket{trainer_cls.__name__}"
    return LengthBucketTrainer


def to_dataset(features: list[dict]):
    """Features (dicts of lists) -> a datasets.Dataset with a ``length`` column for length grouping."""
    from datasets import Dataset

    rows = [dict(f, length=len(f["input_ids"])) for f in features]
    return Dataset.from_list(rows)
