"""Head masks: files, per-head update scaling (KIMERA eq. 3), and the mask stages that do not search: the random
control (kimera-mask-random) and a given mask (strategy.mask_file).

Mask convention (the paper's): ``m[l, h] = 1`` an important head (frozen in retraining), ``0`` a
redundant head (retrained at the full learning rate); soft masks hold values in [0, 1].

Why the update and not the gradient: Adam divides the gradient by its running RMS, so scaling a
gradient by (1 - m) barely changes Adam's step, and AdamW's weight decay moves a head whose gradient
is zero. ``HeadUpdateScaler`` therefore rescales what the optimiser *did* to each head's slice:
``W <- W_old + (1 - m) * (W_new - W_old)``, exactly ``W_old`` where m == 1, so a frozen head stays
bit-identical whatever the optimiser (momentum, decay, clipping).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from kinject.api import NOT_KEYED, DataError, StageConfig, StageContext

from .gating import HeadLayout, head_layout

log = logging.getLogger("kinject")


def save_masks(path: Path, **masks) -> None:
    """Write named (L, H) masks/score tables as JSON lists."""
    from kinject.api import atomic_write_text

    data = {name: (value.tolist() if hasattr(value, "tolist") else value) for name, value in masks.items()}
    atomic_write_text(Path(path), json.dumps(data, indent=1))


def load_mask(path: Path, name: str, shape: tuple[int, int] | None = None) -> torch.Tensor:
    """Read mask ``name`` from a masks.json; checks it is (L, H) with values in [0, 1]."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError("mask file not found", path) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON ({exc.msg})", path, exc.lineno) from None
    if name not in data:
        raise DataError(f"no mask {name!r} (has: {', '.join(data)})", path)
    try:
        mask = torch.tensor(data[name], dtype=torch.float32)
    except (TypeError, ValueError):
        raise DataError(f"mask {name!r} is not a rectangular table of numbers", path) from None
    if mask.dim() != 2 or (shape is not None and tuple(mask.shape) != tuple(shape)):
        raise DataError(f"mask {name!r} has shape {tuple(mask.shape)}, expected {shape or '(layers, heads)'}", path)
    if bool(((mask < 0) | (mask > 1)).any()):
        raise DataError(f"mask {name!r} has values outside [0, 1]", path)
    return mask


def _per_layer_rate(layout: HeadLayout, mask: torch.Tensor) -> list[tuple[object, torch.Tensor]]:
    """(attention layer, per-head update rate 1 - m) for each distinct parameter set.

    Shared layers (ALBERT) take the largest mask value over the layers that use them: a head that is
    important in any layer is frozen.
    """
    out = []
    for indices, layer in layout.unique_layers():
        m = mask[indices].max(dim=0).values
        out.append((layer, (1.0 - m).clamp(0.0, 1.0)))
    return out


class HeadUpdateScaler:
    """Scale each head's optimiser update by (1 - m): Q/K/V rows and bias entries, O columns.

    ``attach(optimizer)`` registers step pre/post hooks; ``before_step``/``after_step`` can be called by
    hand (tests, custom loops). The O bias, shared by all heads, is not a head parameter.
    """

    def __init__(self, model: nn.Module, mask: torch.Tensor, layout: HeadLayout | None = None):
        self.layout = layout or head_layout(model)
        shape = (self.layout.num_layers, self.layout.num_heads)
        if tuple(mask.shape) != shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} does not fit the model {shape}")
        d = self.layout.head_dim
        self.targets: list[tuple[nn.Parameter, torch.Tensor]] = []  # (param, broadcastable rate)
        for layer, rate in _per_layer_rate(self.layout, mask.float()):
            per_unit = rate.repeat_interleave(d)  # (H*d,)
            for lin in (layer.query, layer.key, layer.value):
                self.targets.append((lin.weight, per_unit.view(-1, 1)))
                if lin.bias is not None:
                    self.targets.append((lin.bias, per_unit))
            self.targets.append((layer.output.weight, per_unit.view(1, -1)))
        # parameters whose heads all train at the full rate need no bookkeeping
        self.targets = [(p, r.to(p.device, p.dtype)) for p, r in self.targets if p.requires_grad and bool((r < 1).any())]
        self._saved: list[torch.Tensor] = []
        self._handles: list = []

    @torch.no_grad()
    def before_step(self, *args, **kwargs) -> None:
        # the Trainer moves the model (to CUDA, to bf16) after the scaler was built: follow the parameters
        self.targets = [(p, r if (r.device, r.dtype) == (p.device, p.dtype) else r.to(p.device, p.dtype))
                        for p, r in self.targets]
        self._saved = [p.detach().clone() for p, _ in self.targets]

    @torch.no_grad()
    def after_step(self, *args, **kwargs) -> None:
        """p <- old + rate * (p - old), one fused pass; torch.lerp is exact at rate 0 (old) and 1 (p)."""
        if not self._saved:
            return
        for (p, rate), old in zip(self.targets, self._saved):
            p.copy_(old.lerp_(p, rate))
        self._saved = []

    def attach(self, optimizer: torch.optim.Optimizer) -> "HeadUpdateScaler":
        self._handles = [optimizer.register_step_pre_hook(self.before_step),
                         optimizer.register_step_post_hook(self.after_step)]
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def freeze_non_attention(model: nn.Module, encoder: nn.Module) -> int:
    """``other_params: freeze``: only Q/K/V/O weights and Q/K/V biases of ``encoder`` keep training
    (plus parameters outside the encoder, i.e. new task heads). Returns the number frozen."""
    layout = head_layout(encoder)
    keep = set()
    for _, layer in layout.unique_layers():
        for lin in (layer.query, layer.key, layer.value):
            keep.update(id(p) for p in lin.parameters())
        keep.add(id(layer.output.weight))
    frozen = 0
    for p in encoder.parameters():
        if id(p) not in keep and p.requires_grad:
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


# -- controls for experiments: the random mask, a given mask, overlaps ------------------------------ #
def redundant_heads(mask: torch.Tensor) -> set[tuple[int, int]]:
    """(layer, head) of the heads a hard mask marks redundant (value < 0.5: retrained)."""
    return {(int(layer), int(head)) for layer, head in (mask < 0.5).nonzero().tolist()}


def random_hard_mask(hard: torch.Tensor, seed: int) -> torch.Tensor:
    """A hard mask of the shape of ``hard`` with exactly as many redundant heads (0) as it has, chosen uniformly at
    random (seeded) among all heads; every other head is 1 (frozen)."""
    count = len(redundant_heads(hard))
    chosen = torch.randperm(hard.numel(), generator=torch.Generator().manual_seed(seed))[:count]
    out = torch.ones(hard.numel())
    out[chosen] = 0.0
    return out.view(hard.shape)


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0  # two empty sets are identical


def redundant_overlap(mask_files: list, name: str = "hard") -> dict:
    """How far masks agree: the sets of redundant heads of mask ``name`` in each masks.json (e.g. searched on
    different scoring samples, ``strategy.score_seed``).

    Returns ``counts`` (redundant heads per file), ``intersection`` / ``union`` sizes over all files, ``jaccard``
    (|A ∩ B| / |A ∪ B| for every pair, keyed "i-j" by file position; 1.0 when both are empty) and
    ``chance_jaccard`` per pair: E|A ∩ B| / E|A ∪ B| for sets of the same sizes drawn at random, the level two
    unrelated masks reach.
    """
    masks = [load_mask(Path(path), name) for path in mask_files]
    if len({tuple(m.shape) for m in masks}) > 1:
        raise DataError(f"masks of different shapes: {', '.join(str(tuple(m.shape)) for m in masks)}", mask_files[0])
    sets = [redundant_heads(m) for m in masks]
    heads = masks[0].numel() if masks else 0
    pairs, chance = {}, {}
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            a, b = len(sets[i]), len(sets[j])
            both = a * b / heads
            pairs[f"{i}-{j}"] = _jaccard(sets[i], sets[j])
            chance[f"{i}-{j}"] = both / (a + b - both) if a + b else 1.0
    return {"files": [str(p) for p in mask_files], "heads": heads, "counts": [len(s) for s in sets],
            "intersection": len(set.intersection(*sets)) if sets else 0,
            "union": len(set.union(*sets)) if sets else 0, "jaccard": pairs, "chance_jaccard": chance}


class RandomMaskConfig(StageConfig):
    """The random control: the hard mask's count of redundant heads, placed with ``seed``."""

    seed: int
    mask_stage: str  # the input stage whose masks.json holds the searched hard mask


def random_mask_body(cfg: RandomMaskConfig, ctx: StageContext) -> None:
    """masks.json with a ``hard`` mask of as many redundant heads as the searched one, chosen at random (and the
    searched mask's first-round ``importance``, for the analysis); random.json (exported into the run directory,
    whose masks.json is the searched mask): the random mask, counts and overlap with the searched mask."""
    searched_file = ctx.inputs[cfg.mask_stage] / "masks.json"
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


class GivenMaskConfig(StageConfig):
    """A mask given by the user (strategy.mask_file): keyed by its values, not by where it came from."""

    kind: Literal["hard", "soft"]
    masks: dict[str, list[list[float]]]  # the kind's mask (+ the first-round importance, when the file has it)
    path: str = Field(json_schema_extra=NOT_KEYED)


def given_mask_body(cfg: GivenMaskConfig, ctx: StageContext) -> None:
    """The mask of strategy.mask_file as this run's masks.json (checked when the run was prepared)."""
    save_masks(ctx.out / "masks.json", **cfg.masks)
    log.info("kimera: %s mask from %s", cfg.kind, cfg.path)
