"""The pruned baseline (kimera-pruned-encoder): the pre-trained encoder with the hard mask's redundant heads
physically removed, then fine-tuned like any encoder."""

from __future__ import annotations

import json

import torch
from torch import nn

from kinject.api import ModelRef, StageConfig, StageContext
from kinject.training import save_model

from .gating import head_layout
from .masks import load_mask


class PrunedConfig(StageConfig):
    """The pre-trained encoder with the hard mask's redundant heads removed."""

    model: ModelRef
    mask_stage: str  # the input stage whose masks.json holds the hard mask


def pruned_body(cfg: PrunedConfig, ctx: StageContext) -> None:
    """model/ (the pruned encoder) and pruned.json ({layer: heads removed})."""
    encoder = cfg.model.load_encoder()
    shape = (encoder.config.num_hidden_layers, encoder.config.num_attention_heads)
    plan = prune_by_mask(encoder, load_mask(ctx.inputs[cfg.mask_stage] / "masks.json", "hard", shape))
    save_model(encoder, cfg.model.load_tokenizer(), ctx.out / "model")
    (ctx.out / "pruned.json").write_text(json.dumps({str(k): v for k, v in plan.items()}, indent=2))


@torch.no_grad()
def prune_by_mask(model: nn.Module, hard_mask: torch.Tensor) -> dict[int, list[int]]:
    """Physically remove the heads with mask 0 (transformers' ``prune_heads``; survives save/load
    through config.pruned_heads). transformers cannot remove every head of a layer, so in a layer with
    no head left one head is kept with its V rows, V bias and O columns zeroed: its output is exactly
    0 and, with zero gradients, stays 0 through fine-tuning. Returns {layer: heads removed}."""
    layout = head_layout(model)
    plan: dict[int, list[int]] = {}
    dead: list[int] = []
    for layer in range(layout.num_layers):
        off = [h for h in range(layout.num_heads) if hard_mask[layer, h] < 0.5]
        if len(off) == layout.num_heads:
            keep = off.pop(0)
            dead.append(layer)
            att = layout.layers[layer]
            rows = slice(keep * layout.head_dim, (keep + 1) * layout.head_dim)
            att.value.weight[rows] = 0
            if att.value.bias is not None:
                att.value.bias[rows] = 0
            att.output.weight[:, rows] = 0
        if off:
            plan[layer] = off
    base = getattr(model, "base_model", model)
    if plan:
        base.prune_heads(plan)
    return plan
