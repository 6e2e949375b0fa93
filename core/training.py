"""Training and prediction through HF Trainer: seeded, length-grouped, dynamically padded, resumable,
and launchable unchanged under torchrun / accelerate launch (DDP; gloo on CPU)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from kinject.spec import TrainingSpec


class PaddingCounter:
    """Wraps a collator and counts useful (non-pad) vs all tokens it emits."""

    def __init__(self, collator: Callable):
        self.collator = collator
        self.useful = 0
        self.total = 0

    def __call__(self, features: list[dict]) -> dict:
        batch = self.collator(features)
        mask = batch.get("attention_mask")
        if mask is not None:
            self.useful += int(mask.sum())
            self.total += int(mask.numel())
        return batch

    @property
    def useful_fraction(self) -> float:
        return self.useful / self.total if self.total else float("nan")


class LengthBucketSampler:
    """Length-grouped sampling that stays tight on small datasets.

    Shuffle, cut into mega-batches of ``megabatch_mult`` batches, sort each by length, cut into batches, shuffle
    the batches. (transformers' LengthGroupedSampler shrinks mega-batches to a quarter of the data, so on a few
    hundred examples it barely groups: useful-token fractions of ~0.4 on CAPR pairs.) The one partial batch
    goes last, so the DataLoader's re-batching of the index stream keeps every batch intact.
    """

    def __init__(self, lengths: list[int], batch_size: int, megabatch_mult: int = 50):
        self.lengths, self.batch_size, self.megabatch_mult = list(lengths), batch_size, megabatch_mult

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        import torch

        n, bs = len(self.lengths), self.batch_size
        perm = torch.randperm(n).tolist()  # global torch RNG: seeded by the Trainer, restored on resume
        size = bs * max(1, self.megabatch_mult)
        full, partial = [], []
        for start in range(0, n, size):
            mega = sorted(perm[start:start + size], key=lambda i: self.lengths[i], reverse=True)
            for k in range(0, len(mega), bs):
                (full if len(mega[k:k + bs]) == bs else partial).append(mega[k:k + bs])
        order = torch.randperm(len(full)).tolist()
        batches = [full[i] for i in order]
        if batches:  # the longest batch first, so memory errors show up at once
            longest = max(range(len(batches)), key=lambda b: self.lengths[batches[b][0]])
            batches[0], batches[longest] = batches[longest], batches[0]
        return iter([i for batch in batches + partial for i in batch])


def with_length_buckets(trainer_cls):
    """A subclass of ``trainer_cls`` whose training sampler is :class:`LengthBucketSampler`."""

    class LengthBucketTrainer(trainer_cls):
        def _get_train_sampler(self, train_dataset=None):
            if not self.args.group_by_length or self.train_dataset is None:
                return super()._get_train_sampler(train_dataset)
            source = self.train_dataset
            columns = getattr(source, "column_names", [])
            lengths = source["length"] if "length" in columns else [len(x["input_ids"]) for x in source]
            return LengthBucketSampler(lengths, self.args.train_batch_size * self.args.gradient_accumulation_steps)

    LengthBucketTrainer.__name__ = f"LengthBucket{trainer_cls.__name__}"
    return LengthBucketTrainer


def to_dataset(features: list[dict]):
    """Features (dicts of lists) -> a datasets.Dataset with a ``length`` column for length grouping."""
    from datasets import Dataset

    rows = [dict(f, length=len(f["input_ids"])) for f in features]
    return Dataset.from_list(rows)


def training_arguments(training: TrainingSpec, output_dir: Path, seed: int, **overrides: Any):
    import torch
    from transformers import TrainingArguments

    cpu = not torch.cuda.is_available()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        num_train_epochs=training.epochs,
        max_steps=training.max_steps,
        learning_rate=training.learning_rate,
        per_device_train_batch_size=training.batch_size,
        per_device_eval_batch_size=training.eval_batch_size,
        weight_decay=training.weight_decay,
        warmup_ratio=training.warmup_ratio,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        group_by_length=training.group_by_length,
        length_column_name="length",
        logging_steps=training.logging_steps,
        save_strategy="steps",
        save_steps=training.save_steps,
        save_total_limit=1,
        save_safetensors=True,
        seed=seed,
        data_seed=seed,
        report_to=[],
        use_cpu=cpu,
        bf16=training.bf16 and not cpu,
        dataloader_num_workers=0,
        disable_tqdm=os.environ.get("KINJECT_PROGRESS", "1") == "0",
        remove_unused_columns=True,
    )
    if distributed and cpu:
        kwargs["ddp_backend"] = "gloo"
    if distributed:
        kwargs["ddp_find_unused_parameters"] = False
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)


def last_checkpoint(work: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    if not Path(work).is_dir():
        return None
    return get_last_checkpoint(str(work))


class _HookCallback:
    """Forward Trainer logs to the kinject.hooks lifecycle event ``kinject_metrics_logged``."""

    def __new__(cls, stage: str):
        from transformers import TrainerCallback

        class Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and state.is_world_process_zero:
                    from kinject.hooks import plugin_manager

                    numeric = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}
                    plugin_manager().hook.kinject_metrics_logged(stage=stage, metrics=numeric,
                                                                 step=state.global_step)

        return Callback()


def train(model, features: list[dict], collator: Callable, training: TrainingSpec, work: Path, seed: int,
          stage: str = "train", resume: bool = False, trainer_cls=None, **arg_overrides: Any) -> dict[str, float]:
    """Train ``model`` in place on ``features``. Returns training stats (loss, samples/s, useful-token
    fraction). Checkpoints go to ``work``; ``resume`` restarts from the last one there."""
    from transformers import Trainer, set_seed

    set_seed(seed)
    counter = PaddingCounter(collator)
    args = training_arguments(training, work, seed, **arg_overrides)
    trainer_cls = with_length_buckets(trainer_cls or Trainer)
    trainer = trainer_cls(model=model, args=args, train_dataset=to_dataset(features), data_collator=counter,
                          callbacks=[_HookCallback(stage)])
    checkpoint = last_checkpoint(work) if resume else None
    result = trainer.train(resume_from_checkpoint=checkpoint)
    stats = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    stats["useful_token_fraction"] = counter.useful_fraction
    stats["global_step"] = float(result.global_step)
    stats["world_size"] = float(args.world_size)
    stats["resumed_from_step"] = float(int(checkpoint.rsplit("-", 1)[-1])) if checkpoint else 0.0
    return stats


def predict(model, features: list[dict], collator: Callable, training: TrainingSpec, work: Path,
            seed: int) -> np.ndarray:
    """Logits for ``features`` in their original order (gathered across processes under DDP)."""
    from transformers import Trainer

    args = training_arguments(training, work, seed, group_by_length=False)
    trainer = Trainer(model=model, args=args, data_collator=collator)
    dataset = to_dataset(features).remove_columns(["length"])
    output = trainer.predict(dataset)
    logits = output.predictions
    if isinstance(logits, tuple):
        logits = logits[0]
    return np.asarray(logits)
