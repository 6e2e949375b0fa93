"""The per-example mixture weights of a fused model at the last layer's [CLS], and the analysis stage.
(Evaluation is the shared ``evaluate`` stage: ``kinject.stages.load_task_model`` loads a MoP model through
:meth:`MopStrategy.load_task_model`.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from kinject.api import Environment, StageContext, Task, is_main_process

from .stages import AnalysisConfig

log = logging.getLogger("kinject")


def mixture_weights(model_dir: Path, task: Task, env: Environment, split: str, limit: int, max_length: int,
                    batch_size: int, attn_implementation: str = "sdpa") -> tuple[int, np.ndarray, list[str]]:
    """(last layer index, examples x K mixture weights at [CLS], feature ids) on the first ``limit`` features of
    ``split`` (evaluation mode: deterministic for every mixture)."""
    import torch

    from kinject.api import load_tokenizer

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


# -- the analysis stage ----------------------------------------------------------------------------------- #
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
