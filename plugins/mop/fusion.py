"""MoP step 3: the task model fine-tuned with the K partition adapters mixed in every layer, on the `adapters`
library: Gumbel and MoE fusion layers swapped into the library's fusion slot, the trainer that adds the fusion
losses, saving / loading a fused task model, and the configs that make the training library's fine-tune and
evaluate stages do this (:class:`FusionConfig`, :class:`FusedEvaluateConfig`). A task model may also use a subset
of the parts (fused) or a single adapter alone (no fusion: the paper's Fig. 2).

adapters 1.3's own fusion (:class:`adapters.methods.modeling.BertFusion`) is the ``softmax`` mixture and is used
as is. ``gumbel`` and ``moe`` subclass it (same query / key / value projections, so the same saved weights) and
change only how attention scores over the K adapters become mixture weights:

* gumbel: ``gumbel_softmax(scores, tau)`` while training; ``softmax(scores / tau)`` at evaluation (no noise).
* moe: noisy top-k gating (Shazeer et al. 2017) on the fusion scores, noise std ``softplus(q W_noise)`` while
  training only; exactly k non-zero weights per token; its load-balancing loss ``coef * (cv^2(importance) +
  cv^2(load))`` is kept on the layer and added to the training loss by :func:`fusion_losses`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from adapters import Fuse
from adapters.methods.bottleneck import BottleneckLayer
from adapters.methods.modeling import BertFusion
from torch import nn

from kinject.api import Head, StageConfig, StageContext
from kinject.training import EvaluateConfig, FinetuneConfig

from .part_adapters import check_loaded_adapter, quiet_activation, saved_adapter_name


class MixtureFusion(BertFusion):
    """AdapterFusion whose score -> weight step (``mix``) is replaceable; everything else as the library's."""

    def mix(self, scores: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, query, key, value, residual, output_attentions: bool = False):
        cfg = self.config
        if cfg["residual_before"]:
            value = value + residual[:, :, None, :]
        query_layer = self.query(query) if cfg["query"] else query
        key_layer = self.key(key) if cfg["key"] else key
        value_layer = self.value(value) if cfg["value"] and cfg["value_before_softmax"] else value
        # key/value: (batch, tokens, adapters, features); scores: (batch, tokens, adapters)
        scores = self.dropout(torch.matmul(query_layer.unsqueeze(2), key_layer.transpose(-2, -1)).squeeze(2))
        weights = self.mix(scores, query_layer)
        context = torch.matmul(weights.unsqueeze(2), value_layer).squeeze(2)
        if cfg["value"] and not cfg["value_before_softmax"]:
            context = self.value(context)
        if not cfg["residual_before"]:
            context = context + residual
        if output_attentions:
            return context, weights.detach().cpu().numpy()
        return context


class GumbelFusion(MixtureFusion):
    """Gumbel-softmax mixture at temperature ``tau``; deterministic ``softmax(scores / tau)`` at evaluation."""

    def __init__(self, config, dense_size: int, dropout: float, tau: float):
        super().__init__(config, dense_size, dropout)
        self.tau = tau

    def mix(self, scores, query):
        if self.training:
            return F.gumbel_softmax(scores, tau=self.tau, dim=-1)
        return torch.softmax(scores / self.tau, dim=-1)


def cv_squared(x: torch.Tensor) -> torch.Tensor:
    """Squared coefficient of variation (0 for a single value): small when ``x`` is spread evenly."""
    if x.numel() < 2:
        return x.new_zeros(())
    return x.float().var() / (x.float().mean() ** 2 + 1e-10)


def _normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class MoEFusion(MixtureFusion):
    """Noisy top-k mixture over the fusion scores with a load-balancing loss (``aux_loss``, training only)."""

    def __init__(self, config, dense_size: int, dropout: float, n_adapters: int, top_k: int, loss_coef: float):
        super().__init__(config, dense_size, dropout)
        self.n_adapters, self.top_k, self.loss_coef = n_adapters, top_k, loss_coef
        self.w_noise = nn.Parameter(torch.zeros(dense_size, n_adapters))
        self.aux_loss: torch.Tensor | None = None

    def mix(self, scores, query):
        k, n = self.top_k, self.n_adapters
        noisy = std = None
        logits = scores
        if self.training:
            std = F.softplus(query @ self.w_noise) + 1e-2
            noisy = logits = scores + torch.randn_like(scores) * std
        top, index = logits.topk(min(k + 1, n), dim=-1)
        gates = torch.zeros_like(logits).scatter(-1, index[..., :k], torch.softmax(top[..., :k], dim=-1))
        if self.training:
            importance = gates.reshape(-1, n).sum(0)
            if k < n:  # smooth estimate of how often each adapter lands in the top k (differentiable)
                inside = noisy > top[..., k:k + 1]
                p_in = _normal_cdf((scores - top[..., k:k + 1]) / std)
                p_out = _normal_cdf((scores - top[..., k - 1:k]) / std)
                load = torch.where(inside, p_in, p_out).reshape(-1, n).sum(0)
            else:
                load = (gates > 0).reshape(-1, n).sum(0).float()
            self.aux_loss = self.loss_coef * (cv_squared(importance) + cv_squared(load))
        return gates


def fusion_layers(model, name: str) -> list[tuple[Any, BertFusion]]:
    """(owning bottleneck layer, fusion layer) of every layer that holds the fusion ``name``."""
    return [(m, m.adapter_fusion_layer[name]) for m in model.modules()
            if isinstance(m, BottleneckLayer) and name in m.adapter_fusion_layer]


def install_mixture(model, fuse: Fuse, mixture: str, tau: float = 1.0, top_k: int = 1,
                    loss_coef: float = 0.0) -> list[BertFusion]:
    """Replace the library's fusion layers of ``fuse`` by the ``mixture`` kind (softmax: left as is), keeping
    their weights. Returns the fusion layers in layer order."""
    layers = fusion_layers(model, fuse.name)
    if not layers:
        raise ValueError(f"the model has no fusion {fuse.name!r}")
    if mixture == "softmax":
        return [layer for _, layer in layers]
    out = []
    for owner, old in layers:
        args = (old.config, old.dense_size, old.dropout.p)
        new = GumbelFusion(*args, tau=tau) if mixture == "gumbel" else \
            MoEFusion(*args, n_adapters=len(fuse.children), top_k=top_k, loss_coef=loss_coef)
        reference = next(old.parameters())
        new.to(device=reference.device, dtype=reference.dtype)
        missing, unexpected = new.load_state_dict(old.state_dict(), strict=False)
        if unexpected or [m for m in missing if m != "w_noise"]:
            raise RuntimeError(f"fusion weights do not fit {type(new).__name__}: {missing} {unexpected}")
        new.train(old.training)
        owner.adapter_fusion_layer[fuse.name] = new
        out.append(new)
    return out


def fusion_losses(model, regularization: bool = True) -> torch.Tensor | None:
    """What fusion adds to the task loss: the "dynamic" fusion's value regulariser (``regularization``, when its
    config asks for it and the value matrices train) and the MoE load-balancing losses of the last forward pass (then
    cleared)."""
    total = None
    fusions = getattr(getattr(model, "adapters_config", None), "fusions", {}) or {}
    if regularization and any(model.adapters_config.get_fusion(name)[0]["regularization"] for name in fusions):
        total = model.get_fusion_regularization_loss()
    for module in model.modules():
        if isinstance(module, MoEFusion) and module.aux_loss is not None:
            total = module.aux_loss if total is None else total + module.aux_loss
            module.aux_loss = None
    return total


def mixture_trainer_class(regularization: bool = True):
    """HF Trainer whose loss is the task loss plus :func:`fusion_losses` (``regularization``: with the fusion's value
    regulariser; adapters' AdapterTrainer refuses an unfrozen base, and applies the regulariser one step late through
    a callback)."""
    from transformers import Trainer

    class MixtureTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, outputs = super().compute_loss(model, inputs, return_outputs=True,
                                                 num_items_in_batch=num_items_in_batch)
            extra = fusion_losses(self.model, regularization)
            if extra is not None:
                loss = loss + extra.to(loss.device)
            return (loss, outputs) if return_outputs else loss

    return MixtureTrainer


# -- building, saving, loading ------------------------------------------------------------------------ #
def attach_partition_adapters(model, adapter_dirs: list[Path], mixture: dict[str, Any], joint: bool,
                              digests: list[str | None] | None = None) -> Fuse | str:
    """Load the partition adapters saved in ``adapter_dirs`` (each under its saved name, checked bit for bit against
    the file and, given, the stage's recorded ``digests``: :func:`check_loaded_adapter`) into an adapters-ready task
    model, add their fusion ("dynamic"), install the mixture and set what trains: everything (``joint``) or the fusion
    layers and the task head. Returns the active setup: the ``Fuse``, or for a single adapter its name (that adapter
    alone, no fusion; not ``joint``: only the task head trains)."""
    import adapters

    adapters.init(model)
    names = []
    for folder, digest in zip(adapter_dirs, digests or [None] * len(adapter_dirs)):
        name = saved_adapter_name(folder)
        if name in names:
            raise ValueError(f"{folder}: a second adapter saved as {name!r}")
        model.load_adapter(str(folder), load_as=name, use_safetensors=True)
        check_loaded_adapter(model, folder, name, digest)
        names.append(name)
    if len(names) == 1:
        with quiet_activation():
            model.set_active_adapters(names[0])
        model.freeze_model(not joint)
        return names[0]
    fuse = Fuse(*names)
    model.add_adapter_fusion(fuse, "dynamic")
    install_mixture(model, fuse, **mixture)
    with quiet_activation():
        model.train_adapter_fusion(fuse, unfreeze_adapters=joint)
    if joint:
        model.freeze_model(False)
    return fuse


def save_fused_model(model, tokenizer, directory: Path, setup: Fuse | str, mixture: dict[str, Any]) -> None:
    """``save_pretrained`` (adapters writes its adapter and fusion configs into config.json) plus what MoP needs
    to rebuild the mixture: ``config.mop`` (read by :func:`load_fused_model`, which :class:`FusedEvaluateConfig`
    calls). ``setup``: the fusion, or the name of a single adapter used alone."""
    from kinject.training import save_model

    model.config.mop = {"adapters": list(setup.children) if isinstance(setup, Fuse) else [setup], **mixture}
    save_model(model, tokenizer, directory)


def load_fused_model(directory: Path, head_kind: str | None = None, attn_implementation: str = "sdpa"):
    """A saved MoP task model, through the documented adapters API (``adapters.load_model``) plus the mixture
    swap; in evaluation mode, fusion active. Same logits as the model that was saved."""
    import adapters
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification

    from kinject.api import KinjectError, offline

    directory = Path(directory)
    config = AutoConfig.from_pretrained(str(directory), local_files_only=offline())
    settings = dict(getattr(config, "mop", None) or {})
    if not settings:
        raise KinjectError(f"{directory}: not a MoP model (config.json has no 'mop' entry)")
    token = head_kind == "token" or any(a.endswith("ForTokenClassification") for a in config.architectures or ())
    auto = AutoModelForTokenClassification if token else AutoModelForSequenceClassification
    model = adapters.load_model(str(directory), auto._model_mapping[type(config)], local_files_only=offline(),
                                attn_implementation=attn_implementation)
    names = settings.pop("adapters")
    setup = Fuse(*names) if len(names) > 1 else names[0]  # one adapter: used alone, no fusion
    layers = install_mixture(model, setup, **settings) if len(names) > 1 else []
    extra = {f"{_module_name(model, layer)}.w_noise": layer for layer in layers if isinstance(layer, MoEFusion)}
    if extra:  # parameters the library's own fusion class does not have
        from safetensors import safe_open

        with safe_open(str(directory / "model.safetensors"), framework="pt") as weights:
            for key, layer in extra.items():
                layer.w_noise.data.copy_(weights.get_tensor(key))
    if getattr(config, "kinject_pooling", "cls") == "mean" and not token:
        from kinject.training import MeanPooler

        MeanPooler.install(model)
    with quiet_activation():
        model.set_active_adapters(setup)
    return model.eval()


def _module_name(model, module) -> str:
    return next(name for name, m in model.named_modules() if m is module)


# -- the stages: the training library's fine-tune and evaluate bodies, through their extension points ------- #
class MixtureSettings(StageConfig):
    """How the adapters are mixed in every layer (:func:`install_mixture`): softmax, gumbel at temperature ``tau``,
    or moe (noisy top-``top_k`` gating, its load-balancing loss weighted ``loss_coef``)."""

    mixture: Literal["softmax", "gumbel", "moe"]
    tau: float
    top_k: int
    loss_coef: float


class FusionConfig(FinetuneConfig):
    """Fine-tune the task model with the partition adapters of the stages ``adapters`` (in partition order) loaded,
    their fusion added and the ``mixture`` installed (one stage: its adapter alone); ``joint``: the base and the
    adapters train too; ``regularization``: the fusion's value regulariser joins the loss."""

    adapters: list[str]
    mixture: MixtureSettings
    joint: bool
    regularization: bool = True

    def prepare_model(self, model, ctx: StageContext):
        torch.manual_seed(self.seed)  # fusion-layer initialisation
        folders = [ctx.inputs[name] for name in self.adapters]
        digests = [json.loads((folder / "adapter.json").read_text()).get("adapter_sha256") for folder in folders]
        attach_partition_adapters(model, [folder / "adapter" for folder in folders], self.mixture.model_dump(),
                                  self.joint, digests)
        return model

    def trainer_class(self, head: Head):
        return mixture_trainer_class(self.regularization)

    def save_model(self, model, tokenizer, folder: Path, ctx: StageContext) -> None:
        names = [saved_adapter_name(ctx.inputs[name] / "adapter") for name in self.adapters]
        save_fused_model(model, tokenizer, folder, Fuse(*names) if len(names) > 1 else names[0],
                         self.mixture.model_dump())


class FusedEvaluateConfig(EvaluateConfig):
    """Evaluate a fused model (plain ``from_pretrained`` would drop the adapters): :func:`load_fused_model`."""

    def load_model(self, model_dir: Path, head: Head):
        return load_fused_model(model_dir, head.kind if head is not None else None, self.attn_implementation)
