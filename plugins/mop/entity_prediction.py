"""MoP step 2: one bottleneck adapter per partition learns to predict the part's entities, the base model frozen.

Input ``[CLS] h [SEP] r [SEP]`` (the partition's "tail" rows) -> a score per entity of the part (``entity_head``: a
name-scoring or a free linear head on the last layer's [CLS], or the reference code's frozen random map from the
pooler output); with ``bidirectional`` also ``[CLS] r [SEP] t [SEP]`` -> h (the reference code's head prediction). A
fraction of the part's triples is held out to measure the adapter's entity prediction (kinject's diagnostic, not the
paper's Fig. 2, which scores each adapter alone downstream), next to the tail prior's accuracy and on the adapter's
own training rows (the facts it stored).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from kinject.api import ModelRef, NOT_KEYED, StageConfig, StageContext, TrainingSpec
from kinject.training import plain
from kinject.tasks import masked_mean

from .part_adapters import AdapterSettings, adapter_encoder, adapter_name, base_digest, saved_adapter_digest
from .partition import KGSettings, kg_columns, kg_data

log = logging.getLogger("kinject")

TRAIN_PROBE_ROWS = 2000  # training rows re-scored after training: how many facts the adapter stored


# -- which triples and entities belong to a part ---------------------------------------------------------------- #
def part_classes(parts: np.ndarray, part: int, head: np.ndarray, tail: np.ndarray, rows: np.ndarray,
                 bidirectional: bool) -> np.ndarray:
    """Sorted entity ids the part's classifier predicts: the part's entities, plus any foreign entity its triples
    ask for (only when cross-part triples are kept)."""
    targets = [np.flatnonzero(parts == part), tail[rows]]
    if bidirectional:
        targets.append(head[rows])
    return np.unique(np.concatenate(targets)).astype(np.int64)


def split_heldout(rows: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, held-out rows), seeded; at least one training row when there is any."""
    order = np.random.default_rng(seed).permutation(rows)
    n_out = min(int(round(fraction * len(rows))), max(len(rows) - 1, 0))
    return np.sort(order[n_out:]), np.sort(order[:n_out])


def tail_features(data, rows: np.ndarray, classes: np.ndarray) -> list[dict]:
    """The "tail" rows of ``rows`` with labels as indices into ``classes``."""
    if not len(rows):
        return []
    subset = data.tail.select(rows.tolist())
    local = np.searchsorted(classes, np.asarray(subset["labels"], dtype=np.int64))  # (.data ignores the selection)
    out = subset.remove_columns(["labels"]).to_list()
    for feature, label in zip(out, local.tolist()):
        feature["labels"] = label
    return out


def head_features(data, rows: np.ndarray, classes: np.ndarray, tokenizer, max_length: int) -> list[dict]:
    """``[CLS] r [SEP] t [SEP]`` -> index of h in ``classes`` for ``rows`` (tokenizer pair encoding)."""
    if not len(rows):
        return []
    triples = data.triples.select(rows.tolist())
    h, r, t = (np.asarray(triples[c], dtype=np.int64) for c in ("head", "relation", "tail"))
    encoded = tokenizer([data.relations[i] for i in r], [data.entities[i] for i in t], truncation="only_second",
                        max_length=max_length)
    labels = np.searchsorted(classes, h).tolist()
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoded]
    return [{**{k: encoded[k][i] for k in keys}, "labels": labels[i]} for i in range(len(labels))]


# -- the model -------------------------------------------------------------------------------------------------- #
class NameScoringHead(nn.Module):
    """Scores each class by the cosine between a projection of [CLS] and the class's entity-name embedding (a
    frozen buffer), times a learned scale, plus a learned per-class bias. A class seen once in training still
    has a meaningful row (its name), so the adapter has to move [CLS] toward the right entity instead of
    learning the tail prior into free softmax rows."""

    def __init__(self, name_embeddings: torch.Tensor, scale: float = 20.0):
        super().__init__()
        hidden = name_embeddings.shape[1]
        self.register_buffer("names", F.normalize(name_embeddings.float(), dim=-1))
        self.proj = nn.Linear(hidden, hidden)
        nn.init.eye_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        self.log_scale = nn.Parameter(torch.tensor(float(np.log(scale))))
        self.bias = nn.Parameter(torch.zeros(name_embeddings.shape[0]))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        query = F.normalize(self.proj(hidden).float(), dim=-1)
        return query @ self.names.T * self.log_scale.exp() + self.bias


@torch.inference_mode()
def name_embeddings(encoder, tokenizer, names: list[str], max_length: int, batch_size: int = 256) -> torch.Tensor:
    """Mean-pooled last-layer states of ``names`` under ``encoder`` (no adapter active), shortest first."""
    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    order = np.argsort([len(n) for n in names], kind="stable")
    out = torch.empty(len(names), encoder.config.hidden_size)
    for lo in range(0, len(names), batch_size):
        idx = order[lo:lo + batch_size]
        batch = tokenizer([names[i] for i in idx], truncation=True, max_length=max_length, padding=True,
                          return_tensors="pt").to(device)
        states = encoder(**batch).last_hidden_state.float()
        out[torch.from_numpy(idx)] = masked_mean(states, batch["attention_mask"]).cpu()
    encoder.train(was_training)
    return out


class FrozenRandomHead(nn.Module):
    """The reference code's entity head: it replaces the classifier of a ``BertForSequenceClassification`` after
    building the optimiser, so the part's entities are scored by dropout and a randomly initialised linear map on the
    pooler output (pooler frozen with the base) that never trains; only the adapter learns."""

    reads_pooler = True  # EntityPredictor feeds it the pooler output, not the last layer's [CLS]

    def __init__(self, hidden: int, num_classes: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden, max(num_classes, 1)).requires_grad_(False)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(pooled))


def frozen_random_head(encoder, num_classes: int) -> FrozenRandomHead:
    """:class:`FrozenRandomHead` for ``encoder`` (its classifier dropout, as ``BertForSequenceClassification``)."""
    if getattr(encoder, "pooler", None) is None:
        from kinject.api import SpecError

        raise SpecError(f"strategy.entity_head: frozen-random reads the pooler output; {type(encoder).__name__} "
                        "has no pooler")
    config = encoder.config
    dropout = getattr(config, "classifier_dropout", None)
    return FrozenRandomHead(config.hidden_size, num_classes,
                            dropout if dropout is not None else config.hidden_dropout_prob)


class EntityPredictor(nn.Module):
    """An adapters-initialised encoder (one active adapter) with an entity head: ``head`` if given (e.g. a
    :class:`FrozenRandomHead`), else a :class:`NameScoringHead` given the classes' name embeddings, else a free
    linear layer on the last layer's [CLS]."""

    def __init__(self, encoder: nn.Module, num_classes: int, name_embeddings: torch.Tensor | None = None,
                 head: nn.Module | None = None):
        super().__init__()
        self.encoder = encoder
        self.head = head if head is not None else (
            NameScoringHead(name_embeddings) if name_embeddings is not None
            else nn.Linear(encoder.config.hidden_size, max(num_classes, 1)))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        from transformers.modeling_outputs import SequenceClassifierOutput

        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        hidden = out.pooler_output if getattr(self.head, "reads_pooler", False) else out.last_hidden_state[:, 0]
        logits = self.head(hidden)
        loss = F.cross_entropy(logits, labels.view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)

    # ``adapters.init`` adds prompt tuning's ``base_model_embeddings``, an alias of the word embeddings; safetensors
    # checkpoints refuse tensors that share memory, so checkpoints leave the alias out and loading fills it back in
    ALIAS = ".prompt_tuning.base_model_embeddings."

    def state_dict(self, *args, **kwargs):
        state = super().state_dict(*args, **kwargs)
        for key in [k for k in state if self.ALIAS in k]:
            del state[key]
        return state

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        aliases = {k: v for k, v in super().state_dict().items() if self.ALIAS in k and k not in state_dict}
        return super().load_state_dict({**state_dict, **aliases}, strict=strict, assign=assign)


@torch.inference_mode()
def ranking_accuracy(model: EntityPredictor, features: list[dict], collator, batch_size: int = 256,
                     ks: tuple[int, ...] = (1, 10)) -> dict[str, float]:
    """Accuracy@k of the gold class among the model's scores (batched; no full score matrix in memory)."""
    if not features:
        return {f"accuracy@{k}": float("nan") for k in ks} | {"n": 0}
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    hits = {k: 0 for k in ks}
    top1: set[int] = set()
    for lo in range(0, len(features), batch_size):
        batch = collator(features[lo:lo + batch_size])
        labels = batch.pop("labels").to(device)
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
        gold = logits.gather(1, labels.view(-1, 1))
        rank = (logits > gold).sum(1)  # 0 = gold scored highest
        for k in ks:
            hits[k] += int((rank < k).sum())
        top1.update(logits.argmax(1).tolist())
    model.train(was_training)
    # distinct_top1: how many classes the model ever ranks first (1 = the same answer for every input)
    return {f"accuracy@{k}": hits[k] / len(features) for k in ks} | {"n": len(features), "distinct_top1": len(top1)}


def prior_accuracy(train_labels: list[int], heldout_labels: list[int], ks: tuple[int, ...] = (1, 10)) -> dict:
    """Accuracy@k of ranking the classes by their training frequency for every input: what an adapter that
    learned only the tail prior (and ignores the head entity) scores."""
    if not heldout_labels:
        return {f"accuracy@{k}": float("nan") for k in ks}
    counts = np.bincount(np.asarray(train_labels, dtype=np.int64)) if train_labels else np.zeros(1, dtype=np.int64)
    order = np.argsort(-counts, kind="stable")
    gold = np.asarray(heldout_labels, dtype=np.int64)
    return {f"accuracy@{k}": float(np.isin(gold, order[:k]).mean()) for k in ks}


def check_learning(stage: str, part: int, heldout: dict, prior: dict, trained: dict, trained_prior: dict,
                   margin: float = 0.005) -> None:
    """Warn when a trained adapter scores no better than the tail prior on its own training rows (it learned the
    prior, not the facts); note when it stored training facts that do not carry over to held-out triples."""
    def beats(scores: dict, baseline: dict) -> bool:
        return any(scores[k] > baseline[k] + margin for k in ("accuracy@1", "accuracy@10"))

    if not beats(trained, trained_prior):
        log.warning("%s: partition %d: accuracy@1 %.3f on its own training rows and %.3f held out, no better than "
                    "always answering the most frequent training tails (%.3f; %d distinct top-1 answers): the "
                    "adapter learned the tail prior, not the facts - train it longer, at another learning rate, or "
                    "with entity_head=names", stage, part, trained["accuracy@1"], heldout["accuracy@1"],
                    trained_prior["accuracy@1"], heldout["distinct_top1"])
    elif not beats(heldout, prior):
        log.info("%s: partition %d: stored training facts (accuracy@10 %.3f vs the prior's %.3f) but does not "
                 "generalise to held-out triples (%.3f vs %.3f)", stage, part, trained["accuracy@10"],
                 trained_prior["accuracy@10"], heldout["accuracy@10"], prior["accuracy@10"])


# -- the stage -------------------------------------------------------------------------------------------------- #
class PartAdapterConfig(StageConfig):
    model: ModelRef
    kg: KGSettings
    partition_stage: str  # the input stage whose partition.json / partition.safetensors say which rows are part i
    part: int
    adapter: AdapterSettings  # the resolved adapters config (AdapterConfig.to_dict(), checked by the library)
    training: TrainingSpec
    seed: int
    heldout_fraction: float
    bidirectional: bool
    entity_head: str  # "names", "linear" or "frozen-random" (MopConfig.entity_head)
    eval_batch_size: int = Field(256, json_schema_extra=NOT_KEYED)


def adapter_body(cfg: PartAdapterConfig, ctx: StageContext) -> None:
    from safetensors.torch import load_file, save_file
    from transformers import set_seed

    from kinject.training import train
    from kinject.knowledge import KGCollator

    folder = ctx.inputs[cfg.partition_stage]
    data = kg_data(cfg.kg, cfg.model, ctx)
    if json.loads((folder / "partition.json").read_text())["kg_data"] != data.path.name:
        raise RuntimeError(f"{ctx.name}: the KG rows differ from those the partition was computed on")
    arrays = load_file(str(folder / "partition.safetensors"))
    parts, triple_part = arrays["parts"].numpy(), arrays["triple_part"].numpy()
    head, _, tail = kg_columns(data)
    rows = np.flatnonzero(triple_part == cfg.part)
    classes = part_classes(parts, cfg.part, head, tail, rows, cfg.bidirectional)
    train_rows, heldout_rows = split_heldout(rows, cfg.heldout_fraction, cfg.seed + cfg.part)
    tokenizer = cfg.model.load_tokenizer()

    def features(which: np.ndarray) -> list[dict]:
        out = tail_features(data, which, classes)
        if cfg.bidirectional:
            out += head_features(data, which, classes, tokenizer, cfg.kg.max_length)
        return out

    train_features, heldout_features = features(train_rows), features(heldout_rows)
    name = adapter_name(cfg.part)
    set_seed(cfg.seed + cfg.part)  # adapter and entity-head initialisation
    encoder = cfg.model.load_encoder()
    names = (name_embeddings(encoder, tokenizer, [data.entities[i] for i in classes], cfg.kg.max_length)
             if cfg.entity_head == "names" else None)  # by the base model, before the adapter exists
    encoder = adapter_encoder(encoder, name, cfg.adapter)
    head = frozen_random_head(encoder, len(classes)) if cfg.entity_head == "frozen-random" else None
    model = EntityPredictor(encoder, len(classes), names, head)
    before = base_digest(encoder)
    collator = KGCollator(tokenizer)
    stats: dict = {}
    if train_features and cfg.training.max_steps != 0:
        stats = train(model, train_features, collator, cfg.training, ctx.work, cfg.seed + cfg.part, stage=ctx.name,
                      resume=ctx.resume)
    else:
        log.warning("%s: partition %d: %s; its adapter stays untrained", ctx.name, cfg.part,
                    "adapter_max_steps is 0" if train_features else "no training triples")
    after = base_digest(encoder)
    if after != before:
        raise RuntimeError(f"{ctx.name}: adapter training changed base-model weights")
    heldout = ranking_accuracy(model, heldout_features, collator, cfg.eval_batch_size)
    train_labels = [f["labels"] for f in train_features]
    prior = prior_accuracy(train_labels, [f["labels"] for f in heldout_features])
    # facts stored: accuracy on (a seeded sample of) the training rows themselves, against the same prior
    seen = np.random.default_rng(cfg.seed + cfg.part).permutation(len(train_features))[:TRAIN_PROBE_ROWS]
    seen_features = [train_features[i] for i in np.sort(seen)]
    trained = ranking_accuracy(model, seen_features, collator, cfg.eval_batch_size)
    trained_prior = prior_accuracy(train_labels, [f["labels"] for f in seen_features])
    if stats and heldout_features:
        check_learning(ctx.name, cfg.part, heldout, prior, trained, trained_prior)
    _write_dose(ctx, cfg, data, train_rows, train_features, stats)
    encoder.save_adapter(str(ctx.out / "adapter"), name, use_safetensors=True)
    saved = saved_adapter_digest(ctx.out / "adapter")  # the fusion checks what it loads against this
    save_file({**{k: v.detach().contiguous() for k, v in model.head.state_dict().items()},
               "classes": torch.from_numpy(classes)}, str(ctx.out / "entity_head.safetensors"))
    summary = {"part": cfg.part, "adapter": name, "entities": int((parts == cfg.part).sum()),
               "classes": int(len(classes)), "triples": int(len(rows)), "train_rows": len(train_features),
               "heldout_rows": len(heldout_features), "heldout": heldout, "heldout_prior": prior,
               "entity_head": cfg.entity_head, "train_probe": trained, "train_probe_prior": trained_prior,
               "train_loss": stats.get("train_loss"), "useful_token_fraction": stats.get("useful_token_fraction"),
               "train_seconds": stats.get("train_runtime"), "train": stats,
               "base_sha256": after, "base_unchanged": after == before, "adapter_sha256": saved}
    (ctx.out / "adapter.json").write_text(json.dumps(plain(summary), indent=1))
    log.info("%s: %d classes, %d training rows, held-out accuracy@1 %.3f", ctx.name, len(classes),
             len(train_features), heldout.get("accuracy@1", float("nan")))


def _write_dose(ctx: StageContext, cfg: PartAdapterConfig, data, train_rows: np.ndarray, features: list[dict],
                stats: dict) -> None:
    """The adapter's knowledge dose: the part's training triples its steps consumed (the training library's
    length-grouped order, reconstructed), against the part's training triples."""
    from kinject.knowledge import triple_keys, write_kg_dose
    from kinject.training import consumed_rows

    triple_of = np.concatenate([train_rows] * (2 if cfg.bidirectional else 1)).astype(np.int64)
    steps = int(stats.get("global_step", 0)) if stats else 0
    taken = consumed_rows([len(f["input_ids"]) for f in features], cfg.training.batch_size, steps,
                          cfg.seed + cfg.part, cfg.training.gradient_accumulation_steps)
    write_kg_dose(ctx.out, data, {"tail": triple_of[taken]}, rows_total=len(features),
                  available=len(np.unique(triple_keys(data, train_rows))))
