"""KIMERA phase 2 (kimera-retrain): multi-task knowledge-graph retraining under a head mask.

Tasks (paper section 2.2): entity prediction as MLM over every token of the masked entity (o given
(s, r) and s given (r, o)), relation prediction (multi-class), triplet classification (binary, with
corrupted negatives), on the model of :mod:`.multitask`. Each batch holds one task. ``task_sampling``:
``proportional`` shuffles every batch of every task together (task i drawn with probability pi_i ~ its size:
expected loss sum_i pi_i alpha_i L_i) or ``uniform`` lets the tasks take turns (expected loss
sum_i alpha_i L_i / n). The head mask scales each head's updates (masks.HeadUpdateScaler) and, with
``forward_mask``, gates the heads in the forward pass as well.
"""

from __future__ import annotations

import json
import logging
import random
from functools import partial
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
from pydantic import Field
from torch import nn

from kinject.api import (NOT_KEYED, KinjectError, ModelRef, SourceRef, StageConfig, StageContext, TrainingSpec,
                         is_main_process)
from kinject.training import (HookCallback, last_checkpoint, length_grouped_batches, quiet_progress, save_model,
                              token_budget_batches, training_arguments)

from .gating import HeadGates, head_layout
from .heldout import build_retraining_data, score_heldout
from .masks import HeadUpdateScaler, freeze_non_attention, load_mask
from .multitask import KG_TASKS, TASK_ID, KGMultiTaskModel, pretrained_mlm_head

log = logging.getLogger("kinject")


class KGSettings(StageConfig):
    """The KG rows the retraining builds and its budget: the ``kg_*`` options of the KIMERA config."""

    steps: int  # optimiser steps (unless epochs is set)
    epochs: float | None  # the run's knowledge.epochs: epochs of the KG rows instead of steps
    batch_size: int  # rows per batch (unless token_budget is set)
    token_budget: int | None  # padded tokens per batch (None: batch_size rows per batch)
    learning_rate: float
    max_length: int  # tokens per KG sequence
    max_triples: int | None  # the first N triples of the source (None: all)
    heldout: int  # triples held out of the retraining and scored after it (0: none)


class RetrainConfig(StageConfig):
    """Multi-task KG retraining of the pre-trained encoder (or a random init) under a head mask."""

    model: ModelRef
    seed: int
    mask: Literal["none", "hard", "soft"]
    mask_stage: str | None = None  # the input stage whose masks.json holds the mask (None: mask none)
    forward_mask: bool
    from_scratch: bool
    source: SourceRef
    kg: KGSettings
    alphas: dict[str, float]
    task_sampling: Literal["proportional", "uniform"] = "proportional"
    pooling: str
    other_params: str
    weight_decay: float
    warmup_ratio: float
    bf16: bool
    save_steps: int = Field(500, json_schema_extra=NOT_KEYED)  # checkpoint interval (what --resume restarts from)

    def cost(self, run) -> float:
        from kinject.training import trained_flops

        kg = self.kg
        steps = kg.steps
        if kg.epochs:  # epochs of the graph's rows: at most max_triples of them
            steps = kg.epochs * (kg.max_triples or 20000) / kg.batch_size
        return trained_flops(run, steps, kg.batch_size, kg.max_length / 2)  # triples: ~half


def retrain_body(cfg: RetrainConfig, ctx: StageContext) -> None:
    """model/ (the retrained encoder, without the KG heads) and retrain.json (training and KG statistics)."""
    tokenizer = cfg.model.load_tokenizer()
    encoder = initial_encoder(cfg)
    mlm_head = None if cfg.from_scratch else pretrained_mlm_head(cfg.model.path, cfg.model.revision)
    kg = cfg.kg
    alphas = dict(cfg.alphas)
    tasks = [t for t in KG_TASKS if alphas[t] > 0]
    data, held = build_retraining_data(cfg.source.build(), cfg.source.environment(ctx), tokenizer, cfg.seed, tasks,
                                       max_length=kg.max_length, max_triples=kg.max_triples, heldout=kg.heldout)
    if len(data.relations) < 2 and "relation" in tasks:  # one relation: nothing to predict
        log.warning("kimera: the KG has %d relation type(s); relation prediction disabled", len(data.relations))
        alphas["relation"] = 0.0
        tasks.remove("relation")
    head_mask = None
    if cfg.mask != "none":
        shape = (encoder.config.num_hidden_layers, encoder.config.num_attention_heads)
        head_mask = load_mask(ctx.inputs[cfg.mask_stage] / "masks.json", cfg.mask, shape)
    training = TrainingSpec(epochs=kg.epochs or 1, max_steps=-1 if kg.epochs else kg.steps,
                            learning_rate=kg.learning_rate, batch_size=kg.batch_size,
                            weight_decay=cfg.weight_decay, warmup_ratio=cfg.warmup_ratio, group_by_length=False,
                            save_steps=cfg.save_steps, logging_steps=max(kg.steps // 10, 1) if not kg.epochs else 100,
                            bf16=cfg.bf16)
    scorer = None
    if held is not None:
        scorer = partial(score_heldout, heldout=held, train=data, tasks=tasks, tokenizer=tokenizer,
                         batch_size=2 * kg.batch_size, seed=cfg.seed)
    stats = retrain(encoder, tokenizer, {t: getattr(data, t) for t in tasks}, len(data.relations), training,
                    ctx.work, cfg.seed, mask=head_mask, forward_mask=cfg.forward_mask, other_params=cfg.other_params,
                    pooling=cfg.pooling, alphas=alphas, batches_of=kg_batches(kg.token_budget),
                    resume=ctx.resume,
                    task_sampling=cfg.task_sampling, mlm_head=mlm_head, heldout=scorer)
    stats["kg"] = data.stats
    consumed, rows_total = stats.pop("_consumed"), stats.pop("_rows_per_epoch")
    if is_main_process():
        from kinject.knowledge import write_kg_dose

        save_model(encoder, tokenizer, ctx.out / "model")
        stats["dose"] = write_kg_dose(ctx.out, data, consumed, rows_total)
        (ctx.out / "retrain.json").write_text(json.dumps(stats, indent=2, default=str))


def initial_encoder(cfg: RetrainConfig) -> nn.Module:
    """The pre-trained encoder, or (``from_scratch``) its architecture with a seeded random init."""
    if not cfg.from_scratch:
        return cfg.model.load_encoder()
    from transformers import AutoConfig, AutoModel

    from kinject.api import keep_layers

    torch.manual_seed(cfg.seed)
    config = AutoConfig.from_pretrained(cfg.model.path, revision=cfg.model.revision)
    return keep_layers(AutoModel.from_config(config, attn_implementation=cfg.model.attn_implementation),
                       cfg.model.layers)


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


def kg_batches(token_budget: int | None):
    """``batches_of(lengths, batch_size, seed)`` for the retraining: rows of similar length, ``batch_size`` rows per
    batch, or as many rows as fit ``token_budget`` padded tokens (kinject.training.token_budget_batches)."""
    if not token_budget:
        return length_grouped_batches
    return lambda lengths, _batch_size, seed: token_budget_batches(lengths, token_budget, seed)


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
        from kinject.knowledge import lengths_of

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

    def consumed(self, steps: int) -> tuple[dict[str, np.ndarray], int]:
        """The rows of each task the first ``steps`` batches took (epoch plans in order, with repeats), and the rows
        of one epoch's plan: what the retraining's dose counts."""
        taken: list[list[int]] = []
        epoch = 0
        while len(taken) < steps:
            plan = self._plan(epoch)
            if not plan:
                break
            taken += plan[: steps - len(taken)]
            epoch += 1
        flat = np.asarray([i for batch in taken for i in batch], dtype=np.int64)
        starts = [self.data.offsets[n] for n in self.data.names]
        out = {}
        for name, start, end in zip(self.data.names, starts, [*starts[1:], len(self.data)]):
            inside = flat[(flat >= start) & (flat < end)]
            out[name] = inside - start
        return out, sum(len(batch) for batch in self._plan(0))

    def __iter__(self):
        plan = self._plan_of(self.epoch)
        if not self._told:
            self.epoch += 1
        return iter(plan)


class TaskCollator:
    """kinject.knowledge.KGCollator (dynamic padding) plus the batch's task id."""

    def __init__(self, tokenizer):
        from kinject.knowledge import KGCollator

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

    set_seed(seed)
    model = KGMultiTaskModel(encoder, num_relations, pooling, alphas)
    if mlm_head is not None:
        model.load_mlm_head(mlm_head)
    if other_params == "freeze":
        frozen = freeze_non_attention(model, encoder)
        log.info("kimera retrain: %d non-attention encoder parameters frozen", frozen)
    data = KGBatchDataset(datasets)
    sampler = MultiTaskBatchSampler(data, training.batch_size, seed, model.alphas,
                                    batches_of or length_grouped_batches, task_sampling)
    if not len(sampler):
        raise KinjectError("KIMERA retraining: no KG batches (every task empty or disabled by alpha 0)")
    scaler = HeadUpdateScaler(encoder, mask) if mask is not None else None
    gates = HeadGates(encoder, (1.0 - mask).clamp(0, 1), head_layout(encoder)) if forward_mask and mask is not None \
        else None
    args = training_arguments(training, work, seed, group_by_length=False, remove_unused_columns=False,
                              ddp_find_unused_parameters=True, label_names=["labels"])
    trainer = kg_trainer_class()(model=model, args=args, train_dataset=data, batch_sampler=sampler,
                                 data_collator=TaskCollator(tokenizer),
                                 update_scaler=scaler, callbacks=[HookCallback("kimera-retrain")])
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
    stats["_consumed"], stats["_rows_per_epoch"] = sampler.consumed(trainer.state.global_step)
    if heldout is not None:
        stats["heldout"] = heldout(model)
    return stats
