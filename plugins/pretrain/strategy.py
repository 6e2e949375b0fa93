"""The `pretrain` strategy: domain-specific pretraining (Gu et al., PubMedBERT) - an in-domain corpus, an
optional in-domain WordPiece vocabulary, whole-word-masking MLM from scratch or continual - then, with a
task, fine-tuning the result against fine-tuning the base model, paired on the same test examples.

Stages: ``pretrain-corpus`` -> ``pretrain-vocab`` (vocab=train) -> ``pretrain-pack`` (the base vocabulary) /
``pretrain-pack-vocab`` (the trained one) -> ``pretrain-head`` (only when the base model ships no MLM head)
-> ``pretrain-mlm`` -> ``pretrain-evaluate`` (held-out perplexity vs the base model); with a task:
``finetune`` + ``evaluate`` (the baseline, shared with the finetune strategy's cache), ``pretrain-finetune`` +
``pretrain-task-evaluate``, ``pretrain-compare``, ``pretrain-report``. The run's ``model/`` is the pretrained
masked-LM (a task model stays in the stage cache), so other strategies take ``--model <run>/model``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from kinject.api import SpecError, Stage, Strategy

from .config import PretrainConfig
from .stages import (CorpusStageConfig, MaskingConfig, MlmConfig, PackConfig, PerplexityConfig, ReportConfig,
                     VocabConfig, corpus_body, mlm_body, pack_body, perplexity_body, report_body, vocab_body)

#: seed of the MLM head fit (pretrain-head): fixed, not mlm_seed, so pretraining seeds share one head stage
HEAD_SEED = 0


class PretrainStrategy(Strategy):
    """Domain pretraining: in-domain corpus and vocabulary, whole-word-masking MLM (scratch or continual)."""

    Config: ClassVar = PretrainConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"corpus"})
    needs_task: ClassVar[bool] = False

    # -- validation (runs in prepare, before any stage) ----------------------------------------- #
    def validate(self, run) -> None:
        super().validate(run)
        cfg = self.config
        if len(run.sources) > 1:
            raise SpecError(f"sources: pretrain reads one corpus source; put every path and task into one "
                            f"(got {len(run.sources)} sources)")
        self._source(run)
        if cfg.until == "corpus":
            return
        if cfg.vocabulary() == "train" and cfg.vocab_size < cfg.min_vocab_size():
            raise SpecError(f"strategy.vocab_size: {cfg.vocab_size} cannot hold the alphabet: up to "
                            f"strategy.vocab_alphabet_limit={cfg.vocab_alphabet_limit} characters, each also as a "
                            f"##continuation, plus 5 special tokens = {cfg.min_vocab_size()}; raise vocab_size or "
                            "lower vocab_alphabet_limit")
        tokenizer = run.model_ref().load_tokenizer()
        if not tokenizer.is_fast:
            raise SpecError(f"model.name: {run.spec.model.name!r} has no fast tokenizer (whole-word masking needs "
                            "word ids and offsets)")
        if cfg.until == "vocab":
            return
        config = self._base_config(run)
        shape = cfg.scratch
        if cfg.init == "scratch":
            hidden = shape.hidden or config.hidden_size
            heads = shape.heads or config.num_attention_heads
            if hidden % heads:
                raise SpecError(f"strategy.scratch: hidden size {hidden} is not a multiple of {heads} heads")
        positions = self.positions(run)
        where = "strategy.scratch.positions" if cfg.init == "scratch" and shape.positions else \
            f"model {run.spec.model.name!r}"
        checks = [("strategy.max_length" if cfg.max_length else "model.max_length", self.max_length(run))]
        if run.task is not None:
            checks.append(("model.max_length", run.spec.model.max_length))
        for field, length in checks:
            if length > positions:
                raise SpecError(f"{field}: {length} is beyond the {positions} positions of {where}")

    def max_length(self, run) -> int:
        """Tokens per pretraining sequence."""
        return self.config.max_length or run.spec.model.max_length

    def base_ref(self, run):
        """The base model as pretraining stages hold it: the pretraining length; fine-tuning-only settings
        (pooling) left out, so runs for different tasks share their pretraining."""
        from kinject.api import ModelRef

        update = {"max_length": self.max_length(run), "pooling": "cls"}
        return run.model_ref().model_copy(update={k: v for k, v in update.items() if k in ModelRef.model_fields})

    def positions(self, run) -> int:
        """The longest sequence the pretrained model will take (scratch.positions, else the base model's)."""
        from .mlm import usable_positions

        shape = self.config.scratch
        return shape.positions if self.config.init == "scratch" and shape.positions else \
            usable_positions(self._base_config(run))

    def _base_config(self, run):
        from transformers import AutoConfig

        ref = run.model_ref()
        return AutoConfig.from_pretrained(ref.path, revision=ref.revision)

    def _source(self, run):
        """The run's corpus source reference (default: the train/dev text of every task in the data dir)."""
        if "source" not in self.__dict__:
            from kinject.api import SourceRef
            from kinject.plugins.knowledge.sources.corpus import CorpusSource

            if run.sources:
                source, ref = run.sources[0], run.source_refs()[0]
            else:
                source = CorpusSource(tasks=["all"])
                source.check(run.env)
                ref = SourceRef.of(source, dataclasses.replace(run.env, limit=None))
            self.__dict__["source"] = (ref, tuple(source.task_modules(run.env)))
        return self.__dict__["source"]

    def _covers_task(self, run) -> bool:
        """Whether the corpus source already holds out every test text of the run's task (then the corpus,
        and all pretraining after it, does not depend on the task and is shared by runs on other tasks)."""
        from kinject.api import registry
        from kinject.plugins.knowledge.sources.corpus import HeldOutText

        source = self._source(run)[0].build()
        env = dataclasses.replace(run.env, limit=None)
        task = registry("tasks").get(run.task.name)(run.task.config)
        mine = HeldOutText()
        mine.add_task(task, env, tuple(source.config.splits))
        return mine.keys <= source.held_out(env).keys

    # -- stage builders ------------------------------------------------------------------------ #
    def _needs_head(self, run) -> bool:
        if self.config.head_steps == 0:
            return False
        if "needs_head" not in self.__dict__:
            from .mlm import load_mlm

            ref = self.base_ref(run)
            self.__dict__["needs_head"] = bool(load_mlm(ref.path, ref.revision, ref.attn_implementation)[1])
        return self.__dict__["needs_head"]

    def _mlm_config(self, run, mode: str, steps: int, learning_rate: float, batch_size: int, pack: str,
                    vocab_stage: str | None, start_stage: str | None, seed: int) -> MlmConfig:
        cfg, training = self.config, run.spec.training
        spec = training.for_training().model_copy(update=dict(
            epochs=1.0, max_steps=steps, learning_rate=learning_rate, batch_size=batch_size,
            gradient_accumulation_steps=cfg.mlm_gradient_accumulation, warmup_ratio=cfg.mlm_warmup_ratio,
            group_by_length=False, eval_steps=None,
            # fine-tuning-only settings (a task's recommended values set them): not the pretraining's, not in its key
            head_learning_rate=None, min_steps=None))
        scratch = cfg.scratch.model_dump() if mode == "scratch" else {}
        return MlmConfig(model=self.base_ref(run), mode=mode, scratch=scratch,
                         vocab_stage=vocab_stage, start_stage=start_stage, pack_stage=pack,
                         max_length=self.max_length(run), training=spec, seed=seed,
                         masking=MaskingConfig(probability=cfg.mlm_probability, mask_replace=cfg.mask_replace,
                                               random_replace=cfg.random_replace))

    def pretraining_stages(self, run) -> list[Stage]:
        """corpus -> vocab -> pack -> head -> mlm -> evaluate (as far as ``until`` goes)."""
        from kinject.api import TaskRef

        cfg = self.config
        source, modules = self._source(run)
        exclude = []
        if run.task is not None and not self._covers_task(run):
            # the run's own test text, read in full whatever --limit says, by a fresh task instance
            full = dataclasses.replace(run.env, limit=None)
            exclude = [TaskRef(**TaskRef.of(run.task, full).model_dump())]
        stages = [Stage(name="pretrain-corpus", body=corpus_body, code=modules,
                        artifacts=("corpus.json", "heldout.jsonl"),
                        config=CorpusStageConfig(source=source, exclude=exclude, heldout_fraction=cfg.heldout_fraction,
                                                 heldout_max_texts=cfg.heldout_max_texts))]
        if cfg.until == "corpus":
            return stages
        vocab = "pretrain-vocab" if cfg.vocabulary() == "train" else None
        max_length = self.max_length(run)
        if vocab:
            stages.append(Stage(name=vocab, body=vocab_body, inputs=("pretrain-corpus",), artifacts=("tokenizer",),
                                config=VocabConfig(size=cfg.vocab_size, min_frequency=cfg.vocab_min_frequency,
                                                   alphabet_limit=cfg.vocab_alphabet_limit,
                                                   lowercase=cfg.vocab_lowercase,
                                                   model_max_length=self.positions(run))))
        if cfg.until == "vocab":
            return stages
        head = "pretrain-head" if self._needs_head(run) else None
        # "pretrain-pack": the base vocabulary (the head fit, and the MLM with vocab=keep), so the head fit is
        # the same stage whatever the run's vocabulary; "pretrain-pack-vocab": the trained vocabulary
        if head or not vocab:
            stages.append(Stage(name="pretrain-pack", body=pack_body, inputs=("pretrain-corpus",),
                                config=PackConfig(model=self.base_ref(run), max_length=max_length)))
        pack = "pretrain-pack"
        if vocab:
            pack = "pretrain-pack-vocab"
            stages.append(Stage(name=pack, body=pack_body, inputs=("pretrain-corpus", vocab),
                                config=PackConfig(vocab_stage=vocab, max_length=max_length)))
        if head:
            # seeded apart from mlm_seed: every pretraining seed starts from (and is measured against) one head fit
            stages.append(Stage(name=head, body=mlm_body, inputs=("pretrain-pack",), config=self._mlm_config(
                run, "head", cfg.head_steps, cfg.head_learning_rate, cfg.head_batch_size, "pretrain-pack", None,
                None, seed=HEAD_SEED)))
        start = head if cfg.init == "continual" else None
        stages.append(Stage(name="pretrain-mlm", body=mlm_body, produces_model=True,
                            inputs=tuple(s for s in (pack, vocab, start) if s),
                            config=self._mlm_config(run, cfg.init, cfg.mlm_steps, cfg.mlm_learning_rate,
                                                    cfg.mlm_batch_size, pack, vocab, start, seed=cfg.mlm_seed)))
        stages.append(Stage(name="pretrain-evaluate", body=perplexity_body,
                            inputs=tuple(s for s in ("pretrain-corpus", "pretrain-mlm", head) if s),
                            config=PerplexityConfig(reference=self.base_ref(run), reference_stage=head,
                                                    max_length=max_length, probability=cfg.mlm_probability,
                                                    texts=cfg.eval_max_texts,
                                                    batch_size=run.spec.training.eval_batch_size)))
        return stages

    def stages(self, run) -> list[Stage]:
        from kinject.plugins.evidence.stage import compare_stage
        from kinject.api import evaluate_stage, finetune_stage

        stages = self.pretraining_stages(run)
        if run.task is None or self.config.until != "all":
            return stages
        # the task models stay in the cache: the run's model/ is the pretrained encoder
        stages += [dataclasses.replace(finetune_stage(run), produces_model=False),
                   evaluate_stage(run, "finetune", export=False),
                   dataclasses.replace(finetune_stage(run, "pretrain-finetune", init_from="pretrain-mlm"),
                                       produces_model=False),
                   evaluate_stage(run, "pretrain-finetune", name="pretrain-task-evaluate"),
                   compare_stage(run, baseline="evaluate", other="pretrain-task-evaluate", name="pretrain-compare",
                                 labels=(run.spec.model.name, f"pretrain-{self.config.init}")),
                   Stage(name="pretrain-report", body=report_body,
                         inputs=("pretrain-evaluate", "pretrain-task-evaluate"),
                         config=ReportConfig(perplexity_stage="pretrain-evaluate", task_stage="pretrain-task-evaluate"))]
        return stages
