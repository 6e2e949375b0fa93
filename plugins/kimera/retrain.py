"""KIMERA phase 2: multi-task knowledge-graph retraining under a head mask.

Tasks (paper section 2.2): entity prediction as MLM over every token of the masked entity (o given
(s, r) and s given (r, o)), relation prediction (multi-class), triplet classification (binary, with
corrupted negatives). Each batch holds one task. ``task_sampling``: ``proportional`` shuffles every
batch of every task together (task i drawn with probability pi_i ~ its size: expected loss
sum_i pi_i alpha_i L_i) or ``uniform`` lets the tasks take turns (expected loss sum_i alpha_i L_i / n).
The entity head starts from the model's pre-trained MLM head when the checkpoint has one.
Classification heads pool the encoder output (cls, mean, max, or a learned attention pooling). The head
mask scales each head's updates (masks.HeadUpdateScaler) and, with ``forward_mask``, gates the heads in
the forward pass as well.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from kinject.api import masked_mean

from .gating import HeadGates, head_layout
from .masks import HeadUpdateScaler, freeze_non_attention

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


class TaggedDataset(torch.utils.data.Dataset):
    """A KG task's rows, each tagged with the task id (the collator turns it into the batch's ``task``)."""

    def __init__(self, dataset: Any, task: str):
        self.dataset, self.task_id = dataset, TASK_ID[task]

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict:
        return {**self.dataset[index], "task": self.task_id}


class KGBatchDataset(torch.utils.data.ConcatDataset):
    """The non-empty KG task datasets side by side (in KG_TASKS order); ``offsets[name]`` is where a task's
    rows start."""

    def __init__(self, datasets: dict[str, Any]):
        self.names = [n for n in KG_TASKS if n in datasets and len(datasets[n])]
        super().__init__([TaggedDataset(datasets[n], n) for n in self.names])
        self.offsets = dict(zip(self.names, [0, *self.cumulative_sizes[:-1]]))
        self.tasks = {n: datasets[n] for n in self.names}


class MultiTaskBatchSampler:
    """Batches of one task each (length-grouped within the task), mixed across tasks every epoch.

    ``sampling="proportional"``: every batch of every task once per epoch, shuffled together (a task's share of
    the batches is its share of the rows). ``"uniform"``: the tasks take turns in a shuffled order each turn,
    for as many turns as the largest task has batches; a smaller task starts a new shuffled pass when it runs
    out. ``batches_of(lengths, batch_size, seed)`` yields index lists for one task (kinject.training's
    length_grouped_batches); a task whose alpha is 0 is left out.

    An epoch's plan depends only on the seed and the epoch, which the Trainer sets (:meth:`set_epoch`), so a run
    resumed in the middle of any epoch replays that epoch's plan; iterated without it, each pass is the next epoch.
    """

    def __init__(self, data: KGBatchDataset, batch_size: int, seed: int, alphas: dict[str, float], batches_of,
                 sampling: str = "proportional"):
        from kinject.plugins.knowledge.kg.batching import lengths_of

        if sampling not in ("proportional", "uniform"):
            raise ValueError(f"task sampling {sampling!r} (expected proportional or uniform)")
        self.data, self.batch_size, self.seed, self.batches_of = data, batch_size, seed, batches_of
        self.sampling = sampling
        self.tasks = [n for n in data.names if alphas.get(n, 1.0) > 0]
        self.lengths = {n: lengths_of(data.tasks[n]) for n in self.tasks}
        self.epoch = 0
        self._plans: dict[int, list[list[int]]] = {}
        self._told = False  # set_epoch called: the Trainer counts the epochs

    def _task_batches(self, name: str, seed: int) -> list[list[int]]:
        offset = self.data.offsets[name]
        batches = self.batches_of(self.lengths[name], self.batch_size, seed)
        return [[offset + int(i) for i in batch] for batch in batches]

    def _plan(self, epoch: int) -> list[list[int]]:
        rng = random.Random(self.seed * 1000 + epoch)
        per_task = {name: self._task_batches(name, self.seed + epoch) for name in self.tasks}
        if self.sampling == "proportional":
            plan = [batch for name in self.tasks for batch in per_task[name]]
            rng.shuffle(plan)
            return plan
        turns = max((len(b) for b in per_task.values()), default=0)
        plan, used, passes = [], {name: 0 for name in self.tasks}, {name: 0 for name in self.tasks}
        for _ in range(turns):
            for name in rng.sample(self.tasks, len(self.tasks)):
                if used[name] == len(per_task[name]):  # a smaller task: a new pass, shuffled differently
                    passes[name] += 1
                    per_task[name] = self._task_batches(name, self.seed + epoch + 7919 * passes[name])
                    used[name] = 0
                plan.append(per_task[name][used[name]])
                used[name] += 1
        return plan

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._told = int(epoch), True

    def _plan_of(self, epoch: int) -> list[list[int]]:
        if epoch not in self._plans:
            self._plans = {epoch: self._plan(epoch)}  # keep one epoch's plan
        return self._plans[epoch]

    def __len__(self) -> int:
        return len(self._plan_of(self.epoch))

    def __iter__(self):
        plan = self._plan_of(self.epoch)
        if not self._told:
            self.epoch += 1
        return iter(plan)


class TaskCollator:
    """kinject.plugins.knowledge.kg.batching's KGCollator (dynamic padding) plus the batch's task id."""

    def __init__(self, tokenizer):
        from kinject.plugins.knowledge.kg.batching import KGCollator

        self.inner = KGCollator(tokenizer)

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        batch = self.inner(list(features))
        batch["task"] = torch.tensor([int(f["task"]) for f in features])
        return batch


def kg_trainer_class():
    """A HF Trainer that feeds KG batches from MultiTaskBatchSampler and scales head updates."""
    from transformers import Trainer

    class KimeraTrainer(Trainer):
        def __init__(self, *args, batch_sampler=None, update_scaler: HeadUpdateScaler | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.kg_batch_sampler = batch_sampler
            self.update_scaler = update_scaler

        def get_train_dataloader(self):
            loader = torch.utils.data.DataLoader(self.train_dataset, batch_sampler=self.kg_batch_sampler,
                                                 collate_fn=self.data_collator, num_workers=0)
            return self.accelerator.prepare(loader)

        def create_optimizer(self):
            optimizer = super().create_optimizer()
            if self.update_scaler is not None and not self.update_scaler._handles:
                self.update_scaler.attach(optimizer)
            return optimizer

    return KimeraTrainer


def retrain(encoder: nn.Module, tokenizer, datasets: dict[str, Any], num_relations: int, training, work: Path,
            seed: int, mask: torch.Tensor | None = None, forward_mask: bool = False, other_params: str = "train",
            pooling: str = "cls", alphas: dict[str, float] | None = None, batches_of=None,
            resume: bool = False, task_sampling: str = "proportional",
            mlm_head: dict[str, torch.Tensor] | None = None,
            heldout: Callable[[KGMultiTaskModel], dict] | None = None) -> dict[str, Any]:
    """Train ``encoder`` in place on the KG tasks; ``mask`` (L, H) scales each head's updates by 1 - m.

    ``training`` is a kinject TrainingSpec (max_steps/epochs, learning rate, batch size, decay);
    ``mlm_head`` (:func:`pretrained_mlm_head`) initialises the entity head, else it starts random;
    ``heldout(model)``, called with the trained multi-task model, fills ``stats["heldout"]``.
    """
    from transformers import set_seed

    from kinject.api import training_arguments

    set_seed(seed)
    model = KGMultiTaskModel(encoder, num_relations, pooling, alphas)
    if mlm_head is not None:
        model.load_mlm_head(mlm_head)
    if other_params == "freeze":
        frozen = freeze_non_attention(model, encoder)
        log.info("kimera retrain: %d non-attention encoder parameters frozen", frozen)
    data = KGBatchDataset(datasets)
    if batches_of is None:
        from kinject.api import length_grouped_batches as batches_of
    sampler = MultiTaskBatchSampler(data, training.batch_size, seed, model.alphas, batches_of, task_sampling)
    if not len(sampler):
        from kinject.api import KinjectError

        raise KinjectError("KIMERA retraining: no KG batches (every task empty or disabled by alpha 0)")
    scaler = HeadUpdateScaler(encoder, mask) if mask is not None else None
    gates = HeadGates(encoder, (1.0 - mask).clamp(0, 1), head_layout(encoder)) if forward_mask and mask is not None \
        else None
    from kinject.api import HookCallback, quiet_progress

    args = training_arguments(training, work, seed, group_by_length=False, remove_unused_columns=False,
                              ddp_find_unused_parameters=True, label_names=["labels"])
    trainer = kg_trainer_class()(model=model, args=args, train_dataset=data, batch_sampler=sampler,
                                 data_collator=TaskCollator(tokenizer),
                                 update_scaler=scaler, callbacks=[HookCallback("kimera-retrain")])
    from kinject.api import last_checkpoint

    quiet_progress(trainer)

    checkpoint = last_checkpoint(work) if resume else None
    if gates is not None:
        gates.attach()
    try:
        result = trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        if gates is not None:
            gates.detach()
        if scaler is not None:
            scaler.detach()
    stats = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    stats["global_step"] = float(trainer.state.global_step)
    stats["batches_per_epoch"] = float(len(sampler))
    stats["mlm_head"] = "pretrained" if mlm_head is not None else "random"
    stats.update({f"kg_rows_{n}": float(len(data.tasks[n])) for n in data.names})
    if heldout is not None:
        stats["heldout"] = heldout(model)
    return stats
