"""The `kimera` strategy: head importance and mask -> KG retraining under the mask -> fine-tune -> evaluate.

Stages (each cached): ``finetune`` + ``evaluate`` (phase 1, shared with the finetune baseline and evaluated as the
baseline), ``kimera-mask-<kind>`` (importance + iterative mask search) + ``kimera-search-report`` (each round's
paired interval), ``kimera-retrain`` (multi-task KG training from the pre-trained model), ``kimera-finetune`` +
``kimera-evaluate`` (phase 3), ``kimera-report`` (heatmaps, table 3) and ``kimera-compare`` (KIMERA vs the
phase-1 baseline, paired over the same test examples). Baselines in the same plugin: ``variant: finetune`` and
``variant: pruned`` (the hard mask's heads physically removed with ``prune_heads``, then fine-tuned and
evaluated). Controls: ``variant: random`` (``kimera-mask-random``: the searched hard mask's count of redundant
heads at random places), ``mask_file`` (a given mask instead of the search), ``until: mask``, ``score_seed``,
``retrain_seed`` and ``kg_heldout`` (docs/kimera.md).

This module holds the config, the checks ``validate`` runs and the stage builders. Each stage's body and config live
in a module of their own (:mod:`.search`, :mod:`.masks`, :mod:`.retrain`, :mod:`.pruning`, :mod:`.search_report`,
:mod:`.report`), imported when the stage is built, so loading the strategy (``kinject info``) imports no torch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from kinject.api import FILE_PATH, DataError, PluginConfig, SourceRef, SpecError, Stage, Strategy
from kinject.training import evaluate_stage, finetune_stage

log = logging.getLogger("kinject")

PHASE1 = "finetune"  # the phase-1 task model (the finetune baseline's stage and key)
RETRAIN, FINETUNE, EVALUATE = "kimera-retrain", "kimera-finetune", "kimera-evaluate"
PRUNED, PRUNED_FINETUNE, PRUNED_EVALUATE = "kimera-pruned-encoder", "kimera-pruned-finetune", "kimera-pruned-evaluate"
SEARCH_REPORT, REPORT = "kimera-search-report", "kimera-report"


# -- the config ------------------------------------------------------------------------------------------------ #
Variant = Literal["finetune", "pruned", "no-mask", "hard", "soft", "b+f", "random", "from-scratch"]

# variant -> (mask, forward_mask, from_scratch); finetune / pruned do no KG retraining
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "no-mask": ("none", False, False),
    "hard": ("hard", False, False),
    "soft": ("soft", False, False),
    "b+f": ("hard", True, False),
    "random": ("hard", False, False),  # the searched hard mask's count of redundant heads, placed at random
    "from-scratch": ("none", False, True),
}


class TaskWeights(PluginConfig):
    """Loss weights alpha_i of the KG tasks (0 disables a task)."""

    entity: float = Field(1.0, ge=0, description="Entity prediction (MLM over the masked entity's tokens).")
    relation: float = Field(1.0, ge=0, description="Relation prediction (multi-class).")
    triplet: float = Field(1.0, ge=0, description="Triplet classification (binary, corrupted negatives).")


class KimeraConfig(PluginConfig):
    variant: Variant = Field("hard", description="finetune (baseline), pruned (hard mask applied, then "
                             "fine-tuned), or a KIMERA retraining: no-mask, hard, soft, b+f (hard mask in the "
                             "backward and forward pass), random (control: as many redundant heads as the searched "
                             "hard mask, chosen uniformly at random with mask_seed), from-scratch (random init, KG "
                             "training only).")
    mask: Literal["none", "hard", "soft"] | None = Field(
        None, description="Head mask scaling the retraining updates by (1 - m); default: from the variant.")
    forward_mask: bool | None = Field(
        None, description="Also gate heads in the retraining forward pass (gate 1 - m: only retrained heads "
        "carry the KG predictions); default: from the variant.")
    from_scratch: bool | None = Field(None, description="Start retraining from a random init; default: from the "
                                      "variant.")
    finetuned_model: str | None = Field(
        None, description="A model already fine-tuned on the task to score heads with (skips phase-1 fine-tuning).")
    tau: float = Field(0.95, gt=0, le=1, description="Stop masking when the metric falls below tau x the "
                       "unmasked metric (paper: 0.95, 0.98 or 0.99).")
    rho: float = Field(0.1, gt=0, le=1, description="Proportion of the heads masked per round (of rho_of).")
    rho_of: Literal["all", "active"] = Field(
        "all", description="What rho is a share of: all heads (HF bertology's run_prune.py: round(rho x 72) = 7 "
        "heads a round for minilm) or the still-active heads (smaller steps near the threshold, about twice the "
        "rounds: 17 against 8 in the headline's search; docs/kimera.md).")
    max_rounds: int = Field(40, ge=1, description="Cap on masking rounds.")
    score_split: str | None = Field(None, description="Split scored for head importance and the mask search "
                                    "(default: the task's first evaluation split, e.g. dev).")
    score_examples: int | None = Field(500, ge=2, description="Cap on the scoring set the search metric is "
                                       "measured on: the first N examples of score_split (retrieval tasks: whole "
                                       "candidate groups, so roughly N pairs: 50 CAPR queries of 10 candidates); "
                                       "None: the whole split (CAPR dev: 1000 pairs at the default 100 queries, a "
                                       "round ~2x the cost of the default; docs/kimera.md).")
    importance_examples: int | None = Field(250, ge=1, description="Head importance (forward+backward) on the first "
                                            "N examples of the scoring set (whole groups); the rest only runs "
                                            "forward for the metric. None: importance on the whole scoring set.")
    score_batch_size: int = Field(32, ge=1, description="Batch size of importance scoring.")
    search_metric: str | None = Field(None, description="Metric the search watches (default: the task's selection "
                                      "metric: mrr for retrieval tasks, else the primary metric); higher must be better.")
    kg_steps: int = Field(100, ge=1, description="KG retraining optimiser steps (the retraining budget).")
    kg_batch_size: int = Field(16, ge=1, description="KG retraining batch size.")
    kg_token_budget: int | None = Field(None, ge=16, le=1_000_000, description="Token-budget batching: each KG batch "
                                        "holds as many rows as fit this many padded tokens (short rows pack into "
                                        "larger batches, fewer steps per epoch); None: kg_batch_size rows per batch. "
                                        "Changes the optimisation (batch size and steps): docs/kimera.md.")
    kg_learning_rate: float = Field(5e-5, gt=0, description="KG retraining peak learning rate.")
    kg_max_length: int = Field(64, ge=16, description="Tokens per KG sequence (entity caps shrink to fit).")
    kg_max_triples: int | None = Field(20000, ge=1, description="Use the first N triples of the source "
                                       "(None: all). --limit does not cap the KG.")
    alphas: TaskWeights = Field(default_factory=TaskWeights, description="KG task loss weights.")
    task_sampling: Literal["proportional", "uniform"] = Field(
        "proportional", description="Which KG task a batch comes from: proportional (every batch of every task "
        "once per epoch, shuffled: task i is drawn with probability pi_i ~ its size, so the expected loss is "
        "sum pi_i alpha_i L_i) or uniform (tasks take turns, smaller tasks repeat: each task is equally likely, "
        "the expected loss is sum alpha_i L_i / n, the paper's Eq. 4).")
    pooling: Literal["cls", "mean", "max", "learned"] = Field("cls", description="Pooling for the relation and "
                                                               "triplet heads.")
    other_params: Literal["train", "freeze"] = Field(
        "train", description="Non-attention encoder parameters (FFN, embeddings, LayerNorm, O bias) during "
        "retraining: train (at the full rate) or freeze.")
    analysis: bool = Field(True, description="Score heads again after KIMERA and write heatmaps and tables.")
    # -- controls for experiments (docs/kimera.md) -- #
    mask_seed: int = Field(0, description="variant random: seed of the random choice of redundant heads (the "
                           "kimera-mask-random stage; independent of the run seed).")
    score_seed: int | None = Field(None, description="None: the scoring set is the first score_examples examples "
                                   "of score_split; an int: a seeded random draw of them (whole candidate groups "
                                   "for retrieval tasks), so masks can be searched on different samples and "
                                   "compared (kimera.masks.redundant_overlap).")
    mask_file: str | None = Field(None, description="A masks.json of an earlier KIMERA run (its run directory's "
                                  "masks.json, or the directory): use its mask instead of searching one. The mask "
                                  "stage is then keyed by the mask's values only, so runs on other tasks or seeds "
                                  "share it, and the retraining after it (the paper: one mask for all evaluations).",
                                  json_schema_extra=FILE_PATH)
    until: Literal["mask", "all"] = Field("all", description="mask: stop after the mask search (phase-1 fine-tune, "
                                          "kimera-mask-<kind> and its kimera-search-report; masks.json and "
                                          "search.json go into the run directory), e.g. to search masks on several "
                                          "score_seed; all: the whole pipeline.")
    retrain_seed: int | None = Field(None, description="Seed of the KG retraining stage (None: the run seed). "
                                     "Fixed, runs that differ only in seed (--repeats) share one kimera-retrain stage "
                                     "when its mask does not depend on the seed either (no mask, or mask_file) and "
                                     "vary only phase 3.")
    kg_heldout: int = Field(0, ge=0, description="Triples held out of KG retraining (drawn with the retraining "
                            "seed among the distinct triples of the first kg_max_triples). > 0: after "
                            "retraining, retrain.json `heldout` has the relation-prediction and triplet-classification "
                            "accuracy of the trained KG heads on them (negatives corrupted as in training) next to "
                            "their majority and chance levels: the positive control that knowledge went in.")

    @model_validator(mode="after")
    def _consistent(self):
        if self.variant in ("finetune", "pruned"):
            set_fields = [f for f in ("mask", "forward_mask", "from_scratch", "retrain_seed")
                          if getattr(self, f) is not None]
            set_fields += ["kg_heldout"] if self.kg_heldout else []
            if set_fields:
                raise ValueError(f"{', '.join(set_fields)} only apply to retraining variants, not {self.variant!r}")
            self._check_mask_controls("hard" if self.variant == "pruned" else "none")
            return self
        mask, forward, _ = self.settings()
        if forward and mask == "none":
            raise ValueError("forward_mask needs a mask (mask: hard or soft)")
        if self.variant == "random" and mask != "hard":
            raise ValueError(f"mask: the random variant draws a hard mask (got mask={mask!r})")
        if sum(v for v in self.alphas.model_dump().values()) == 0:
            raise ValueError("alphas: every KG task is disabled")
        if self.kg_heldout and not (self.alphas.relation or self.alphas.triplet):
            raise ValueError("kg_heldout: the held-out triples are scored by the relation and triplet heads, and "
                             "alphas disable both")
        self._check_mask_controls(mask)
        return self

    def _check_mask_controls(self, mask: str) -> None:
        """until / mask_file / score_seed need a mask that is searched or given."""
        if mask == "none":
            used = [f for f in ("mask_file", "score_seed") if getattr(self, f) is not None]
            used += ["until"] if self.until == "mask" else []
            if used:
                raise ValueError(f"{', '.join(used)}: variant {self.variant!r} uses no head mask")
        if self.mask_file is not None:
            clash = [f for f in ("finetuned_model", "score_seed") if getattr(self, f) is not None]
            clash += ["until"] if self.until == "mask" else []
            if clash:
                raise ValueError(f"mask_file: the mask is given, so there is no mask search for {', '.join(clash)}")

    def settings(self) -> tuple[str, bool, bool]:
        """(mask, forward_mask, from_scratch) after applying the variant's defaults."""
        mask, forward, scratch = VARIANTS.get(self.variant, ("none", False, False))
        return (self.mask if self.mask is not None else mask,
                self.forward_mask if self.forward_mask is not None else forward,
                self.from_scratch if self.from_scratch is not None else scratch)


# -- what validate checks and resolves ------------------------------------------------------------------------- #
@dataclasses.dataclass(frozen=True)
class Resolved:
    """What ``KimeraStrategy.validate`` resolved for its stages (``run.resolved``)."""

    source: SourceRef | None = None  # the KG retraining reads (None: the run does not retrain)
    masks: dict[str, list] | None = None  # the tables of strategy.mask_file (None: the mask is searched)


def resolve(run, cfg: KimeraConfig) -> Resolved:
    """Check everything that can fail before any stage runs; return the KG source (the run's, else the embedded
    HPO sample, when the run retrains) and the given mask."""
    from kinject.knowledge import triples_source

    if len(run.sources) > 1:
        raise SpecError("sources: KIMERA retrains on one knowledge graph; merge the graphs into one "
                        f"`triples` source (got {len(run.sources)} sources)")
    if cfg.finetuned_model and not (Path(cfg.finetuned_model) / "config.json").exists():
        raise SpecError(f"strategy.finetuned_model: {cfg.finetuned_model} is not a model directory")
    source = None
    if cfg.kg_heldout:
        from .heldout import split_source

        source = triples_source(run, cfg.kg_max_triples)
        split_source(source.build(), dataclasses.replace(run.env, limit=None), cfg.kg_max_triples, cfg.kg_heldout,
                     retrain_seed(run, cfg))
    masks = given_masks(run, cfg) if cfg.mask_file else None
    if not cfg.mask_file:
        if cfg.retrain_seed is not None and cfg.settings()[0] != "none":
            log.warning("strategy.retrain_seed: the mask is searched on this run's phase-1 model and data, which "
                        "depend on the run seed, so runs with other seeds still retrain; set strategy.mask_file to "
                        "share one retraining")
        if cfg.variant == "pruned" or cfg.variant != "finetune" and cfg.settings()[0] != "none":
            check_scoring(run, cfg)
    if source is None and cfg.variant not in ("finetune", "pruned") and cfg.until == "all":
        source = triples_source(run, cfg.kg_max_triples)
    return Resolved(source=source, masks=masks)


def check_scoring(run, cfg: KimeraConfig) -> None:
    """The scoring split and the search metric exist for the task."""
    split = cfg.score_split or run.task.eval_splits[0]
    if split not in (*run.task.eval_splits, run.task.train_split):
        raise SpecError(f"strategy.score_split: task {run.task.name!r} has no split {split!r}")
    names = run.task.metric_names()
    metric = cfg.search_metric or run.task.selection_metric()
    if metric not in names:
        raise SpecError(f"strategy.search_metric: task {run.task.name!r} reports no {metric!r} "
                        f"(has: {', '.join(names)})")
    if not run.task.greater_is_better(metric):
        raise SpecError(f"strategy.search_metric: {metric!r} is lower-is-better; the mask search stops when the metric "
                        "falls below tau x the unmasked one, so it needs a higher-is-better metric")


def given_masks(run, cfg: KimeraConfig) -> dict[str, list]:
    """The tables of strategy.mask_file the run uses: its mask of the variant's kind (hard for pruned and random)
    and, when present, the first-round importance (needed by the report). Checked against the model's layers
    and heads."""
    from transformers import AutoConfig

    from kinject.api import offline

    from .masks import load_mask

    path = Path(cfg.mask_file).expanduser()
    path = path / "masks.json" if path.is_dir() else path
    if not path.is_file():
        raise SpecError(f"strategy.mask_file: {cfg.mask_file} is neither a masks.json nor a directory with one")
    model = AutoConfig.from_pretrained(run.model_path, local_files_only=offline())
    shape = (run.spec.model.layers or model.num_hidden_layers, model.num_attention_heads)
    kind = mask_kind(cfg)
    names = [kind] + (["importance"] if cfg.analysis or "importance" in json.loads(path.read_text()) else [])
    try:
        return {name: load_mask(path, name, shape).tolist() for name in names}
    except DataError as exc:
        hint = " (kimera-report needs it; or set strategy.analysis=false)" if "importance" in exc.reason else ""
        raise DataError(f"strategy.mask_file: {exc.reason}{hint}", exc.path, exc.line) from None


def mask_kind(cfg: KimeraConfig) -> str:
    """hard or soft: the kind of mask the variant searches (pruned and random: hard)."""
    return "hard" if cfg.variant in ("pruned", "random") else cfg.settings()[0]


def retrain_seed(run, cfg: KimeraConfig) -> int:
    return cfg.retrain_seed if cfg.retrain_seed is not None else run.spec.seed


# -- the stage builders ---------------------------------------------------------------------------------------- #
def scoring_config(run, cfg: KimeraConfig):
    """The scoring set and the search metric (:class:`.scoring.ScoringConfig`) of the mask search and the report."""
    from .scoring import ScoringConfig

    return ScoringConfig(task=run.task_ref(), split=cfg.score_split or run.task.eval_splits[0],
                         examples=cfg.score_examples, importance_examples=cfg.importance_examples,
                         batch_size=cfg.score_batch_size, metric=cfg.search_metric or run.task.selection_metric(),
                         max_length=run.spec.model.max_length, attn=run.spec.model.attn_implementation,
                         seed=cfg.score_seed, bf16=bool(run.spec.training.bf16))


def mask_stages(run, cfg: KimeraConfig, resolved: Resolved) -> tuple[list[Stage], str]:
    """:func:`mask_search` of the variant's kind, then, for variant random, ``kimera-mask-random``; and the name of
    the stage whose masks.json is the mask the run uses (the last mask stage)."""
    stages = mask_search(run, cfg, resolved, mask_kind(cfg))
    if cfg.variant != "random":
        return stages, stages[0].name
    from .masks import RandomMaskConfig, random_mask_body

    stages.append(Stage(name="kimera-mask-random", body=random_mask_body, inputs=(stages[0].name,),
                        config=RandomMaskConfig(seed=cfg.mask_seed, mask_stage=stages[0].name),
                        artifacts=("random.json",)))
    return stages, stages[-1].name


def mask_search(run, cfg: KimeraConfig, resolved: Resolved, kind: str) -> list[Stage]:
    """``kimera-mask-<kind>`` (searched on the phase-1 model, or strategy.mask_file's) and, for a search, the
    ``kimera-search-report`` of its rounds (the one that computes with kinject.evidence, so editing the
    statistics re-keys no mask and no training)."""
    mask = mask_stage(run, cfg, resolved, kind)
    if resolved.masks is not None:
        return [mask]
    from .search_report import SearchReportConfig, search_report_body

    report = Stage(name=SEARCH_REPORT, body=search_report_body, inputs=(mask.name,), artifacts=("search.json",),
                   config=SearchReportConfig(task=run.task_ref(), search_stage=mask.name))
    return [mask, report]


def mask_stage(run, cfg: KimeraConfig, resolved: Resolved, kind: str) -> Stage:
    name = f"kimera-mask-{kind}"  # a given mask keeps the search's name: what follows reads it either way
    if resolved.masks is not None:
        from .masks import GivenMaskConfig, given_mask_body

        config = GivenMaskConfig(kind=kind, masks=resolved.masks, path=str(Path(cfg.mask_file).resolve()))
        return Stage(name=name, body=given_mask_body, config=config, artifacts=("masks.json",))
    from kinject.api import ModelRef, model_fingerprint

    from .search import MaskConfig, mask_body

    given = None
    if cfg.finetuned_model:
        path = str(Path(cfg.finetuned_model).resolve())
        given = ModelRef(name=cfg.finetuned_model, fingerprint=model_fingerprint(path, path, None), path=path)
    config = MaskConfig(kind=kind, tau=cfg.tau, rho=cfg.rho, rho_of=cfg.rho_of, max_rounds=cfg.max_rounds,
                        scoring=scoring_config(run, cfg), finetuned_model=given, model_stage=None if given else PHASE1)
    return Stage(name=name, body=mask_body, config=config, inputs=() if given else (PHASE1,),
                 artifacts=("masks.json",))  # search.json: kimera-search-report's, with the rounds' intervals


def retraining_stages(run, cfg: KimeraConfig, resolved: Resolved) -> list[Stage]:
    """The mask stages (none for mask none), ``kimera-retrain`` under their mask, ``kimera-finetune`` from the
    retrained encoder, ``kimera-evaluate`` and, with a mask, ``kimera-report``."""
    from .retrain import KGSettings, RetrainConfig, retrain_body

    mask, forward, scratch = cfg.settings()
    stages, masks = mask_stages(run, cfg, resolved) if mask != "none" else ([], None)
    training = run.spec.training
    config = RetrainConfig(
        model=run.model_ref(), seed=retrain_seed(run, cfg), mask=mask, mask_stage=masks, forward_mask=forward,
        from_scratch=scratch, source=resolved.source,
        kg=KGSettings(steps=cfg.kg_steps, epochs=run.knowledge_epochs, batch_size=cfg.kg_batch_size,
                      token_budget=cfg.kg_token_budget, learning_rate=cfg.kg_learning_rate,
                      max_length=cfg.kg_max_length, max_triples=cfg.kg_max_triples, heldout=cfg.kg_heldout),
        alphas=cfg.alphas.model_dump(), task_sampling=cfg.task_sampling, pooling=cfg.pooling,
        other_params=cfg.other_params, weight_decay=training.weight_decay, warmup_ratio=training.warmup_ratio,
        bf16=bool(training.bf16), save_steps=min(training.save_steps, max(cfg.kg_steps // 2, 1)))
    stages += [Stage(name=RETRAIN, body=retrain_body, config=config, inputs=(masks,) if masks else (),
                     produces_model=True),
               finetune_stage(run, FINETUNE, init_from=RETRAIN), evaluate_stage(run, FINETUNE, name=EVALUATE)]
    if cfg.analysis and masks:
        stages.append(report_stage(run, cfg, mask, masks))
    return stages


def report_stage(run, cfg: KimeraConfig, kind: str, masks: str) -> Stage:
    """``kimera-report``: head importance of the KIMERA task model against the mask and the first-round
    importance (heatmaps, table 3)."""
    from .report import ReportConfig, report_body

    config = ReportConfig(kind=kind, scoring=scoring_config(run, cfg), mask_stage=masks, model_stage=FINETUNE)
    return Stage(name=REPORT, body=report_body, config=config, inputs=(masks, FINETUNE),
                 artifacts=("analysis.json", "plots"))


def pruned_stages(run, cfg: KimeraConfig, resolved: Resolved) -> list[Stage]:
    """``kimera-mask-hard`` (+ its search report), ``kimera-pruned-encoder`` (its redundant heads removed from the
    pre-trained encoder), ``kimera-pruned-finetune`` and ``kimera-pruned-evaluate``."""
    from .pruning import PrunedConfig, pruned_body

    searched = mask_search(run, cfg, resolved, "hard")
    masks = searched[0].name
    pruned = Stage(name=PRUNED, body=pruned_body, config=PrunedConfig(model=run.model_ref(), mask_stage=masks),
                   inputs=(masks,), produces_model=True)
    return [*searched, pruned, finetune_stage(run, PRUNED_FINETUNE, init_from=PRUNED),
            evaluate_stage(run, PRUNED_FINETUNE, name=PRUNED_EVALUATE)]


# -- the strategy ---------------------------------------------------------------------------------------------- #
def variant_label(cfg: KimeraConfig) -> str:
    """How comparisons, leaderboards and the card name the arm: ``kimera`` for KIMERA itself (the hard variant:
    importance, mask, masked retraining), else ``kimera/<variant>`` (``kimera/no-mask``: the ablation that retrains
    every head), with each setting that overrides the variant's (``kimera/hard+masksoft``)."""
    default = VARIANTS.get(cfg.variant, ("none", False, False))
    mask, forward, scratch = cfg.settings()
    parts = [cfg.variant]
    parts += [f"mask{mask}"] if cfg.mask is not None and mask != default[0] else []
    parts += [f"forward{str(forward).lower()}"] if cfg.forward_mask is not None and forward != default[1] else []
    parts += ["scratch"] if cfg.from_scratch is not None and scratch != default[2] else []
    return "kimera" if parts == ["hard"] else "kimera/" + "+".join(parts)


class KimeraStrategy(Strategy):
    """KIMERA: retrain the attention heads a task needs least on KG triples, then fine-tune (+ baselines)."""

    Config: ClassVar = KimeraConfig
    consumes: ClassVar[frozenset[str]] = frozenset({"triples"})
    #: Winter et al. 2022, section 4: tau from {0.95, 0.98, 0.99} (0.98), rho 0.1, the full knowledge graph, all
    #: alphas 1 (retraining "for a maximum of 5 epochs, most converged after one": kg_steps stays the budget)
    protocols: ClassVar[dict] = {"paper": {"strategy": {"tau": 0.98, "rho": 0.1, "kg_max_triples": None}},
                                 "quick": {"strategy": {"kg_max_triples": 2000, "kg_steps": 20, "score_examples": 64,
                                                        "max_rounds": 2},
                                           "training": {"max_steps": 30}}}  # kinject run --quick

    @staticmethod
    def label(config: KimeraConfig) -> str:
        """The arm's name (:func:`variant_label`)."""
        return variant_label(config)

    def validate(self, run) -> Resolved:
        """Everything that can fail, before any stage; returns the KG retraining reads (the run's source, else
        the embedded HPO graph sampled to ``kg_max_triples``) and the mask of ``mask_file``."""
        super().validate(run)
        return resolve(run, self.config)

    def stages(self, run) -> list[Stage]:
        from kinject.evidence import compare_stage

        cfg, resolved = self.config, run.resolved
        if cfg.variant == "finetune":
            return [finetune_stage(run), evaluate_stage(run, PHASE1)]
        phase1 = [] if cfg.finetuned_model else [finetune_stage(run)]
        if cfg.until == "mask":  # the mask search only (and the random draw after it)
            return phase1 + mask_stages(run, cfg, resolved)[0]
        phase1 += [evaluate_stage(run, PHASE1, export=False)] if phase1 else []
        if cfg.variant == "pruned":
            stages, final = phase1 + pruned_stages(run, cfg, resolved), PRUNED_EVALUATE
        else:
            stages, final = phase1 + retraining_stages(run, cfg, resolved), EVALUATE
        if phase1:
            stages.append(compare_stage(run, baseline="evaluate", other=final, name="kimera-compare",
                                        labels=("finetune", variant_label(cfg))))
        return stages
