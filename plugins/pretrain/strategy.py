"""The `pretrain` strategy: domain-specific pretraining (Gu et al., PubMedBERT) - an in-domain corpus, an
optional in-domain WordPiece vocabulary, whole-word (or token) masking MLM from scratch or continual - then,
with a task, fine-tuning the result against fine-tuning the base model, paired on the same test examples. Its
config, what validation resolves, the stage builders and the Strategy class.

Stages: ``pretrain-corpus`` (:mod:`.corpus`) -> ``pretrain-vocab`` (vocab=train, :mod:`.vocab`) ->
``pretrain-<control>-texts`` (mlm_corpus general/shuffled, :mod:`.control`) -> ``pretrain-pack`` (the base
vocabulary) / ``pretrain-pack-vocab`` (the trained one) / ``pretrain-pack[-vocab]-<control>`` -> ``pretrain-head``
(only when the base model ships no MLM head) -> ``pretrain-mlm`` -> ``pretrain-evaluate`` (held-out perplexity vs
the base model, :mod:`.perplexity`); with a task: ``finetune`` + ``evaluate`` (the baseline, shared with the
finetune strategy's cache), ``pretrain-finetune`` + ``pretrain-task-evaluate``, ``pretrain-compare``,
``pretrain-report`` (:mod:`.report`). Packing and MLM training are the knowledge library's public stages
(:mod:`kinject.knowledge`: ``pack_stage``, ``mlm_stage``). The run's ``model/`` is the pretrained masked-LM (a task
model stays in the stage cache).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kinject.api import PluginConfig, SourceRef, SpecError, Stage, Strategy, TaskRef
from kinject.knowledge import MaskingConfig, mlm_model_ref, mlm_stage, pack_stage

from .control import CONTROL_TEXTS, ControlTextsConfig, control_body
from .corpus import CorpusStageConfig, corpus_body
from .perplexity import PerplexityConfig, perplexity_body
from .report import ReportConfig, report_body
from .vocab import SPECIAL_TOKENS, VocabConfig, vocab_body


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


# -- what validate resolves, and the checks ---------------------------------------------------------- #
CORPUS, VOCAB, MLM, EVALUATE = "pretrain-corpus", "pretrain-vocab", "pretrain-mlm", "pretrain-evaluate"
TASK_EVALUATE = "pretrain-task-evaluate"
TRAIN_TEXTS = "train.arrow"  # the corpus stage's training texts: the pack stages' texts file
#: seed of the MLM head fit (pretrain-head): fixed, not mlm_seed, so pretraining seeds share one head stage
HEAD_SEED = 0


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``PretrainStrategy.validate`` resolved for its stages."""

    source: SourceRef  # the corpus
    task_modules: tuple[str, ...]  # the modules of the tasks the corpus reads (their readers' code is keyed)
    exclude: tuple[TaskRef, ...]  # the run's task, when the source does not already hold its test text out
    max_length: int  # tokens per pretraining sequence
    positions: int | None = None  # the longest sequence the pretrained model takes (until=corpus: not needed)
    needs_head: bool = False  # the base model ships no MLM head and head_steps > 0: a head fit comes first


def resolve(run, cfg: PretrainConfig) -> Resolved:
    """Everything that can fail, before any stage: the corpus source (and the task to hold out of it), the
    vocabulary size, a fast tokenizer, the lengths against the positions, whether the base model needs an MLM head
    fit."""
    from kinject.knowledge import missing_mlm_head

    if len(run.sources) > 1:
        raise SpecError(f"sources: pretrain reads one corpus source; put every path and task into one "
                        f"(got {len(run.sources)} sources)")
    source, modules = corpus_source(run)
    length, longest, needs_head = cfg.max_length or run.spec.model.max_length, None, False
    if cfg.until != "corpus":
        if cfg.vocabulary() == "train" and cfg.vocab_size < cfg.min_vocab_size():
            raise SpecError(f"strategy.vocab_size: {cfg.vocab_size} cannot hold the alphabet: up to "
                            f"strategy.vocab_alphabet_limit={cfg.vocab_alphabet_limit} characters, each also as "
                            f"a ##continuation, plus 5 special tokens = {cfg.min_vocab_size()}; raise vocab_size "
                            "or lower vocab_alphabet_limit")
        if not run.model_ref().load_tokenizer().is_fast:
            raise SpecError(f"model.name: {run.spec.model.name!r} has no fast tokenizer (whole-word masking "
                            "needs word ids and offsets)")
        longest = positions(cfg, run)
    if cfg.until == "all":
        check_shape(cfg, run, longest, length)
        needs_head = cfg.head_steps > 0 and bool(missing_mlm_head(mlm_model_ref(run, length)))
    return Resolved(source=source, task_modules=modules, exclude=excluded_tasks(run, source), max_length=length,
                    positions=longest, needs_head=needs_head)


def corpus_source(run) -> tuple[SourceRef, tuple[str, ...]]:
    """The run's corpus source (default: the train/dev text of every task in the data dir, checked here) and the
    modules of the tasks it reads."""
    if run.sources:
        source, ref = run.sources[0], run.source_refs()[0]
    else:
        source = default_corpus(run)
        ref = run.source_ref(source, dataclasses.replace(run.env, limit=None))
    return ref, tuple(source.task_modules(run.env))


def default_corpus(run):
    """The corpus when the run names none: the train/dev text of every task the data dir holds; without any, the
    run's own task's train/dev text (task-adaptive pretraining), announced; neither: one line naming the setting."""
    import logging

    from kinject.api import DataError
    from kinject.knowledge import CorpusSource

    source = CorpusSource(tasks=["all"])
    try:
        source.check(run.env)
        return source
    except DataError:
        if run.task is None:
            raise DataError("pretrain: no corpus given and no task data in the data dir "
                            f"({run.env.data_dir}); add one: --set 'sources=[{{name: corpus, paths: [FILE.txt]}}]'") \
                from None
    own = CorpusSource(tasks=[{"name": run.task.name, **run.task.config.model_dump(mode="json")}])
    try:
        own.check(run.env)
    except DataError as exc:
        raise DataError(f"pretrain: no corpus given, none of the data dir's tasks found, and the task's own text "
                        f"is too little ({exc.reason}); add a corpus: --set "
                        "'sources=[{name: corpus, paths: [FILE.txt]}]'") from None
    logging.getLogger("kinject").info("pretrain: no corpus given and no task data in %s: pretraining on %s's own "
                                      "train/dev text (task-adaptive pretraining; a corpus of your own: --set "
                                      "'sources=[{name: corpus, paths: [FILE.txt]}]')", run.env.data_dir, run.task.name)
    return own


def excluded_tasks(run, source: SourceRef) -> tuple[TaskRef, ...]:
    """The run's task, read in full whatever --limit says, unless the corpus source already holds out every test
    text of it (then the corpus, and all pretraining after it, is shared by runs on other tasks)."""
    from kinject.api import registry
    from kinject.knowledge import HeldOutText

    if run.task is None:
        return ()
    full = dataclasses.replace(run.env, limit=None)
    corpus = source.build()
    splits = tuple(corpus.config.splits)

    def held_out(env) -> HeldOutText:
        texts = HeldOutText()
        texts.add_task(registry("tasks").get(run.task.name)(run.task.config), env, splits)
        return texts

    mine = held_out(full)
    if mine.keys <= corpus.held_out(full).keys:
        return ()
    unseeded = dataclasses.replace(full, seed=0)
    if full.seed != 0 and held_out(unseeded).keys == mine.keys:
        full = unseeded  # the held-out text does not depend on the run seed: --repeats share the pretraining
    return (TaskRef(**TaskRef.of(run.task, full).model_dump()),)


def base_config(run):
    from transformers import AutoConfig

    ref = run.model_ref()
    return AutoConfig.from_pretrained(ref.path, revision=ref.revision)


def positions(cfg: PretrainConfig, run) -> int:
    """The longest sequence the pretrained model will take (scratch.positions, else the base model's)."""
    from kinject.api import usable_positions

    shape = cfg.scratch
    return shape.positions if cfg.init == "scratch" and shape.positions else usable_positions(base_config(run))


def check_shape(cfg: PretrainConfig, run, positions: int, max_length: int) -> None:
    """A from-scratch shape's heads, and the pretraining (and fine-tuning) length against the positions."""
    shape = cfg.scratch
    if cfg.init == "scratch":
        config = base_config(run)
        hidden, heads = shape.hidden or config.hidden_size, shape.heads or config.num_attention_heads
        if hidden % heads:
            raise SpecError(f"strategy.scratch: hidden size {hidden} is not a multiple of {heads} heads")
    where = "strategy.scratch.positions" if cfg.init == "scratch" and shape.positions else \
        f"model {run.spec.model.name!r}"
    checks = [("strategy.max_length" if cfg.max_length else "model.max_length", max_length)]
    if run.task is not None:
        checks.append(("model.max_length", run.spec.model.max_length))
    for field, length in checks:
        if length > positions:
            raise SpecError(f"{field}: {length} is beyond the {positions} positions of {where}")


# -- stage builders ---------------------------------------------------------------------------------- #
def pretraining_stages(cfg: PretrainConfig, run, resolved: Resolved) -> list[Stage]:
    """corpus -> vocab -> pack -> head -> mlm -> evaluate (as far as ``until`` goes)."""
    stages = [Stage(name=CORPUS, body=corpus_body, code=resolved.task_modules,
                    artifacts=("corpus.json", "heldout.jsonl"),
                    config=CorpusStageConfig(source=resolved.source, exclude=list(resolved.exclude),
                                             heldout_fraction=cfg.heldout_fraction,
                                             heldout_max_texts=cfg.heldout_max_texts,
                                             max_texts=cfg.corpus_max_texts))]
    if cfg.until == "corpus":
        return stages
    vocab = VOCAB if cfg.vocabulary() == "train" else None
    if vocab:
        stages.append(Stage(name=vocab, body=vocab_body, inputs=(CORPUS,), artifacts=("tokenizer",),
                            config=VocabConfig(corpus_stage=CORPUS, size=cfg.vocab_size,
                                               min_frequency=cfg.vocab_min_frequency,
                                               alphabet_limit=cfg.vocab_alphabet_limit, lowercase=cfg.vocab_lowercase,
                                               model_max_length=resolved.positions)))
    if cfg.until == "vocab":
        return stages
    length = resolved.max_length
    # "pretrain-pack": the base vocabulary (the head fit, and the MLM with vocab=keep), so the head fit is the same
    # stage whatever the run's vocabulary; "pretrain-pack-vocab": the trained vocabulary; a control
    # (mlm_corpus general/shuffled) packs its own texts for the MLM: "pretrain-pack[-vocab]-<control>"
    domain = cfg.mlm_corpus == "domain"
    control = None if domain else control_stage(cfg)
    stages += [control] if control else []
    packs = {}
    if resolved.needs_head or (domain and not vocab):
        packs["base"] = pack_stage(run, "pretrain-pack", CORPUS, TRAIN_TEXTS, max_length=length)
    if domain and vocab:
        packs["vocab"] = pack_stage(run, "pretrain-pack-vocab", CORPUS, TRAIN_TEXTS, vocab_stage=vocab,
                                    max_length=length)
    if control:
        packs["control"] = pack_stage(run, f"pretrain-pack{'-vocab' if vocab else ''}-{cfg.mlm_corpus}",
                                      control.name, CONTROL_TEXTS, vocab_stage=vocab, max_length=length)
    stages += packs.values()
    masking = MaskingConfig(unit=cfg.mask_unit, probability=cfg.mlm_probability, mask_replace=cfg.mask_replace,
                            random_replace=cfg.random_replace)
    budget = dict(gradient_accumulation=cfg.mlm_gradient_accumulation, warmup_ratio=cfg.mlm_warmup_ratio)
    head = None
    if resolved.needs_head:  # seeded apart from mlm_seed, whole words: every pretraining run starts from one head fit
        head = mlm_stage(run, "pretrain-head", packs["base"], cfg.head_steps, cfg.head_learning_rate,
                         cfg.head_batch_size, mode="head", seed=HEAD_SEED,
                         masking=masking.model_copy(update={"unit": "whole_word"}), **budget)
        stages.append(head)
    mlm_pack = packs.get("control") or packs.get("vocab") or packs["base"]
    stages.append(mlm_stage(run, MLM, mlm_pack, cfg.mlm_steps, cfg.mlm_learning_rate, cfg.mlm_batch_size,
                            mode=cfg.init, start_stage=head if cfg.init == "continual" else None,
                            scratch=cfg.scratch.model_dump() if cfg.init == "scratch" else None, seed=cfg.mlm_seed,
                            allow_random_head=cfg.head_steps == 0, produces_model=True, masking=masking,
                            epochs=run.knowledge_epochs, **budget))
    reference, texts = head.name if head else None, control.name if control else None
    perplexity = PerplexityConfig(corpus_stage=CORPUS, model_stage=MLM, reference=mlm_model_ref(run, length),
                                  reference_stage=reference, texts_stage=texts, max_length=length,
                                  probability=cfg.mlm_probability, texts=cfg.eval_max_texts,
                                  batch_size=run.spec.training.eval_batch_size)
    stages.append(Stage(name=EVALUATE, body=perplexity_body, config=perplexity,
                        inputs=tuple(s for s in (CORPUS, MLM, reference, texts) if s)))
    return stages


def control_stage(cfg: PretrainConfig) -> Stage:
    """The texts stage of an MLM control (``pretrain-general-texts``, ``pretrain-shuffled-texts``)."""
    import platform

    general = cfg.mlm_corpus == "general"
    config = ControlTextsConfig(kind=cfg.mlm_corpus, corpus_stage=None if general else CORPUS,
                                python=platform.python_version() if general else None,
                                seed=0 if general else cfg.mlm_seed)  # shuffled: each pretraining seed shuffles anew
    return Stage(name=f"pretrain-{cfg.mlm_corpus}-texts", body=control_body, config=config,
                 inputs=() if general else (CORPUS,))


def run_label(cfg: PretrainConfig) -> str:
    """The arm's name in comparisons, leaderboards and the card: ``pretrain`` for continual pretraining on the
    domain corpus (the strategy's default), else ``pretrain/`` and what differs: the start (``scratch``), the MLM's
    corpus (``pretrain/general``: the out-of-domain control) and the masking unit (``pretrain/scratch+token``)."""
    differs = [*(["scratch"] if cfg.init == "scratch" else []),
               *([cfg.mlm_corpus] if cfg.mlm_corpus != "domain" else []), *(["token"] if cfg.mask_unit == "token" else [])]
    return "pretrain/" + "+".join(differs) if differs else "pretrain"


def task_stages(cfg: PretrainConfig, run) -> list[Stage]:
    """Fine-tune the base model (the finetune strategy's stages and keys) and the pretrained one, compare them
    paired, and report; the task models stay in the cache (the run's model/ is the pretrained encoder)."""
    from kinject.training import evaluate_stage, finetune_stage
    from kinject.evidence import compare_stage

    return [dataclasses.replace(finetune_stage(run), produces_model=False),
            evaluate_stage(run, "finetune", export=False),
            dataclasses.replace(finetune_stage(run, "pretrain-finetune", init_from=MLM), produces_model=False),
            evaluate_stage(run, "pretrain-finetune", name=TASK_EVALUATE),
            compare_stage(run, baseline="evaluate", other=TASK_EVALUATE, name="pretrain-compare",
                          labels=("finetune", run_label(cfg))),
            Stage(name="pretrain-report", body=report_body, inputs=(EVALUATE, TASK_EVALUATE),
                  config=ReportConfig(perplexity_stage=EVALUATE, task_stage=TASK_EVALUATE))]


# -- the strategy ------------------------------------------------------------------------------------ #
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

    @staticmethod
    def label(config: PretrainConfig) -> str:
        """The arm's name (:func:`run_label`)."""
        return run_label(config)

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage (:func:`resolve`): the corpus source, the task to hold
        out, the lengths and whether the base model needs an MLM head fit."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        stages = pretraining_stages(self.config, run, run.resolved)
        if run.task is None or self.config.until != "all":
            return stages
        return stages + task_stages(self.config, run)
