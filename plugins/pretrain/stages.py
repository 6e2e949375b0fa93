"""The pretrain strategy's own stage configs (what each key holds). Packing and MLM training are the knowledge
library's public stages (:mod:`kinject.knowledge`: ``pack_stage``, ``mlm_stage``); the bodies are in :mod:`.corpus`, :mod:`.vocab`,
:mod:`.control`, :mod:`.perplexity` and :mod:`.report`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import NOT_KEYED, ModelRef, SourceRef, StageConfig, TaskRef


class CorpusStageConfig(StageConfig):
    """Stream the corpus source, drop test text, split off a held-out slice (``train.arrow``, ``heldout.arrow``)."""

    source: SourceRef
    exclude: list[TaskRef] = Field(default_factory=list, description="Tasks whose test text is also removed "
                                   "(the run's own task).")
    heldout_fraction: float
    heldout_max_texts: int
    max_texts: int | None = None  # stop after this many texts (a quick try)


class VocabConfig(StageConfig):
    """An uncased WordPiece vocabulary trained on the ``train.arrow`` texts of ``corpus_stage``."""

    corpus_stage: str
    size: int
    min_frequency: int
    alphabet_limit: int
    lowercase: bool
    model_max_length: int


class ControlTextsConfig(StageConfig):
    """The texts of an MLM control (``texts.txt``, a text a line; ``control.json``): ``general`` - paragraphs of the
    docstrings and language reference of the standard library of Python ``python`` (the running one); ``shuffled``
    - the ``train.arrow`` texts of ``corpus_stage`` with each text's words shuffled (seeded by ``seed``)."""

    kind: Literal["general", "shuffled"]
    corpus_stage: str | None = None
    python: str | None = None
    min_chars: int = 40
    seed: int = 0


class PerplexityConfig(StageConfig):
    """Held-out perplexity of the model of ``model_stage`` vs the reference (the base model, with its fitted head
    when ``reference_stage``), on the ``heldout.arrow`` texts of ``corpus_stage``; with ``texts_stage`` (a control
    whose texts the model was trained on) its ``control.json`` is reported too."""

    corpus_stage: str
    model_stage: str
    reference: ModelRef
    reference_stage: str | None = None
    texts_stage: str | None = None
    max_length: int
    probability: float
    texts: int
    seed: int = 0
    batch_size: int = Field(16, json_schema_extra=NOT_KEYED)


class ReportConfig(StageConfig):
    """The run's metrics with a task: the task metrics of ``task_stage`` and those of ``perplexity_stage``."""

    perplexity_stage: str
    task_stage: str
