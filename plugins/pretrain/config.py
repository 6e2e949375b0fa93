"""The pretrain strategy's config: start point, vocabulary, corpus split, the MLM's text and masking, its budget."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kinject.api import PluginConfig

from .vocab import SPECIAL_TOKENS


class Architecture(PluginConfig):
    """A from-scratch encoder's shape; unset fields copy the base model's config (none set: the base model's
    architecture, so scratch and continual compare at one architecture)."""

    layers: int | None = Field(None, ge=1, description="Transformer layers.")
    hidden: int | None = Field(None, ge=8, description="Hidden size (a multiple of heads).")
    heads: int | None = Field(None, ge=1, description="Attention heads.")
    intermediate: int | None = Field(None, ge=8, description="Feed-forward size (default: 4 x hidden when hidden "
                                     "is set, else the base model's).")
    positions: int | None = Field(None, ge=16, description="Position embeddings (the longest sequence).")

    @model_validator(mode="after")
    def _divisible(self):
        if self.hidden is not None and self.heads is not None and self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        return self


class PretrainConfig(PluginConfig):
    init: Literal["continual", "scratch"] = Field("continual", description="continual: keep pretraining the "
                                                  "base model; scratch: a randomly initialised encoder "
                                                  "(shape: scratch; default the base model's architecture) "
                                                  "trained on the corpus only.")
    vocab: Literal["keep", "train"] | None = Field(None, description="keep: the base model's vocabulary; train: "
                                                   "an uncased WordPiece vocabulary from the corpus (continual: new "
                                                   "embeddings start as the mean of the old pieces of each token). "
                                                   "Default: keep for continual, train for scratch.")
    until: Literal["corpus", "vocab", "all"] = Field("all", description="Stop after the corpus or vocabulary stage "
                                                     "(e.g. to compare vocabularies only).")
    scratch: Architecture = Field(default_factory=Architecture, description="init=scratch: the encoder's shape "
                                  "(every unset dimension is the base model's).")
    vocab_size: int = Field(30522, ge=16, description="Target WordPiece vocabulary size (the paper: 30,522).")
    vocab_min_frequency: int = Field(2, ge=1, description="A merge must occur at least this often.")
    vocab_alphabet_limit: int = Field(1000, ge=1, description="Keep at most this many distinct characters (the "
                                      "rarest are dropped; words containing them become [UNK]).")
    vocab_lowercase: bool = Field(True, description="Uncased vocabulary (lower-case and strip accents), as the paper.")
    heldout_fraction: float = Field(0.01, gt=0, lt=0.5, description="Share of the corpus texts (every 1/f-th) "
                                    "held out for perplexity.")
    heldout_max_texts: int = Field(2000, ge=1, description="Cap on held-out texts.")
    corpus_max_texts: int | None = Field(None, ge=2, description="Read at most this many corpus texts (None: all; "
                                         "--quick: 2,000, so a quick try does not pack a whole corpus).")
    max_length: int | None = Field(None, ge=8, le=8192, description="Tokens per pretraining sequence (default: "
                                   "model.max_length, which fine-tuning uses).")
    mlm_corpus: Literal["domain", "general", "shuffled"] = Field(
        "domain", description="The text the MLM stage trains on. domain: the corpus (train slice); general: an "
        "out-of-domain control, paragraphs of the Python standard library's docstrings and language reference "
        "(built offline from the running Python); shuffled: the corpus with the words of each text shuffled (its "
        "vocabulary without its sentences). The head fit, the held-out texts and the reference stay the corpus's, "
        "so runs differing only here compare at the same steps.")
    mask_unit: Literal["whole_word", "token"] = Field("whole_word", description="Masking unit of MLM training: "
                                                      "whole_word (all tokens of a selected word; the paper) or "
                                                      "token (tokens selected and replaced independently: the "
                                                      "original BERT's; the paper's Table 7 axis). The head fit "
                                                      "and held-out perplexity always mask whole words.")
    mlm_probability: float = Field(0.15, gt=0, lt=1, description="Share of masking units (words or tokens) "
                                   "selected.")
    mask_replace: float = Field(0.8, ge=0, le=1, description="Of the selected units: share replaced by [MASK].")
    random_replace: float = Field(0.1, ge=0, le=1, description="Of the selected units: share replaced by random "
                                  "tokens (the rest are left unchanged).")
    mlm_steps: int = Field(1000, ge=1, description="MLM optimiser steps.")
    mlm_batch_size: int = Field(32, ge=1, description="MLM sequences per device and step.")
    mlm_gradient_accumulation: int = Field(1, ge=1, description="Batches per MLM optimiser step.")
    mlm_learning_rate: float = Field(1e-4, gt=0, description="Peak learning rate (the paper from scratch: 6e-4 at "
                                     "batch 8192); linear warm-up, then linear decay to 0.")
    mlm_warmup_ratio: float = Field(0.1, ge=0, le=1, description="Share of the steps warming up (the paper: 0.1).")
    mlm_seed: int = Field(0, description="Seed of pretraining (fixed, so --repeats re-runs only the fine-tuning "
                          "on one pretrained model; vary it to measure pretraining variance).")
    head_steps: int = Field(200, ge=0, description="When the base model ships no MLM head (e.g. minilm): steps "
                            "fitting one on the frozen encoder first, so the base model's perplexity is measurable "
                            "and continual training starts from a trained head (0: start from a random head).")
    head_learning_rate: float = Field(1e-3, gt=0, description="Peak learning rate of the head fit.")
    head_batch_size: int = Field(32, ge=1, description="Sequences per device and step of the head fit.")
    eval_max_texts: int = Field(500, ge=1, description="Held-out texts scored for perplexity.")

    @model_validator(mode="after")
    def _consistent(self):
        if self.mask_replace + self.random_replace > 1:
            raise ValueError(f"mask_replace + random_replace = {self.mask_replace + self.random_replace:g} > 1")
        if self.until == "vocab" and self.vocabulary() == "keep":
            raise ValueError("until=vocab needs vocab=train (there is no vocabulary to build with vocab=keep)")
        if self.init == "continual" and self.scratch != Architecture():
            raise ValueError("scratch.* only applies to init=scratch")
        return self

    def vocabulary(self) -> str:
        """The vocabulary choice after defaults: keep (continual) or train (scratch)."""
        return self.vocab or ("keep" if self.init == "continual" else "train")

    def min_vocab_size(self) -> int:
        """The most entries the alphabet can take: each kept character, also as a ##continuation, plus the
        special tokens (the tokenizers trainer adds these whatever the target size)."""
        return len(SPECIAL_TOKENS) + 2 * self.vocab_alphabet_limit
