"""KIMERA's declared stages: configs (what each key holds) and module-level bodies (what each stage does)."""

from __future__ import annotations

import json
import logging
from typing import Literal

from pydantic import Field

from kinject.api import ModelRef, NOT_KEYED, SourceRef, StageConfig, StageContext, TaskRef

log = logging.getLogger("kinject")


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


class MaskConfig(StageConfig):
    kind: Literal["hard", "soft"]
    tau: float
    rho: float
    max_rounds: int
    scoring: ScoringConfig
    finetuned_model: ModelRef | None = None  # a given task model instead of the phase-1 input


class RandomMaskConfig(StageConfig):
    """The random control: the hard mask's count of redundant heads, placed with ``seed``."""

    seed: int


class GivenMaskConfig(StageConfig):
    """A mask given by the user (strategy.mask_file): keyed by its values, not by where it came from."""

    kind: Literal["hard", "soft"]
    masks: dict[str, list[list[float]]]  # the kind's mask (+ the first-round importance, when the file has it)
    path: str = Field(json_schema_extra=NOT_KEYED)


class RetrainConfig(StageConfig):
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


class PrunedConfig(StageConfig):
    model: ModelRef


class AnalysisConfig(StageConfig):
    kind: Literal["hard", "soft"]
    scoring: ScoringConfig
    mask_stage: str  # the input stage whose masks.json holds the mask and the first-round importance


def task_model(path, head, attn: str):
    from kinject.api import load_task_model

    return load_task_model(path, head, attn)


def scoring_set(scoring: ScoringConfig, task, env, tokenizer):
    """The importance scoring set (kimera.scoring.ScoringSet) of a stage."""
    from .scoring import build_scoring_set

    return build_scoring_set(task, env, scoring.split, scoring.examples, tokenizer, scoring.max_length,
                             scoring.batch_size, scoring.importance_examples, scoring.seed)


def mask_body(cfg: MaskConfig, ctx: StageContext) -> None:
    from kinject.api import load_tokenizer

    from .importance import search_mask
    from .masks import save_masks
    from .scoring import RoundInterval, no_redundant_head_warning

    scoring = cfg.scoring
    task, env = scoring.task.build(), scoring.task.environment(ctx)
    model_dir = cfg.finetuned_model.path if cfg.finetuned_model else ctx.inputs["finetune"] / "model"
    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    model = task_model(model_dir, head, scoring.attn)
    chosen = scoring_set(scoring, task, env, tokenizer)

    def metric(logits) -> float:
        return task.score(scoring.split, chosen.examples, chosen.features, chosen.restore(logits), env)[scoring.metric]

    interval = RoundInterval(task, env, scoring.split, scoring.metric, chosen)
    result = search_mask(model, chosen.batches, head.problem_type, metric, cfg.rho, cfg.tau,
                         soft=cfg.kind == "soft", max_rounds=cfg.max_rounds, interval=interval,
                         metric_batches=chosen.metric_batches)
    save_masks(ctx.out / "masks.json", **{cfg.kind: result.mask, "importance": result.first_importance})
    threshold = cfg.tau * result.baseline
    warning = None
    if result.redundant == 0:
        warning = no_redundant_head_warning(cfg.kind, scoring.metric, result.rounds, threshold)
        log.warning("%s", warning)
    importance = sum(len(b["input_ids"]) for b in chosen.batches)
    summary = {"kind": cfg.kind, "metric": scoring.metric, "split": scoring.split, "examples": len(chosen.features),
               "importance_examples": importance,
               "units": next((r["units"] for r in result.rounds if "units" in r), None),
               "baseline": result.baseline, "tau": cfg.tau, "threshold": threshold, "rho": cfg.rho,
               "stopped": result.stopped, "rounds": result.rounds, "masked_heads": result.redundant,
               "heads": int(result.mask.numel()), "no_redundant_heads": result.redundant == 0, "warning": warning}
    (ctx.out / "search.json").write_text(json.dumps(summary, indent=2))


def retrain_body(cfg: RetrainConfig, ctx: StageContext) -> None:
    from functools import partial

    import torch
    from transformers import AutoConfig, AutoModel

    from kinject.api import TrainingSpec, is_main_process, length_grouped_batches, save_model

    from .heldout import build_retraining_data, score_heldout
    from .masks import load_mask
    from .retrain import KG_TASKS, pretrained_mlm_head, retrain

    tokenizer = cfg.model.load_tokenizer()
    attn = cfg.model.attn_implementation
    if cfg.from_scratch:
        torch.manual_seed(cfg.seed)
        from kinject.api import keep_layers

        encoder = keep_layers(AutoModel.from_config(AutoConfig.from_pretrained(cfg.model.path, revision=cfg.model.revision),
                                                    attn_implementation=attn), cfg.model.layers)
    else:
        encoder = cfg.model.load_encoder()
    mlm_head = None if cfg.from_scratch else pretrained_mlm_head(cfg.model.path, cfg.model.revision)
    kg = cfg.kg
    alphas = dict(cfg.alphas)
    tasks = [t for t in KG_TASKS if alphas[t] > 0]
    data, held = build_retraining_data(cfg.source.build(), cfg.source.environment(ctx), tokenizer, kg, cfg.seed,
                                       tasks)
    if len(data.relations) < 2 and "relation" in tasks:  # one relation: nothing to predict
        log.warning("kimera: the KG has %d relation type(s); relation prediction disabled", len(data.relations))
        alphas["relation"] = 0.0
        tasks.remove("relation")
    head_mask = None
    if cfg.mask != "none":
        shape = (encoder.config.num_hidden_layers, encoder.config.num_attention_heads)
        head_mask = load_mask(ctx.inputs[cfg.mask_stage] / "masks.json", cfg.mask, shape)
    steps = kg["kg_steps"]
    training = TrainingSpec(epochs=1, max_steps=steps, learning_rate=kg["kg_learning_rate"],
                            batch_size=kg["kg_batch_size"], weight_decay=cfg.weight_decay,
                            warmup_ratio=cfg.warmup_ratio, group_by_length=False, save_steps=cfg.save_steps,
                            logging_steps=max(steps // 10, 1), bf16=cfg.bf16)
    scorer = None
    if held is not None:
        scorer = partial(score_heldout, heldout=held, train=data, tasks=tasks, tokenizer=tokenizer,
                         batch_size=2 * kg["kg_batch_size"], seed=cfg.seed)
    stats = retrain(encoder, tokenizer, {t: getattr(data, t) for t in tasks}, len(data.relations), training,
                    ctx.work, cfg.seed, mask=head_mask, forward_mask=cfg.forward_mask, other_params=cfg.other_params,
                    pooling=cfg.pooling, alphas=alphas, batches_of=length_grouped_batches, resume=ctx.resume,
                    task_sampling=cfg.task_sampling, mlm_head=mlm_head, heldout=scorer)
    stats["kg"] = data.stats
    if is_main_process():
        save_model(encoder, tokenizer, ctx.out / "model")
        (ctx.out / "retrain.json").write_text(json.dumps(stats, indent=2, default=str))


def random_mask_body(cfg: RandomMaskConfig, ctx: StageContext) -> None:
    """masks.json with a ``hard`` mask of as many redundant heads as the searched one, chosen at random (and the
    searched mask's first-round ``importance``, for the analysis); random.json (exported into the run directory,
    whose masks.json is the searched mask): the random mask, counts and overlap with the searched mask."""
    from .masks import load_mask, random_hard_mask, redundant_heads, save_masks

    searched_file = ctx.inputs["kimera-mask-hard"] / "masks.json"
    searched = load_mask(searched_file, "hard")
    mask = random_hard_mask(searched, cfg.seed)
    tables = json.loads(searched_file.read_text())
    save_masks(ctx.out / "masks.json", hard=mask, **{k: v for k, v in tables.items() if k == "importance"})
    ours, theirs = redundant_heads(mask), redundant_heads(searched)
    summary = {"seed": cfg.seed, "heads": int(mask.numel()), "redundant": len(ours),
               "searched_redundant": len(theirs), "shared_with_searched": len(ours & theirs), "hard": mask.tolist()}
    (ctx.out / "random.json").write_text(json.dumps(summary, indent=2))
    log.info("kimera random mask (seed %d): %d of %d heads redundant, %d of them also in the searched mask",
             cfg.seed, len(ours), mask.numel(), len(ours & theirs))


def given_mask_body(cfg: GivenMaskConfig, ctx: StageContext) -> None:
    """The mask of strategy.mask_file as this run's masks.json (checked when the run was prepared)."""
    from .masks import save_masks

    save_masks(ctx.out / "masks.json", **cfg.masks)
    log.info("kimera: %s mask from %s", cfg.kind, cfg.path)


def pruned_body(cfg: PrunedConfig, ctx: StageContext) -> None:
    from kinject.api import save_model

    from .masks import load_mask, prune_by_mask

    encoder = cfg.model.load_encoder()
    shape = (encoder.config.num_hidden_layers, encoder.config.num_attention_heads)
    plan = prune_by_mask(encoder, load_mask(ctx.inputs["kimera-mask-hard"] / "masks.json", "hard", shape))
    save_model(encoder, cfg.model.load_tokenizer(), ctx.out / "model")
    (ctx.out / "pruned.json").write_text(json.dumps({str(k): v for k, v in plan.items()}, indent=2))


def analysis_body(cfg: AnalysisConfig, ctx: StageContext) -> None:
    from kinject.api import load_tokenizer

    from .analysis import write_analysis
    from .importance import normalize_importance, score_heads
    from .masks import load_mask

    scoring = cfg.scoring
    task, env = scoring.task.build(), scoring.task.environment(ctx)
    model_dir = ctx.inputs["kimera-finetune"] / "model"
    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    model = task_model(model_dir, head, scoring.attn)
    raw, _ = score_heads(model, scoring_set(scoring, task, env, tokenizer).batches, head.problem_type)
    masks_file = ctx.inputs[cfg.mask_stage] / "masks.json"
    mask = load_mask(masks_file, cfg.kind)
    before = load_mask(masks_file, "importance", tuple(mask.shape))
    write_analysis(ctx.out, mask, before, normalize_importance(raw), cfg.kind)
