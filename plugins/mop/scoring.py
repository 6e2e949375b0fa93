"""Scoring a loaded fused model: the task's evaluation splits (as ``kinject.stages.evaluate_model`` does for a
model it loads itself) and the per-example mixture weights of the last layer's [CLS]."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from kinject.interfaces import Environment, Task

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
    chunks, layer = [], 0
    with torch.inference_mode():
        for lo in range(0, len(features), batch_size):
            batch = collator([{k: v for k, v in f.items() if k != "labels"} for f in features[lo:lo + batch_size]])
            inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            out = model(**inputs, output_adapter_fusion_attentions=True)
            layer, weights = last_layer_cls_weights(out.adapter_fusion_attentions, fusion)
            chunks.append(weights)
    ids = [str(examples[i].get("id") or f"{split}-{i}") if one_each else f"{split}-{i}" for i in range(len(features))]
    return layer, np.concatenate(chunks) if chunks else np.zeros((0, len(model.active_adapters.children))), ids
