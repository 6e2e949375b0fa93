"""Bi-encoder heads for sentence-pair tasks (``task.encoder=bi``): each text is encoded on its own, mean-pooled,
and the pair is scored by the cosine of the two embeddings, as sentence encoders such as minilm were trained.

The task model stays an ordinary ``...ForSequenceClassification`` checkpoint (``AutoModel.from_pretrained`` loads its
encoder; mean-pooling that encoder's states gives the embeddings it was trained on): :func:`install` swaps the class
of the built or loaded model for a subclass whose ``forward`` reads a *packed* row - the two texts one after the
other, each with its own [CLS]/[SEP], the second marked by ``token_type_ids`` = 1 (:func:`pack`) - encodes the two
texts separately (their own positions, token type 0: exactly as each is encoded alone), and returns
``logits = scale * classifier(u * v)`` with u, v the unit-length mean-pooled embeddings. The classifier's weight is
frozen at ones (the positive / only output; zeros for the negative one), so a logit is ``scale * (cos + bias)``:
only the bias is a head parameter. A batch without a second text (e.g. the knowledge probe reading hidden states)
goes through the base class's forward. Objectives (``model.config.kinject_bi_encoder``):

* ``regression`` (similarity): MSE of ``cos + bias`` to the gold score mapped to [0, 1] - sentence-transformers'
  CosineSimilarityLoss with a learnt offset; one output.
* ``binary`` (pair classification, retrieval): cross-entropy of ``softmax(scale * [b0, cos + b1])``, i.e. a logistic
  loss on the cosine; two outputs, the second the positive class.
* ``contrastive`` (retrieval): each positive pair's query against every passage of the batch (in-batch negatives,
  its own hard negatives among them; other passages relevant to the same query left out), softmax of
  ``scale * cos`` - sentence-transformers' MultipleNegativesRankingLoss; two outputs as ``binary``.

``*_frozen`` (``task.encoder=bi-frozen``): the encoder is frozen, only the bias trains, so Pearson correlations and
rankings are those of the untrained encoder's cosine - the zero-shot baseline on the same footing.

The kernel applies a task's model transform named by ``Head.model`` ("module:function") to the model it builds and,
recorded in config.json, to the model it loads.
"""

from __future__ import annotations

from typing import Any

SCALE = 20.0  # logits per unit of cosine for the binary and contrastive objectives (sentence-transformers' default)
OBJECTIVES = ("regression", "binary", "contrastive")
_CLASSES: dict[type, type] = {}


def supported() -> bool:
    """Whether this kinject's kernel applies a task's model transform (``Head.model``)."""
    from dataclasses import fields

    from kinject.api import Head

    return "model" in {f.name for f in fields(Head)}


def head_model(objective: str, frozen: bool) -> str:
    """The ``Head.model`` reference of a bi-encoder with this objective."""
    if objective not in OBJECTIVES:
        raise ValueError(f"bi-encoder objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    return f"{__name__}:{objective}{'_frozen' if frozen else ''}"


def pack(tokenizer, texts: list[str], pairs: list[str], max_length: int) -> list[dict[str, list[int]]]:
    """Two texts per row, each tokenised alone (its own [CLS] ... [SEP], up to ``max_length`` tokens), the second
    marked by ``token_type_ids`` = 1: the input of a bi-encoder."""
    first = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    second = tokenizer(pairs, truncation=True, max_length=max_length)["input_ids"]
    return [{"input_ids": a + b, "attention_mask": [1] * (len(a) + len(b)), "token_type_ids": [0] * len(a) + [1] * len(b)}
            for a, b in zip(first, second)]


def install(model, objective: str, frozen: bool = False):
    """Make ``model`` (a ``...ForSequenceClassification`` with a linear ``classifier``) a bi-encoder in place."""
    import torch

    if objective not in OBJECTIVES:
        raise ValueError(f"bi-encoder objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    outputs = 1 if objective == "regression" else 2
    if model.config.num_labels != outputs or not hasattr(model, "classifier"):
        raise ValueError(f"bi-encoder ({objective}) needs a sequence head with {outputs} output(s) named classifier, "
                         f"got {type(model).__name__} with {model.config.num_labels}")
    if not getattr(type(model), "kinject_bi_encoder", False):
        model.__class__ = _bi_encoder_class(type(model))
        with torch.no_grad():  # the positive (or only) output reads the cosine; the negative one only its bias
            weight = model.classifier.weight
            weight.zero_()
            weight[-1].fill_(1.0)
    model.config.kinject_bi_encoder = {"objective": objective, "scale": 1.0 if objective == "regression" else SCALE}
    model.classifier.weight.requires_grad_(False)
    pooler = getattr(model.base_model, "pooler", None)
    if pooler is not None:  # the [CLS] pooler is not used: frozen, so no optimiser or DDP waits for its gradients
        pooler.requires_grad_(False)
    if frozen:
        for name, param in model.named_parameters():
            param.requires_grad_(name.startswith("classifier.") and name.endswith("bias"))
    return model


def regression(model, head=None):
    return install(model, "regression")


def binary(model, head=None):
    return install(model, "binary")


def contrastive(model, head=None):
    return install(model, "contrastive")


def regression_frozen(model, head=None):
    return install(model, "regression", frozen=True)


def binary_frozen(model, head=None):
    return install(model, "binary", frozen=True)


def contrastive_frozen(model, head=None):
    return install(model, "contrastive", frozen=True)


def _halves(input_ids, keep, width: int, pad_id: int):
    """The tokens of ``input_ids`` where ``keep`` holds, moved to the front of each row (order kept), cut to
    ``width``: (ids, attention mask)."""
    import torch

    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    ids = torch.gather(input_ids, 1, order)
    if ids.shape[1] < width:
        ids = torch.nn.functional.pad(ids, (0, width - ids.shape[1]), value=pad_id)
    ids = ids[:, :width]
    mask = torch.arange(width, device=ids.device)[None, :] < keep.sum(1, keepdim=True)
    return torch.where(mask, ids, torch.full_like(ids, pad_id)), mask.long()


def embed_pairs(model, input_ids, attention_mask, token_type_ids):
    """Unit-length mean-pooled embeddings (float32) of the two texts of each packed row, and the first texts'
    token ids (to tell rows of one query apart)."""
    import torch

    from .pooling import masked_mean

    if token_type_ids is None:
        raise ValueError("bi-encoder input: two texts per row, the second marked by token_type_ids = 1 "
                         "(kinject.tasks.biencoder.pack)")
    keep = (attention_mask if attention_mask is not None else torch.ones_like(input_ids)).bool()
    first, second = keep & (token_type_ids == 0), keep & (token_type_ids == 1)
    width = int(max(first.sum(1).max(), second.sum(1).max(), 1))
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    ids_a, mask_a = _halves(input_ids, first, width, pad_id)
    ids_b, mask_b = _halves(input_ids, second, width, pad_id)
    mask = torch.cat([mask_a, mask_b])
    hidden = model.base_model(input_ids=torch.cat([ids_a, ids_b]), attention_mask=mask)[0]
    pooled = torch.nn.functional.normalize(masked_mean(hidden.float(), mask), dim=-1)
    rows = input_ids.shape[0]
    return pooled[:rows], pooled[rows:], ids_a.masked_fill(mask_a == 0, -1)


def _loss(objective: str, scale: float, logits, u, v, queries, labels):
    import torch
    import torch.nn.functional as F

    if objective == "regression":
        return F.mse_loss(logits.reshape(-1), labels.reshape(-1).float())
    if objective == "binary":
        return F.cross_entropy(logits, labels.reshape(-1).long())
    labels = labels.reshape(-1).long()
    similarity = scale * (u @ v.T)  # anchors (positive rows) x every passage of the batch
    same_query = (queries[:, None, :] == queries[None, :, :]).all(-1)
    other_positive = same_query & (labels[None, :] == 1) & ~torch.eye(len(labels), dtype=torch.bool,
                                                                         device=labels.device)
    similarity = similarity.masked_fill(other_positive, float("-inf"))
    anchors = torch.nonzero(labels == 1).reshape(-1)
    keep_graph = 0.0 * logits.sum()  # every head parameter in the graph (DDP) even without an anchor
    if len(anchors) == 0:
        return keep_graph + 0.0 * similarity.masked_fill(torch.isinf(similarity), 0).sum()
    return F.cross_entropy(similarity[anchors], anchors) + keep_graph


def _bi_encoder_class(base: type) -> type:
    """A subclass of ``base`` whose forward scores packed pairs by cosine (same name: config.json's architectures
    stay the base's)."""
    if base in _CLASSES:
        return _CLASSES[base]
    from transformers.modeling_outputs import SequenceClassifierOutput

    class BiEncoder(base):
        kinject_bi_encoder = True

        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                    return_dict=None, **kwargs: Any):
            import torch

            if token_type_ids is None or input_ids is None or not bool((token_type_ids == 1).any()):
                # single texts (e.g. the knowledge probe reading hidden states): the base model's forward
                return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                                       token_type_ids=token_type_ids, labels=labels, return_dict=return_dict, **kwargs)
            u, v, queries = embed_pairs(self, input_ids, attention_mask, token_type_ids)
            settings = getattr(self.config, "kinject_bi_encoder", None) or {}
            objective, scale = settings.get("objective", "regression"), float(settings.get("scale", 1.0))
            with torch.autocast(device_type=u.device.type, enabled=False):  # scores in float32: no ties
                logits = scale * self.classifier(u * v)
                loss = None if labels is None else _loss(objective, scale, logits, u, v, queries, labels)
            return SequenceClassifierOutput(loss=loss, logits=logits)

    BiEncoder.__name__ = BiEncoder.__qualname__ = base.__name__
    BiEncoder.__module__ = base.__module__
    _CLASSES[base] = BiEncoder
    return BiEncoder
