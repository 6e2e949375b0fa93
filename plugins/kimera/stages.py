"""KIMERA's stage configs: what each stage's key holds, including the names of the stages it reads.

The bodies live by concern: :mod:`.search` (kimera-mask-hard/soft), :mod:`.masks` (kimera-mask-random, a given
mask), :mod:`.retrain` (kimera-retrain), :mod:`.pruning` (kimera-pruned-encoder), :mod:`.search_report`
(kimera-search-report), :mod:`.report` (kimera-report).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kinject.api import NOT_KEYED, ModelRef, SourceRef, StageConfig, TaskRef

SEARCH_ROUNDS = 4  # a mask search's rounds, for its time estimate before it runs (CAPR's: docs/benchmarks.md)


class ScoringConfig(StageConfig):
    """The importance scoring set and the metric the mask search watches."""

    task: TaskRef
    split: str
    examples: int | None  # None: the whole split
    importance_examples: int | None = None  # importance on the first N of them (None: all)
    batch_size: int
    metric: str
    max_length: int
    attn: str = "sdpa"
    seed: int | None = None  # None: the first `examples`; else a seeded random draw of whole groups
    bf16: bool = False  # importance and metric passes under bfloat16 autocast (training.bf16; same masks, 1.3x)

    def flops(self, run, rounds: int) -> float:
        """``rounds`` of importance (forward + backward on the first importance_examples) and metric passes."""
        from kinject.training import scored_flops

        every = scored_flops(run, self.task, self.split, self.max_length, self.examples)
        first = scored_flops(run, self.task, self.split, self.max_length, self.importance_examples or self.examples)
        return rounds * (every + 2 * first)


class MaskConfig(StageConfig):
    """The iterative mask search on a fine-tuned task model."""

    kind: Literal["hard", "soft"]
    tau: float
    rho: float
    max_rounds: int
    scoring: ScoringConfig
    finetuned_model: ModelRef | None = None  # a given task model instead of model_stage's
    model_stage: str | None = None  # the input stage whose model/ is scored (None: finetuned_model)

    def cost(self, run) -> float:
        return self.scoring.flops(run, min(self.max_rounds + 1, SEARCH_ROUNDS))


class SearchReportConfig(StageConfig):
    """Each mask-search round's metric minus the unmasked round's, with a paired bootstrap interval."""

    task: TaskRef
    search_stage: str  # the input stage whose search.json and round predictions are read
    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0


class RandomMaskConfig(StageConfig):
    """The random control: the hard mask's count of redundant heads, placed with ``seed``."""

    seed: int
    mask_stage: str  # the input stage whose masks.json holds the searched hard mask


class GivenMaskConfig(StageConfig):
    """A mask given by the user (strategy.mask_file): keyed by its values, not by where it came from."""

    kind: Literal["hard", "soft"]
    masks: dict[str, list[list[float]]]  # the kind's mask (+ the first-round importance, when the file has it)
    path: str = Field(json_schema_extra=NOT_KEYED)


class RetrainConfig(StageConfig):
    """Multi-task KG retraining of the pre-trained encoder (or a random init) under a head mask."""

    model: ModelRef
    seed: int
    mask: Literal["none", "hard", "soft"]
    mask_stage: str | None = None  # the input stage whose masks.json holds the mask (None: mask none)
    forward_mask: bool
    from_scratch: bool
    source: SourceRef
    kg: dict  # the kg_* fields of the KIMERA config
    alphas: dict[str, float]
    task_sampling: Literal["proportional", "uniform"] = "proportional"
    pooling: str
    other_params: str
    weight_decay: float
    warmup_ratio: float
    bf16: bool
    save_steps: int = Field(500, json_schema_extra=NOT_KEYED)  # checkpoint interval (what --resume restarts from)

    def cost(self, run) -> float:
        from kinject.training import trained_flops

        steps = self.kg["kg_steps"]
        if self.kg.get("kg_epochs"):  # epochs of the graph's rows: at most kg_max_triples of them
            steps = self.kg["kg_epochs"] * (self.kg.get("kg_max_triples") or 20000) / self.kg["kg_batch_size"]
        return trained_flops(run, steps, self.kg["kg_batch_size"], self.kg["kg_max_length"] / 2)  # triples: ~half


class PrunedConfig(StageConfig):
    """The pre-trained encoder with the hard mask's redundant heads removed."""

    model: ModelRef
    mask_stage: str  # the input stage whose masks.json holds the hard mask


class ReportConfig(StageConfig):
    """Head importance of the final model against the mask and the first-round importance."""

    kind: Literal["hard", "soft"]
    scoring: ScoringConfig
    mask_stage: str  # the input stage whose masks.json holds the mask and the first-round importance
    model_stage: str  # the input stage whose model/ (the KIMERA task model) is scored

    def cost(self, run) -> float:
        return self.scoring.flops(run, 1)
