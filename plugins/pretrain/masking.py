"""Packed MLM sequences and whole-word masking with 80/10/10 replacement.

Packing: documents are tokenised (no special tokens) and laid end to end, a ``[SEP]`` after each document,
cut into sequences of ``[CLS] ... [SEP]`` of at most ``max_length`` tokens at word boundaries (a word longer
than a whole sequence is truncated). Each token carries its word's index within the sequence (-1 for
special tokens), so a collator can mask whole words. Streams to an Arrow file: memory is flat in the
corpus size.

Masking (Gu et al. 2.3/2.4; BERT's 80/10/10 applied per word): every word is selected with probability
``probability``; all tokens of a selected word become labels, and the word as a whole is replaced by
``[MASK]`` (``mask_replace``), by random tokens (``random_replace``) or left as it is (the rest).
transformers 4.57's ``DataCollatorForLanguageModeling(whole_word_mask=True)`` only runs with 100% [MASK],
hence this collator.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

SEP_WORD = -1  # word index of [CLS], [SEP] and padding


class Packer:
    """Fill ``[CLS] d1 [SEP] d2 [SEP] ...`` sequences of at most ``max_length`` tokens from documents."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer = tokenizer
        self.budget = max_length - 2  # room between [CLS] and the closing [SEP]
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        self.ids: list[np.ndarray] = []
        self.words: list[np.ndarray] = []
        self.length = 0
        self.next_word = 0
        self.documents = 0
        self.truncated_words = 0

    def _put(self, ids: np.ndarray, words: np.ndarray) -> None:
        self.ids.append(ids)
        self.words.append(words)
        self.length += len(ids)

    def _emit(self) -> dict | None:
        if not self.length:
            return None
        ids, words = np.concatenate(self.ids), np.concatenate(self.words)
        if ids[-1] == self.sep and words[-1] == SEP_WORD:  # a document separator doubles as the closing [SEP]
            ids, words = ids[:-1], words[:-1]
        row = {"input_ids": [self.cls, *ids.tolist(), self.sep], "word_ids": [SEP_WORD, *words.tolist(), SEP_WORD]}
        self.ids, self.words, self.length, self.next_word = [], [], 0, 0
        return row

    def add(self, texts: list[str]) -> Iterator[dict]:
        """Sequences completed by these documents (a partial one is kept for the next call)."""
        encoded = self.tokenizer(texts, add_special_tokens=False, verbose=False)  # documents may exceed a sequence
        for i, ids in enumerate(encoded["input_ids"]):
            if not ids:
                continue
            self.documents += 1
            ids = np.asarray(ids, dtype=np.int64)
            word = np.array(encoded.word_ids(i), dtype=np.float64)  # None (an added token) -> nan: its own word
            starts = np.ones(len(ids), dtype=bool)
            starts[1:] = word[1:] != word[:-1]
            dense = np.cumsum(starts) - 1  # the token's word, numbered 0, 1, ... in the document
            ends = np.append(np.flatnonzero(starts)[1:], len(ids))  # where each word ends
            p = 0
            while p < len(ids):
                k = bisect.bisect_right(ends, p + self.budget - self.length) - 1  # the last word that fits
                if k >= 0 and ends[k] > p:
                    e = int(ends[k])
                elif self.length:  # the next word does not fit: a new sequence
                    yield self._emit()
                    continue
                else:  # a word longer than a whole sequence: truncated
                    e = p + self.budget
                    self.truncated_words += 1
                self._put(ids[p:e], dense[p:e] - dense[p] + self.next_word)
                self.next_word += int(dense[e - 1] - dense[p]) + 1
                p = int(ends[bisect.bisect_right(ends, e - 1)]) if e < len(ids) else e
            if self.length < self.budget:
                self._put(np.array([self.sep]), np.array([SEP_WORD]))
            else:
                yield self._emit()

    def finish(self) -> Iterator[dict]:
        row = self._emit()
        if row is not None:
            yield row


def pack_to_arrow(texts: Iterable[str], tokenizer, max_length: int, path: Path, batch: int = 1000) -> dict:
    """Pack ``texts`` into ``path`` (an Arrow file ``datasets.Dataset.from_file`` memory-maps); returns counts."""
    from datasets import Features, Sequence, Value
    from datasets.arrow_writer import ArrowWriter

    features = Features({"input_ids": Sequence(Value("int32")), "word_ids": Sequence(Value("int32"))})
    packer = Packer(tokenizer, max_length)
    sequences = tokens = 0
    writer = ArrowWriter(features=features, path=str(path), writer_batch_size=1000)
    try:
        chunk: list[str] = []

        def write(rows: Iterable[dict]) -> None:
            nonlocal sequences, tokens
            for row in rows:
                writer.write(row)
                sequences += 1
                tokens += len(row["input_ids"])

        for text in texts:
            chunk.append(text)
            if len(chunk) >= batch:
                write(packer.add(chunk))
                chunk = []
        if chunk:
            write(packer.add(chunk))
        write(packer.finish())
        writer.finalize()
    finally:
        writer.close()
    return {"documents": packer.documents, "sequences": sequences, "tokens": tokens,
            "truncated_words": packer.truncated_words, "max_length": max_length}


class WholeWordMaskCollator:
    """Pad packed rows and mask whole words: labels on every token of a selected word, -100 elsewhere.

    Randomness: ``generator`` when given; else, with ``seed``, a generator seeded by the seed, the epoch
    (:meth:`set_epoch`, called by the Trainer through :class:`kinject.training.EpochCallback`) and the batch's
    tokens, so the masks of a batch never depend on what was drawn before it: a run resumed in the middle of an
    epoch masks every later batch as the uninterrupted run did, and each epoch masks anew (dynamic masking)."""

    def __init__(self, tokenizer, probability: float = 0.15, mask_replace: float = 0.8, random_replace: float = 0.1,
                 generator: torch.Generator | None = None, seed: int | None = None):
        self.pad, self.mask = tokenizer.pad_token_id, tokenizer.mask_token_id
        self.probability, self.mask_replace, self.random_replace = probability, mask_replace, random_replace
        special = set(tokenizer.all_special_ids)
        self.replacements = torch.tensor([i for i in range(len(tokenizer)) if i not in special], dtype=torch.long)
        self.generator, self.seed, self.epoch = generator, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _batch_generator(self, ids: torch.Tensor) -> torch.Generator | None:
        if self.generator is not None or self.seed is None:
            return self.generator
        import hashlib

        digest = hashlib.sha256(f"{self.seed}:{self.epoch}:".encode() + ids.numpy().tobytes()).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), self.pad, dtype=torch.long)
        words = torch.full((len(features), longest), SEP_WORD, dtype=torch.long)
        attention = torch.zeros((len(features), longest), dtype=torch.long)
        for row, f in enumerate(features):
            n = len(f["input_ids"])
            ids[row, :n] = torch.as_tensor(f["input_ids"], dtype=torch.long)
            words[row, :n] = torch.as_tensor(f["word_ids"], dtype=torch.long)
            attention[row, :n] = 1
        is_word = words >= 0
        index = words.clamp(min=0)
        generator = self._batch_generator(ids)
        chosen = torch.rand(*ids.shape, generator=generator) < self.probability  # one draw per word slot
        selected = chosen.gather(1, index) & is_word
        if not selected.any():  # never a batch without a target: the first word of every row
            selected = is_word & (words == 0)
        labels = torch.where(selected, ids, torch.full_like(ids, -100))
        action = torch.rand(*ids.shape, generator=generator).gather(1, index)  # per word: mask / random / keep
        to_mask = selected & (action < self.mask_replace)
        to_random = selected & (action >= self.mask_replace) & (action < self.mask_replace + self.random_replace)
        ids = ids.masked_fill(to_mask, self.mask)
        picks = torch.randint(len(self.replacements), (int(to_random.sum()),), generator=generator)
        ids[to_random] = self.replacements[picks]
        return {"input_ids": ids, "attention_mask": attention, "labels": labels}
