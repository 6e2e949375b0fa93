"""Masking for masked-LM training with 80/10/10 replacement, for the packed sequences of :mod:`.packing`: whole-word
masking (the default) or token-level masking.

Gu et al. 2.3/2.4; BERT's 80/10/10 applied per masking unit. ``unit="whole_word"``: every word is selected with
probability ``probability``; all tokens of a selected word become labels, and the word as a whole is replaced by
``[MASK]`` (``mask_replace``), by random tokens (``random_replace``) or left as it is (the rest).
``unit="token"`` (the original BERT's masking, Gu et al.'s Table 7 "WordPiece" column; HF
``DataCollatorForLanguageModeling``): every non-special token is selected, and replaced, on its own, so a word can
be partly masked. transformers 4.57's ``DataCollatorForLanguageModeling(whole_word_mask=True)`` only runs with 100%
[MASK], hence this collator.
"""

from __future__ import annotations

import torch

from .packing import SEP_WORD


#: the masking units: a whole word (all its tokens together) or a single token
UNITS = ("whole_word", "token")


class WholeWordMaskCollator:
    """Pad packed rows and mask whole words (``unit="whole_word"``: labels on every token of a selected word) or
    single tokens (``unit="token"``: each token selected and replaced independently); -100 elsewhere.

    Randomness: ``generator`` when given; else, with ``seed``, a generator seeded by the seed, the epoch
    (:meth:`set_epoch`, called by the Trainer through :class:`kinject.training.EpochCallback`) and the batch's
    tokens, so the masks of a batch never depend on what was drawn before it: a run resumed in the middle of an
    epoch masks every later batch as the uninterrupted run did, and each epoch masks anew (dynamic masking)."""

    def __init__(self, tokenizer, probability: float = 0.15, mask_replace: float = 0.8, random_replace: float = 0.1,
                 generator: torch.Generator | None = None, seed: int | None = None, unit: str = "whole_word"):
        if unit not in UNITS:
            raise ValueError(f"unit {unit!r} is not one of {', '.join(UNITS)}")
        self.unit = unit
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
        # the masking unit of each token: its word (whole words), or its own position (tokens)
        index = words.clamp(min=0) if self.unit == "whole_word" else torch.arange(longest).expand_as(ids)
        generator = self._batch_generator(ids)
        chosen = torch.rand(*ids.shape, generator=generator) < self.probability  # one draw per unit slot
        selected = chosen.gather(1, index) & is_word
        if not selected.any():  # never a batch without a target: the first unit of every row
            selected = is_word & ((words == 0) if self.unit == "whole_word" else (is_word.cumsum(1) == 1))
        labels = torch.where(selected, ids, torch.full_like(ids, -100))
        action = torch.rand(*ids.shape, generator=generator).gather(1, index)  # per unit: mask / random / keep
        to_mask = selected & (action < self.mask_replace)
        to_random = selected & (action >= self.mask_replace) & (action < self.mask_replace + self.random_replace)
        ids = ids.masked_fill(to_mask, self.mask)
        picks = torch.randint(len(self.replacements), (int(to_random.sum()),), generator=generator)
        ids[to_random] = self.replacements[picks]
        return {"input_ids": ids, "attention_mask": attention, "labels": labels}
