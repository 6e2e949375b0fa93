"""Scoring a loaded fused model: the task's evaluation splits (as ``kinject.stages.evaluate_model`` does for a
model it loads itself) and the per-example mixture weights of the last layer's [CLS]."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from kinject.distributed import is_main_process
from kinject.interfaces import Environment, StageContext, Task
from kinject.stages import EvaluateConfig

from .stages import AnalysisConfig

log = logging.getLogger("kinject")


def score_splits(model, tokenizer, task: Task, env: Environment, batch_size: int, max_length: int, work: Path,
                 splits: tuple[str, ...] | None = None) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """(metrics, per-example prediction records) per split for an already loaded task model."""
    from kinject.stages import plain
    from kinject.training import predict

    metrics: dict[str, dict] = {}
    records: dict[str, list[dict]] = {}
    for split in splits or task.eval_splits:
        examples = task.examples(split, env)
        features = task.featurize(tokenizer, examples, max_length, env)
        logits = predict(model, features, task.collator(tokenizer), batch_size, work)
        if len(logits) != len(features):
            raise RuntimeError(f"{task.name} {split}: {len(logits)} predictions for {len(features)} examples")
        metrics[split] = plain(task.score(split, examples, features, logits, env))
        try:
            records[split] = plain(task.predictions(split, examples, features, logits, env))
        except NotImplementedError:
            log.warning("%s: task writes no per-example predictions (kinject compare cannot pair it)", task.name)
        log.info("%s %s: %s", task.name, split, ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                         for k, v in metrics[split].items()))
    return metrics, records


def mixture_weights(model_dir: Path, task: Task, env: Environment, split: str, limit: int, max_length: int,
                    batch_size: int, attn_implementation: str = "sdpa") -> tuple[int, np.ndarray, list[str]]:
    """(last layer index, examples x K mixture weights at [CLS], feature ids) on the first ``limit`` features of
    ``split`` (evaluation mode: deterministic for every mixture)."""
    import torch

    from kinject.models import load_tokenizer

    from .analysis import last_layer_cls_weights
    from .fusion import load_fused_model

    tokenizer = load_tokenizer(str(model_dir))
    model = load_fused_model(model_dir, task.head(env).kind, attn_implementation)
    fusion = model.active_adapters.name
    examples = task.examples(split, env)
    features = task.featurize(tokenizer, examples, max_length, env)
    one_each = len(features) == len(examples)  # else features are pairs / chunks: name them by position
    features = features[:limit]
    collator = task.collator(tokenizer)
    keys = ("input_ids", "attention_mask", "token_type_ids")  # (token tasks carry word maps the collator can't pad)
    chunks, layer = [], 0
    with torch.inference_mode():
        for lo in range(0, len(features), batch_size):
            batch = collator([{k: f[k] for k in keys if k in f} for f in features[lo:lo + batch_size]])
            out = model(**{k: v for k, v in batch.items() if k in keys}, output_adapter_fusion_attentions=True)
            layer, weights = last_layer_cls_weights(out.adapter_fusion_attentions, fusion)
            chunks.append(weights)
    ids = [str(examples[i].get("id") or f"{split}-{i}") if one_each else f"{split}-{i}" for i in range(len(features))]
    return layer, np.concatenate(chunks) if chunks else np.zeros((0, len(model.active_adapters.children))), ids


# -- the stages: evaluation (the fused model loads through adapters, not plain from_pretrained), analysis --- #
def evaluate_body(cfg: EvaluateConfig, ctx: StageContext) -> None:
    from kinject.models import load_tokenizer
    from kinject.stages import write_predictions

    from .fusion import load_fused_model

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    model_dir = ctx.inputs[cfg.model_stage] / "model"
    model = load_fused_model(model_dir, task.head(env).kind, cfg.attn_implementation)
    metrics, records = score_splits(model, load_tokenizer(str(model_dir)), task, env, cfg.batch_size, cfg.max_length,
                                    ctx.work, tuple(cfg.splits) if cfg.splits else None)
    train_stats = ctx.inputs[cfg.model_stage] / "train.json"
    if train_stats.exists():
        metrics["train"] = json.loads(train_stats.read_text())
    ctx.hooks().kinject_metrics_logged(stage=ctx.name, metrics={f"{s}/{k}": v for s, m in metrics.items()
                                                                for k, v in m.items() if s != "train"}, step=None)
    if is_main_process():
        (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        write_predictions(records, ctx.out / "predictions")


def analysis_body(cfg: AnalysisConfig, ctx: StageContext) -> None:
    from .analysis import adapter_summary, mixture_summary, plot_adapters, plot_mixture, write_json

    if not is_main_process():
        return
    summary = adapter_summary([json.loads((ctx.inputs[name] / "adapter.json").read_text()) for name in cfg.adapters])
    write_json(ctx.out / "partition-adapters.json", summary)
    plot_adapters(summary, ctx.out / "partition-adapters.png")
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    layer, weights, ids = mixture_weights(ctx.inputs[cfg.model_stage] / "model", task, env, cfg.split, cfg.examples,
                                          cfg.max_length, cfg.batch_size, cfg.attn_implementation)
    mixture = mixture_summary(weights, ids, layer, cfg.split)
    write_json(ctx.out / "mixture.json", mixture)
    plot_mixture(mixture, ctx.out / "mixture.png")
