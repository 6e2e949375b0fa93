"""Head importance (Michel et al. 2019) and the iterative hard / soft mask search of KIMERA.

``I_h = E_x |dL(x)/dxi_h|``: every example gets its own copy of the gates (a (B, L, H) tensor), and the
per-example losses are summed, so one backward pass gives each example's dL_b/dxi_h exactly (no
batch-level cancellation) at the cost of a plain forward+backward. Scores are L2-normalised per
layer, then min-max normalised to [0, 1] over the model. The same pass yields the logits, so each
search round scores the heads *and* measures the downstream metric under the current mask.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .gating import HeadGates, head_layout

log = logging.getLogger("kinject")


def per_example_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str) -> torch.Tensor:
    """The task loss of each example: (B,) — single-label CE, multi-label BCE, regression MSE, or token CE
    (mean over an example's labelled tokens)."""
    if logits.dim() == 3:  # token classification
        loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
        count = (labels != -100).sum(-1).clamp(min=1)
        return loss.sum(-1) / count
    if problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(-1), reduction="none")
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="none").sum(-1)
    return F.cross_entropy(logits, labels.view(-1), reduction="none")


def normalize_importance(raw: torch.Tensor) -> torch.Tensor:
    """L2-normalise each layer's scores, then min-max to [0, 1] over all heads."""
    norm = raw / raw.pow(2).sum(-1, keepdim=True).sqrt().clamp(min=1e-20)
    low, high = norm.min(), norm.max()
    return (norm - low) / (high - low) if high > low else torch.ones_like(norm)


def mixed_precision(model: nn.Module, bf16: bool):
    """bfloat16 autocast on the model's device with the task head in float32 (``bf16``), else nothing."""
    import contextlib

    from kinject.training import float32_head

    if not bf16:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16))
    stack.enter_context(float32_head(model))
    return stack


def score_heads(model: nn.Module, batches: Sequence[dict], problem_type: str,
                gates: torch.Tensor | None = None, bf16: bool = False) -> tuple[torch.Tensor, np.ndarray]:
    """Raw importance ``E_x |dL(x)/dxi_h|`` (L, H) under ``gates`` (default all 1), and the logits; ``bf16``: the
    forward under bfloat16 autocast (the head, the logits and the loss in float32)."""
    layout = head_layout(model)
    base = gates if gates is not None else torch.ones(layout.num_layers, layout.num_heads)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    total = torch.zeros(layout.num_layers, layout.num_heads, dtype=torch.float64)
    outputs, count = [], 0
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            labels = batch.pop("labels")
            n = labels.shape[0]
            xi = base.to(device, dtype).expand(n, -1, -1).clone().requires_grad_(True)
            with HeadGates(model, xi, layout), mixed_precision(model, bf16):
                logits = model(**batch).logits.float()
            loss = per_example_loss(logits, labels, problem_type).sum()
            (grad,) = torch.autograd.grad(loss, xi)
            total += grad.abs().sum(0).double().cpu()
            outputs.append(logits.detach().float().cpu().numpy())
            count += n
    finally:
        model.train(was_training)
    return (total / max(count, 1)).float(), _concat(outputs)


@torch.inference_mode()
def gated_logits(model: nn.Module, batches: Sequence[dict], gates: torch.Tensor,
                 bf16: bool = False) -> list[np.ndarray]:
    """Forward-only logits of ``batches`` under head gates (L, H): the metric-only part of a search round."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        with HeadGates(model, gates), mixed_precision(model, bf16):
            for batch in batches:
                inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
                out.append(model(**inputs).logits.float().cpu().numpy())
    finally:
        model.train(was_training)
    return out


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    if arrays and arrays[0].ndim == 3:  # token logits: pad sequence length
        width = max(a.shape[1] for a in arrays)
        arrays = [np.pad(a, ((0, 0), (0, width - a.shape[1]), (0, 0)), constant_values=-100.0) for a in arrays]
    return np.concatenate(arrays) if arrays else np.zeros((0,))


@dataclass
class MaskSearch:
    """The outcome of one iterative search: the mask, the metric of each round, the first scores."""

    mask: torch.Tensor
    baseline: float
    rounds: list[dict] = field(default_factory=list)
    first_importance: torch.Tensor | None = None
    stopped: str = "threshold"  # threshold | max_rounds | every_head_masked

    @property
    def redundant(self) -> int:
        """Heads the mask marks (partly) redundant: m < 1."""
        return int((self.mask < 1).sum())


def search_mask(model: nn.Module, batches: Sequence[dict], problem_type: str, metric: Callable[[np.ndarray], float],
                rho: float = 0.1, tau: float = 0.95, soft: bool = False, max_rounds: int = 50,
                rho_of: Literal["active", "all"] = "active", observe: Callable[[int, np.ndarray], None] | None = None,
                metric_batches: Sequence[dict] = (), bf16: bool = False) -> MaskSearch:
    """Iteratively mask a proportion ``rho`` of the heads with the lowest importance (``rho_of``: of the still-active
    heads, or of all heads as HF bertology's ``run_prune.py`` does), re-scoring after each step, until the metric
    falls below ``tau`` x the unmasked metric; returns the last mask that kept it. Hard: masked heads get gate 0.
    Soft: they keep the normalised I_h of the round that made them candidates (also their gate in later rounds).
    Metrics: higher is better.

    ``batches`` are scored for importance (forward+backward) and ``metric_batches`` only run forward: the
    metric sees the logits of both, in that order. ``bf16``: every pass under bfloat16 autocast.

    ``observe(round, logits)``, when given, sees every round's logits (round 0 = unmasked; batch order), e.g. to
    keep the per-example predictions the rounds' intervals are computed from (:mod:`.search_report`)."""
    layout = head_layout(model)
    mask = torch.ones(layout.num_layers, layout.num_heads)
    active = torch.ones_like(mask, dtype=torch.bool)
    kept = mask.clone()
    search: MaskSearch | None = None
    for round_no in range(max_rounds + 1):
        raw, logits = score_heads(model, batches, problem_type, mask, bf16)
        if metric_batches:
            logits = _concat([logits, *gated_logits(model, metric_batches, mask, bf16)])
        value = float(metric(logits))
        importance = normalize_importance(raw)
        if search is None and not np.isfinite(value):
            from kinject.api import KinjectError

            raise KinjectError(f"KIMERA mask search: the search metric is {value} on the scoring examples of the "
                               "unmasked model (undefined, e.g. one class only); choose another search_metric or "
                               "more score_examples")
        if search is None:
            search = MaskSearch(mask=mask.clone(), baseline=value, first_importance=importance)
        if observe is not None:
            observe(round_no, logits)
        ok = value >= tau * search.baseline
        search.rounds.append({"round": round_no, "metric": value, "masked": int((~active).sum()), "kept": ok})
        log.info("kimera %s mask round %d: metric=%.4f (threshold %.4f), %d heads masked%s",
                 "soft" if soft else "hard", round_no, value, tau * search.baseline, int((~active).sum()),
                 "" if ok else " (below threshold: stop)")
        if not ok:
            break
        kept = mask.clone()
        remaining = int(active.sum())
        if remaining == 0 or round_no == max_rounds:
            search.stopped = "every_head_masked" if remaining == 0 else "max_rounds"
            break
        n = min(remaining, max(1, int(round(rho * (remaining if rho_of == "active" else active.numel())))))
        scores = importance.masked_fill(~active, float("inf")).flatten()
        chosen = torch.argsort(scores, stable=True)[:n]
        flat_mask, flat_active = mask.view(-1), active.view(-1)
        flat_mask[chosen] = importance.flatten()[chosen] if soft else 0.0
        flat_active[chosen] = False
    assert search is not None
    search.mask = kept
    return search
