"""Per-head gates without transformers' ``head_mask``: an architecture map plus forward pre-hooks.

The input of each layer's attention output projection (O) is the heads' outputs side by side,
``(B, T, H * d)``. A forward pre-hook views it as ``(B, T, H, d)`` and multiplies by a gate per head,
which works for eager and SDPA attention alike (``head_mask`` is ignored by SDPA and removed in
transformers v5). The same map names each layer's Q/K/V/O linear layers, so masks.py can scale the
updates of one head's rows (Q/K/V) and columns (O).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from kinject.api import KinjectError

# model_type -> (path of the layer list from the base model, Q, K, V, O paths relative to one layer).
# ALBERT shares one layer across depth: its layer list has one module called num_hidden_layers times.
ARCHITECTURES: dict[str, tuple[str, str, str, str, str]] = {
    "bert": ("encoder.layer", "attention.self.query", "attention.self.key", "attention.self.value",
             "attention.output.dense"),
    "roberta": ("encoder.layer", "attention.self.query", "attention.self.key", "attention.self.value",
                "attention.output.dense"),
    "xlm-roberta": ("encoder.layer", "attention.self.query", "attention.self.key", "attention.self.value",
                    "attention.output.dense"),
    "electra": ("encoder.layer", "attention.self.query", "attention.self.key", "attention.self.value",
                "attention.output.dense"),
    "albert": ("encoder.albert_layer_groups.0.albert_layers", "attention.query", "attention.key",
               "attention.value", "attention.dense"),
    "distilbert": ("transformer.layer", "attention.q_lin", "attention.k_lin", "attention.v_lin",
                   "attention.out_lin"),
}


@dataclass
class AttentionLayer:
    """The Q, K, V and O linear layers of one attention block."""

    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    output: nn.Linear


@dataclass
class HeadLayout:
    """Where the heads of a model live: one AttentionLayer per (virtual) layer, heads and head size."""

    layers: list[AttentionLayer]  # len == num_layers (ALBERT: the same object repeated)
    num_heads: int
    head_dim: int
    shared: bool = False  # parameters shared across layers (ALBERT)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def unique_layers(self) -> list[tuple[list[int], AttentionLayer]]:
        """(virtual layer indices, layer) for each distinct parameter set."""
        seen: dict[int, tuple[list[int], AttentionLayer]] = {}
        for i, layer in enumerate(self.layers):
            seen.setdefault(id(layer), ([], layer))[0].append(i)
        return list(seen.values())


def _get(module: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        module = module[int(part)] if part.isdigit() else getattr(module, part)
    return module


def head_layout(model: nn.Module) -> HeadLayout:
    """Find the attention layers of a BERT-family model (bare encoder or with a task head)."""
    config = model.config
    model_type = getattr(config, "model_type", "")
    if model_type not in ARCHITECTURES:
        raise KinjectError(f"KIMERA head gating: model type {model_type!r} is not in the architecture map "
                           f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    layers_path, q, k, v, o = ARCHITECTURES[model_type]
    base = getattr(model, "base_model", model)
    blocks = list(_get(base, layers_path))
    found = [AttentionLayer(*(_get(block, p) for p in (q, k, v, o))) for block in blocks]
    heads = config.num_attention_heads
    if getattr(config, "pruned_heads", None):
        raise KinjectError("KIMERA head gating needs an unpruned model (config.pruned_heads is set)")
    head_dim = found[0].query.out_features // heads
    shared = model_type == "albert"
    if shared:
        if len(found) != 1 or getattr(config, "num_hidden_groups", 1) != 1:
            raise KinjectError("KIMERA head gating supports ALBERT with one shared layer (num_hidden_groups=1)")
        found = found * config.num_hidden_layers
    return HeadLayout(layers=found, num_heads=heads, head_dim=head_dim, shared=shared)


class HeadGates:
    """Multiply each head's output by a gate: ``gates`` is (L, H), or (B, L, H) for per-example gates.

    Use as a context manager (hooks removed on exit) or call ``attach``/``detach``. Gates of 1 leave the
    model unchanged; 0 removes a head's contribution exactly; a (B, L, H) tensor with requires_grad
    gives per-example gradients dL_b/dxi_h in one backward pass (importance.py).
    """

    def __init__(self, model: nn.Module, gates: torch.Tensor | None = None, layout: HeadLayout | None = None):
        self.model = model
        self.layout = layout or head_layout(model)
        shape = (self.layout.num_layers, self.layout.num_heads)
        self.gates = gates if gates is not None else torch.ones(shape)
        if tuple(self.gates.shape[-2:]) != shape:
            raise KinjectError(f"head gates have shape {tuple(self.gates.shape)}, model needs {shape}")
        self._handles: list = []
        self._calls = 0

    def _hook(self, fixed_layer: int | None):
        def hook(module, args):
            (x, *rest) = args
            if fixed_layer is None:  # shared module (ALBERT): the n-th call is layer n
                layer = self._calls % self.layout.num_layers
                self._calls += 1
            else:
                layer = fixed_layer
            gate = self.gates[..., layer, :].to(device=x.device, dtype=x.dtype)  # gates may live elsewhere
            shape = x.shape
            x = x.view(*shape[:-1], self.layout.num_heads, self.layout.head_dim)
            if gate.dim() == 2:  # per example: (B, H) -> (B, 1.., H, 1)
                gate = gate.view(gate.shape[0], *([1] * (x.dim() - 3)), gate.shape[1], 1)
            else:
                gate = gate.view(-1, 1)
            return (x * gate).view(shape), *rest
        return hook

    def attach(self) -> "HeadGates":
        if self._handles:
            return self
        for indices, layer in self.layout.unique_layers():
            fixed = indices[0] if len(indices) == 1 else None
            self._handles.append(layer.output.register_forward_pre_hook(self._hook(fixed)))
        if self.layout.shared:
            def reset(module, args, kwargs=None):
                self._calls = 0
            self._handles.append(self.model.register_forward_pre_hook(reset))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def __enter__(self) -> "HeadGates":
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()
