"""KIMERA's plan: what validation checks and resolves (the KG retraining reads, a given mask), and the builders of
each stage from the strategy's config. Strategy-side code: no stage's key covers this module. The bodies are
imported when their stage is built, so loading the strategy (``kinject info``) imports no torch."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from kinject.api import DataError, SourceRef, SpecError, Stage
from kinject.training import evaluate_stage, finetune_stage

from .config import KimeraConfig
from .stages import (GivenMaskConfig, MaskConfig, PrunedConfig, RandomMaskConfig, ReportConfig, RetrainConfig,
                     ScoringConfig, SearchReportConfig)

log = logging.getLogger("kinject")

PHASE1 = "finetune"  # the phase-1 task model (the finetune baseline's stage and key)
RETRAIN, FINETUNE, EVALUATE = "kimera-retrain", "kimera-finetune", "kimera-evaluate"
PRUNED, PRUNED_FINETUNE, PRUNED_EVALUATE = "kimera-pruned-encoder", "kimera-pruned-finetune", "kimera-pruned-evaluate"
SEARCH_REPORT, REPORT = "kimera-search-report", "kimera-report"


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


# -- stage builders ----------------------------------------------------------------------------------------- #
def scoring_config(run, cfg: KimeraConfig) -> ScoringConfig:
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
    from .masks import random_mask_body

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
    from .search_report import search_report_body

    report = Stage(name=SEARCH_REPORT, body=search_report_body, inputs=(mask.name,), artifacts=("search.json",),
                   config=SearchReportConfig(task=run.task_ref(), search_stage=mask.name))
    return [mask, report]


def mask_stage(run, cfg: KimeraConfig, resolved: Resolved, kind: str) -> Stage:
    name = f"kimera-mask-{kind}"  # a given mask keeps the search's name: what follows reads it either way
    if resolved.masks is not None:
        from .masks import given_mask_body

        config = GivenMaskConfig(kind=kind, masks=resolved.masks, path=str(Path(cfg.mask_file).resolve()))
        return Stage(name=name, body=given_mask_body, config=config, artifacts=("masks.json",))
    from kinject.api import ModelRef, model_fingerprint

    from .search import mask_body

    given = None
    if cfg.finetuned_model:
        path = str(Path(cfg.finetuned_model).resolve())
        given = ModelRef(name=cfg.finetuned_model, fingerprint=model_fingerprint(path, path, None), path=path)
    config = MaskConfig(kind=kind, tau=cfg.tau, rho=cfg.rho, max_rounds=cfg.max_rounds,
                        scoring=scoring_config(run, cfg), finetuned_model=given, model_stage=None if given else PHASE1)
    return Stage(name=name, body=mask_body, config=config, inputs=() if given else (PHASE1,),
                 artifacts=("masks.json",))  # search.json: kimera-search-report's, with the rounds' intervals


def retraining_stages(run, cfg: KimeraConfig, resolved: Resolved) -> list[Stage]:
    """The mask stages (none for mask none), ``kimera-retrain`` under their mask, ``kimera-finetune`` from the
    retrained encoder, ``kimera-evaluate`` and, with a mask, ``kimera-report``."""
    from .retrain import retrain_body

    mask, forward, scratch = cfg.settings()
    stages, masks = mask_stages(run, cfg, resolved) if mask != "none" else ([], None)
    training = run.spec.training
    config = RetrainConfig(
        model=run.model_ref(), seed=retrain_seed(run, cfg), mask=mask, mask_stage=masks, forward_mask=forward,
        from_scratch=scratch, source=resolved.source,
        kg={**{k: v for k, v in cfg.model_dump(mode="json").items()  # an unset token budget is not keyed: keys stay
               if k.startswith("kg_") and not (k == "kg_token_budget" and v is None)},  # as before the option
            **({"kg_epochs": run.knowledge_epochs} if run.knowledge_epochs else {})},
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
    from .report import report_body

    config = ReportConfig(kind=kind, scoring=scoring_config(run, cfg), mask_stage=masks, model_stage=FINETUNE)
    return Stage(name=REPORT, body=report_body, config=config, inputs=(masks, FINETUNE),
                 artifacts=("analysis.json", "plots"))


def pruned_stages(run, cfg: KimeraConfig, resolved: Resolved) -> list[Stage]:
    """``kimera-mask-hard`` (+ its search report), ``kimera-pruned-encoder`` (its redundant heads removed from the
    pre-trained encoder), ``kimera-pruned-finetune`` and ``kimera-pruned-evaluate``."""
    from .pruning import pruned_body

    searched = mask_search(run, cfg, resolved, "hard")
    masks = searched[0].name
    pruned = Stage(name=PRUNED, body=pruned_body, config=PrunedConfig(model=run.model_ref(), mask_stage=masks),
                   inputs=(masks,), produces_model=True)
    return [*searched, pruned, finetune_stage(run, PRUNED_FINETUNE, init_from=PRUNED),
            evaluate_stage(run, PRUNED_FINETUNE, name=PRUNED_EVALUATE)]
