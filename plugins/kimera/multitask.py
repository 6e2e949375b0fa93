"""The multi-task KG model of KIMERA's retraining: the encoder with an entity head (MLM over the masked entity's
tokens, tied to the word embeddings, started from the checkpoint's pre-trained MLM head when it has one), a
relation head and a triplet head; the classification heads pool the encoder output (cls, mean, max or learned)."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from kinject.tasks import masked_mean

log = logging.getLogger("kinject")

KG_TASKS = ("entity", "relation", "triplet")
TASK_ID = {name: i for i, name in enumerate(KG_TASKS)}

# model_type -> (dense, LayerNorm, output bias) of the pre-trained MLM head in its *ForMaskedLM model
MLM_HEADS: dict[str, tuple[str, str, str]] = {
    "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "xlm-roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", "generator_lm_head.bias"),
    "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.bias"),
    "distilbert": ("vocab_transform", "vocab_layer_norm", "vocab_projector.bias"),
}


def pretrained_mlm_head(path: str, revision: str | None = None) -> dict[str, torch.Tensor] | None:
    """The MLM head (transform dense + LayerNorm, output bias) of the checkpoint at ``path`` when it has one,
    as ``{dense.weight, dense.bias, norm.weight, norm.bias, bias}``; None (and a log line) when it has not."""
    from transformers import AutoConfig, AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    from kinject.api import offline

    config = AutoConfig.from_pretrained(path, revision=revision, local_files_only=offline())
    names = MLM_HEADS.get(config.model_type)
    if names is None:
        log.info("kimera retrain: no MLM head map for model type %r; the entity head starts random", config.model_type)
        return None
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the missing head is expected for encoder-only checkpoints
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(path, revision=revision, local_files_only=offline(),
                                                           output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    dense, norm, bias = names
    wanted = {"dense.weight": f"{dense}.weight", "dense.bias": f"{dense}.bias", "norm.weight": f"{norm}.weight",
              "norm.bias": f"{norm}.bias", "bias": bias}
    missing = set(info["missing_keys"])
    state = model.state_dict()
    if any(key in missing or key not in state for key in wanted.values()):
        log.info("kimera retrain: %s has no pre-trained MLM head (%s); the entity head starts random", path,
                 f"{dense}.* not in the checkpoint")
        return None
    log.info("kimera retrain: the entity head starts from the pre-trained MLM head of %s", path)
    return {ours: state[theirs].detach().clone() for ours, theirs in wanted.items()}


class KGMultiTaskModel(nn.Module):
    """An encoder with the three KG heads: MLM (tied to the word embeddings), relation, triplet."""

    def __init__(self, encoder: nn.Module, num_relations: int, pooling: str = "cls",
                 alphas: dict[str, float] | None = None):
        super().__init__()
        self.encoder = encoder
        config = encoder.config
        hidden = config.hidden_size
        self.pooling = pooling
        self.alphas = {name: 1.0 for name in KG_TASKS} | (alphas or {})
        from transformers.activations import ACT2FN

        act = getattr(config, "hidden_act", None) or getattr(config, "activation", "gelu")
        embed = encoder.get_input_embeddings().weight.shape[1]  # ALBERT: the MLM head maps to the embedding size
        self.mlm_transform = nn.Sequential(nn.Linear(hidden, embed), ACT2FN[act if isinstance(act, str) else "gelu"],
                                           nn.LayerNorm(embed, eps=getattr(config, "layer_norm_eps", 1e-12)))
        self.mlm_bias = nn.Parameter(torch.zeros(encoder.get_input_embeddings().weight.shape[0]))
        self.relation_head = nn.Linear(hidden, max(num_relations, 1))
        self.triplet_head = nn.Linear(hidden, 2)
        self.pool_score = nn.Linear(hidden, 1) if pooling == "learned" else None

    @torch.no_grad()
    def load_mlm_head(self, weights: dict[str, torch.Tensor]) -> None:
        """Start the entity head from a pre-trained MLM head (:func:`pretrained_mlm_head`)."""
        dense, norm = self.mlm_transform[0], self.mlm_transform[2]
        for module, prefix in ((dense, "dense"), (norm, "norm")):
            module.weight.copy_(weights[f"{prefix}.weight"])
            module.bias.copy_(weights[f"{prefix}.bias"])
        self.mlm_bias.copy_(weights["bias"])

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, D) by the configured pooling; padding never counts."""
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "cls":
            return hidden[:, 0]
        if self.pooling == "mean":
            return masked_mean(hidden, attention_mask)
        if self.pooling == "max":
            return hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).max(1).values
        scores = self.pool_score(hidden).masked_fill(mask == 0, torch.finfo(hidden.dtype).min)
        return (scores.softmax(1) * hidden).sum(1)

    def encode(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids).last_hidden_state

    def classify(self, kind: str, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the relation or triplet head for encoded rows (B, T, D)."""
        head = self.relation_head if kind == "relation" else self.triplet_head
        return head(self.pool(hidden, attention_mask))

    def forward(self, input_ids, attention_mask, labels, task, token_type_ids=None):
        kind = KG_TASKS[int(task.view(-1)[0])]
        if bool((task != task.view(-1)[0]).any()):
            raise ValueError("a KG batch must hold one task")
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        if kind == "entity":
            where = labels != -100
            states = self.mlm_transform(hidden[where])
            logits = states @ self.encoder.get_input_embeddings().weight.t() + self.mlm_bias
            loss = F.cross_entropy(logits, labels[where])
        else:
            logits = self.classify(kind, hidden, attention_mask)
            loss = F.cross_entropy(logits, labels.view(-1))
        return {"loss": self.alphas[kind] * loss, "logits": logits}
