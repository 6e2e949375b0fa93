"""The `pretrain` strategy: domain-specific pretraining (Gu et al., PubMedBERT) - an in-domain corpus, an
optional in-domain WordPiece vocabulary, whole-word (or token) masking MLM from scratch or continual - then,
with a task, fine-tuning the result against fine-tuning the base model, paired on the same test examples.

Stages: ``pretrain-corpus`` -> ``pretrain-vocab`` (vocab=train) -> ``pretrain-<control>-texts`` (mlm_corpus
general/shuffled) -> ``pretrain-pack`` (the base vocabulary) / ``pretrain-pack-vocab`` (the trained one) /
``pretrain-pack[-vocab]-<control>`` -> ``pretrain-head`` (only when the base model ships no MLM head)
-> ``pretrain-mlm`` -> ``pretrain-evaluate`` (held-out perplexity vs the base model); with a task:
``finetune`` + ``evaluate`` (the baseline, shared with the finetune strategy's cache), ``pretrain-finetune`` +
``pretrain-task-evaluate``, ``pretrain-compare``, ``pretrain-report``. Packing and MLM training are the knowledge
library's public stages (:mod:`kinject.knowledge`: ``pack_stage``, ``mlm_stage``); builders in :mod:`.plan`, configs in
:mod:`.stages`. The run's ``model/`` is the pretrained masked-LM (a task model stays in the stage cache).
"""

from __future__ import annotations

from typing import ClassVar

from kinject.api import Stage, Strategy

from .config import PretrainConfig
from .plan import Resolved, pretraining_stages, resolve, task_stages


class PretrainStrategy(Strategy):
    """Domain pretraining: in-domain corpus and vocabulary, whole-word-masking MLM (scratch or continual)."""

    Config: ClassVar = PretrainConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"corpus"})
    needs_task: ClassVar[bool] = False
    #: Gu et al. 2021, section 3: peak lr 6e-4 with warm-up over 10% of the steps, whole-word masking at 15%,
    #: an uncased WordPiece vocabulary of 30,522 (the budget - 62,500 steps of 8,192 - is not ours to match)
    protocols: ClassVar[dict] = {"paper": {"strategy": {"mlm_learning_rate": 6e-4, "mlm_warmup_ratio": 0.1,
                                                        "mlm_probability": 0.15, "mask_unit": "whole_word",
                                                        "vocab_size": 30522}},
                                 "quick": {"strategy": {"mlm_steps": 20, "head_steps": 10, "mlm_batch_size": 8,
                                                        "head_batch_size": 8, "eval_max_texts": 64,
                                                        "heldout_max_texts": 64, "vocab_size": 2000,
                                                        "corpus_max_texts": 2000},
                                           "training": {"max_steps": 30}}}  # kinject run --quick

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`.plan.resolve`): the corpus source, the task to hold
        out, the lengths and whether the base model needs an MLM head fit."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        stages = pretraining_stages(self.config, run, run.resolved)
        if run.task is None or self.config.until != "all":
            return stages
        return stages + task_stages(self.config, run)
