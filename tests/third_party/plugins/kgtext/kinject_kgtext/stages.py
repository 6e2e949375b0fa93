"""The configs of kgtext's own stages (the pack, MLM and fine-tune stages are the library's)."""

from __future__ import annotations

from kinject.api import SourceRef, StageConfig, TaskRef


class VerbaliseConfig(StageConfig):
    """Write one sentence per triple of ``source`` (``texts.jsonl``) and the entity names (``entities.txt``)."""

    source: SourceRef
    template: str
    max_triples: int | None


class CoverageConfig(StageConfig):
    """How much of the task's evaluation text names an entity of the verbalised graph."""

    task: TaskRef
    texts_stage: str
    split: str
