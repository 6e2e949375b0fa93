"""Training and prediction through HF Trainer: seeded, length-grouped, dynamically padded, resumable,
and launchable unchanged under torchrun / accelerate launch (DDP; gloo on CPU)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from kinject.api import TrainingSpec


def length_grouped_batches(lengths: np.ndarray | Sequence[int], batch_size: int, seed: int | None = None,
                           mega: int = 50, rng: np.random.Generator | None = None,
                           permutation: Callable[[int], Sequence[int]] | None = None) -> list[list[int]]:
    """Shuffled batches of rows of similar length.

    Shuffle the rows, sort them by length (longest first, stable) inside mega-batches of ``mega``
    batches, cut into batches, shuffle the full batches. The batch with the longest row comes first (memory
    errors show at once); the one partial batch comes last, so a DataLoader re-batching the flattened index
    stream keeps every batch intact. Randomness: ``permutation(n)`` (e.g. ``lambda n: torch.randperm(n)
    .tolist()`` for the global torch RNG), else ``rng``, else ``np.random.default_rng(seed)``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if permutation is None:
        generator = rng if rng is not None else np.random.default_rng(seed)
        permutation = generator.permutation
    span = batch_size * max(1, mega)
    order = np.asarray(permutation(len(lengths)), dtype=np.int64)
    full, partial = [], []
    for lo in range(0, len(order), span):
        block = order[lo:lo + span]
        block = block[np.argsort(-lengths[block], kind="stable")]
        for i in range(0, len(block), batch_size):
            (full if len(block[i:i + batch_size]) == batch_size else partial).append(block[i:i + batch_size].tolist())
    batches = [full[int(i)] for i in permutation(len(full))]
    if batches:
        longest = max(range(len(batches)), key=lambda b: lengths[batches[b][0]])
        batches[0], batches[longest] = batches[longest], batches[0]
    return batches + partial


def useful_token_fraction(lengths: np.ndarray | Sequence[int], batches: list[list[int]]) -> float:
    """Non-pad tokens / all tokens when each batch is padded to its longest row."""
    lengths = np.asarray(lengths)
    useful = sum(int(lengths[b].sum()) for b in batches)
    total = sum(int(lengths[b].max()) * len(b) for b in batches)
    return useful / total if total else float("nan")


class PaddingCounter:
    """Wraps a collator and counts useful (non-pad) vs all tokens it emits.

    In a DataLoader worker process the counts travel inside the batch (``TOKEN_COUNTS``, two ints; the trainers of
    :func:`with_length_buckets` take them out before the forward), so they are right when workers collate."""

    def __init__(self, collator: Callable):
        self.collator = collator
        self.useful = 0
        self.total = 0

    def __call__(self, features: list[dict]) -> dict:
        from torch.utils.data import get_worker_info

        batch = self.collator(features)
        mask = batch.get("attention_mask")
        if mask is not None:
            if get_worker_info() is None:
                self.useful += int(mask.sum())
                self.total += int(mask.numel())
            else:
                batch[TOKEN_COUNTS] = (int(mask.sum()), int(mask.numel()))
        return batch

    def count(self, batch: dict) -> None:
        """Take a worker's counts out of ``batch`` (in the training process)."""
        useful, total = batch.pop(TOKEN_COUNTS, (0, 0))
        self.useful += useful
        self.total += total

    @property
    def useful_fraction(self) -> float:
        return self.useful / self.total if self.total else float("nan")


TOKEN_COUNTS = "kinject_token_counts"


class LengthBucketSampler:
    """Length-grouped sampling that stays tight on small datasets.

    Shuffle, cut into mega-batches of ``megabatch_mult`` batches, sort each by length, cut into batches, shuffle
    the batches. (transformers' LengthGroupedSampler shrinks mega-batches to a quarter of the data, so on a few
    hundred examples it barely groups: useful-token fractions of ~0.4 on CAPR pairs.) The one partial batch
    goes last, so the DataLoader's re-batching of the index stream keeps every batch intact.

    The order of an epoch depends only on ``seed`` and the epoch (the Trainer calls :meth:`set_epoch`), never on
    the global random state, so a run resumed in the middle of any epoch sees the batches it would have seen.
    """

    def __init__(self, lengths: list[int], batch_size: int, megabatch_mult: int = 50, seed: int = 0):
        self.lengths, self.batch_size, self.megabatch_mult = list(lengths), batch_size, megabatch_mult
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        batches = length_grouped_batches(self.lengths, self.batch_size, mega=self.megabatch_mult, rng=rng)
        return iter([i for batch in batches for i in batch])


def consumed_rows(lengths: Sequence[int] | np.ndarray, batch_size: int, steps: int, seed: int,
                  accumulation: int = 1) -> np.ndarray:
    """The rows, in order and with repeats, that the first ``steps`` optimiser steps of :func:`train` (one process,
    length-grouped: :class:`LengthBucketSampler` seeded with ``seed``) consumed: epoch after epoch, each step takes
    ``batch_size x accumulation`` rows of that epoch's order (the last step of an epoch fewer). What a stage's
    knowledge dose counts (:func:`kinject.api.write_dose`)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    per_step = batch_size * accumulation
    if not len(lengths) or steps <= 0:
        return np.zeros(0, dtype=np.int64)
    steps_per_epoch = max(-(-len(lengths) // batch_size) // accumulation, 1)
    out, epoch, left = [], 0, int(steps)
    while left > 0:
        sampler = LengthBucketSampler(lengths, per_step, seed=seed)
        sampler.set_epoch(epoch)
        order = np.fromiter(iter(sampler), dtype=np.int64, count=len(lengths))
        take = min(left, steps_per_epoch)
        out.append(order[: take * per_step] if take < steps_per_epoch else order)
        left -= take
        epoch += 1
    return np.concatenate(out)


def row_lengths(dataset) -> list[int]:
    """Token count of each row of a dataset: its ``length`` column, else the lengths of its ``input_ids`` (read from
    the Arrow column, not row by row)."""
    columns = getattr(dataset, "column_names", [])
    if "length" in columns:
        return list(dataset["length"])
    table = getattr(dataset, "data", None)
    if table is not None and "input_ids" in columns and getattr(dataset, "_indices", None) is None:
        import pyarrow.compute as pc

        return pc.list_value_length(table.column("input_ids")).to_numpy(zero_copy_only=False).tolist()
    return [len(x["input_ids"]) for x in dataset]


def with_length_buckets(trainer_cls):
    """A subclass of ``trainer_cls`` whose training sampler is :class:`LengthBucketSampler` (and which takes the
    :class:`PaddingCounter`'s counts out of each batch)."""

    class LengthBucketTrainer(trainer_cls):
        def training_step(self, model, inputs, *args, **kwargs):
            if TOKEN_COUNTS in inputs:
                counter = self.data_collator
                counter.count(inputs) if isinstance(counter, PaddingCounter) else inputs.pop(TOKEN_COUNTS)
            return super().training_step(model, inputs, *args, **kwargs)

        def _get_train_sampler(self, train_dataset=None):
            if not self.args.group_by_length or self.train_dataset is None:
                return super()._get_train_sampler(train_dataset)
            lengths = row_lengths(self.train_dataset)
            return LengthBucketSampler(lengths, self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                       seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed)

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
        report_to=list(training.report_to),
        logging_dir=os.path.join(os.environ["KINJECT_LOG_DIR"], output_dir.parent.parent.name)
        if os.environ.get("KINJECT_LOG_DIR") else None,
        use_cpu=cpu,
        bf16=bool(training.bf16),  # on a CPU: bfloat16 autocast (fast with AVX512-BF16 / AMX)
        dataloader_num_workers=0,
        disable_tqdm=os.environ.get("KINJECT_PROGRESS", "1") == "0",
        remove_unused_columns=True,
        torch_compile=training.compile,
    )
    if not cpu:  # a GPU step must not wait for the host: no sync for the loss filter, copies that do not block
        kwargs.update(accelerator_config={"non_blocking": True}, logging_nan_inf_filter=False)
    if distributed and cpu:
        kwargs["ddp_backend"] = "gloo"
    if distributed:
        kwargs["ddp_find_unused_parameters"] = False
    kwargs.update(overrides)
    _reset_precision(bool(kwargs["bf16"]))
    os.environ.pop("ACCELERATE_DYNAMO_BACKEND", None)  # torch_compile outlives its Trainer there (as precision does)
    return TrainingArguments(**kwargs)


def last_checkpoint(work: Path) -> str | None:
    """The newest complete Trainer checkpoint in ``work`` (None: none). A checkpoint is complete once its
    trainer_state.json, which the Trainer writes last, reads back; newer incomplete ones (a process killed while
    writing) are removed, so training resumes from the one before and rewrites them."""
    import json
    import re
    import shutil

    work = Path(work)
    if not work.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in work.iterdir()
                   if p.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", p.name)))
    from kinject.api import weights_problem

    for step, folder in reversed(found):
        problem = None
        try:
            state = json.loads((folder / "trainer_state.json").read_text())
            if int(state.get("global_step", -1)) != step:
                problem = "its trainer_state.json is not of this step"
            else:  # every weights file whole: a power loss can leave a short file behind a complete state file
                problem = next((f"{p.name}: {why}" for p in sorted(folder.glob("*.safetensors"))
                                if (why := weights_problem(p))), None)
        except (OSError, ValueError, TypeError):
            problem = "its trainer_state.json is missing or unreadable"
        if problem is None:
            return str(folder)
        import logging

        logging.getLogger("kinject").warning("resume: %s is incomplete (%s: the process stopped while writing it); "
                                             "resuming from the checkpoint before it", folder, problem)
        shutil.rmtree(folder, ignore_errors=True)
    return None


class HookCallback:
    """Forward Trainer logs to the kinject.hooks event ``kinject_metrics_logged``; with a ``scorer``, also
    score the dev split every ``eval_steps`` steps and announce it as ``eval/<metric>``."""

    def __new__(cls, stage: str, scorer: Callable | None = None, eval_steps: int | None = None,
                skip: Callable | None = None):
        from transformers import TrainerCallback

        def announce(metrics: dict, step: int) -> None:
            from kinject.api import plugin_manager

            plugin_manager().hook.kinject_metrics_logged(stage=stage, metrics=metrics, step=step)

        class Callback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and state.is_world_process_zero:
                    announce({k: float(v) for k, v in logs.items() if isinstance(v, (int, float))},
                             state.global_step)

            def on_step_end(self, args, state, control, model=None, **kwargs):
                from kinject.api import check_fence

                check_fence()  # a holder whose lease another process took over stops writing (KINJECT_LOCK=lease)
                if scorer and eval_steps and state.global_step % eval_steps == 0 and state.is_world_process_zero \
                        and not (skip and skip(state)):
                    scores = scorer(model)
                    announce({f"eval/{k}": float(v) for k, v in scores.items() if isinstance(v, (int, float))},
                             state.global_step)

        return Callback()


class EpochCallback:
    """Tell ``target.set_epoch(epoch)`` (a collator, a dataset) the epoch the Trainer begins, resumed runs too, so
    what it draws can depend on the epoch without depending on the global random state."""

    def __new__(cls, target):
        import math

        from transformers import TrainerCallback

        class Callback(TrainerCallback):
            def on_epoch_begin(self, args, state, control, **kwargs):
                target.set_epoch(math.floor(state.epoch + 1e-9) if state.epoch else 0)

        return Callback()


def quiet_progress(trainer) -> None:
    """Keep the progress bar, drop the Trainer's own printing of each log dict (kinject's hook logs it)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class Progress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(Progress)


def train(model, features, collator: Callable, training: TrainingSpec, work: Path, seed: int,
          stage: str = "train", resume: bool = False, trainer_cls=None, scorer: Callable | None = None,
          selection_metric: str | None = None, **arg_overrides: Any) -> dict[str, float]:
    """Train ``model`` in place on ``features`` (a list of feature dicts, or a ``datasets.Dataset`` with a
    ``length`` column, which stays memory-mapped). Returns training stats (loss, samples/s, useful-token
    fraction). Checkpoints go to ``work``; ``resume`` restarts from the last one there. ``scorer(model)``
    (see :func:`dev_scorer`) is called every ``training.eval_steps`` steps; with ``training.selection`` best and a
    ``selection_metric``, it also selects the best model on dev (:mod:`.selection`; ``stats["selection"]``)."""
    from transformers import Trainer, set_seed

    set_seed(seed)
    counter = PaddingCounter(collator)
    if training.min_steps and training.max_steps < 0:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        per_epoch = -(-len(features) // (training.batch_size * training.gradient_accumulation_steps * world))
        if per_epoch * training.epochs < training.min_steps:
            arg_overrides.setdefault("max_steps", training.min_steps)
    if _cuda() and not hasattr(collator, "set_epoch"):  # collate in 2 worker processes while the GPU computes
        arg_overrides = {"dataloader_num_workers": min(2, os.cpu_count() or 1), "dataloader_persistent_workers": True,
                         **arg_overrides}
    args = training_arguments(training, work, seed, **arg_overrides)
    trainer_cls = with_length_buckets(trainer_cls or Trainer)
    dataset = features if hasattr(features, "column_names") else to_dataset(features)
    optimizers = (head_optimizer(model, training), None) if training.head_learning_rate else (None, None)
    checkpoint = last_checkpoint(work) if resume else None
    selecting = training.selection == "best" and scorer is not None and selection_metric is not None
    selection = None
    if selecting:
        from .selection import DevSelection

        selection = DevSelection(scorer, selection_metric, work, training.select_every, training.patience,
                                 checkpoint, stage, greater_is_better=scorer.task.greater_is_better(selection_metric)
                                 if hasattr(scorer, "task") else True)
    # dev scores announced every eval_steps, except where the selection scores (and announces) them anyway
    callbacks = [HookCallback(stage, scorer, training.eval_steps, selection.scores_at if selection else None)]
    callbacks += [selection] if selection else []
    trainer = trainer_cls(model=model, args=args, train_dataset=dataset, data_collator=counter,
                          callbacks=callbacks, optimizers=optimizers)
    quiet_progress(trainer)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    stats = {k: float(v) for k, v in result.metrics.items() if isinstance(v, (int, float))}
    stats["useful_token_fraction"] = counter.useful_fraction
    stats["global_step"] = float(result.global_step)
    stats["world_size"] = float(args.world_size)
    stats["resumed_from_step"] = float(int(checkpoint.rsplit("-", 1)[-1])) if checkpoint else 0.0
    if selection is not None:
        stats["selection"] = selection.summary()
    return stats




def head_optimizer(model, training: TrainingSpec):
    """AdamW with the task head at ``training.head_learning_rate`` and the rest at ``learning_rate`` (weight
    decay on weights, not on biases and LayerNorms, as the Trainer does); the Trainer adds the schedule."""
    import torch

    from .peft_tuning import HEAD_MODULES, is_head_parameter

    groups: dict[tuple[bool, bool], list] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        head = is_head_parameter(name)
        decay = param.ndim > 1 and "LayerNorm" not in name and "layer_norm" not in name
        groups.setdefault((head, decay), []).append(param)
    if not any(head for head, _ in groups):
        from kinject.api import SpecError

        raise SpecError(f"training.head_learning_rate: {type(model).__name__} has no task head "
                        f"({', '.join(HEAD_MODULES)})")
    return torch.optim.AdamW([{"params": params, "weight_decay": training.weight_decay if decay else 0.0,
                               "lr": training.head_learning_rate if head else training.learning_rate}
                              for (head, decay), params in groups.items()], lr=training.learning_rate)


def _by_length(features: list[dict]) -> np.ndarray:
    """Indices of ``features`` longest first (stable), so evaluation batches pad little."""
    return np.argsort([-len(f["input_ids"]) for f in features], kind="stable")


def _unsort(logits: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(logits)
    out[order] = logits
    return out


def predict(model, features: list[dict], collator: Callable, batch_size: int, work: Path,
            bf16: bool = False) -> np.ndarray:
    """Logits for ``features`` in their original order (gathered across processes under DDP).

    Examples are scored longest first with dynamic padding, so a batch pads only to its own longest row.
    ``bf16``: bfloat16 autocast, the task head kept in float32 (:func:`float32_head`) so scores do not tie.
    """
    from transformers import Trainer, TrainingArguments

    from kinject.api import world_size

    order = _by_length(features)
    cpu = not _cuda()
    kwargs: dict[str, Any] = dict(output_dir=str(work), per_device_eval_batch_size=batch_size, report_to=[],
                                  use_cpu=cpu, dataloader_num_workers=0, disable_tqdm=True, bf16=bf16)
    if world_size() > 1 and cpu:
        kwargs["ddp_backend"] = "gloo"
    _reset_precision(bf16)
    args = TrainingArguments(**kwargs)
    trainer = Trainer(model=model, args=args, data_collator=collator)
    with float32_head(model, bf16):
        output = trainer.predict(to_dataset([features[i] for i in order]).remove_columns(["length"]))
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    return _unsort(np.asarray(logits), order)


MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def predict_here(model, features: list[dict], collator: Callable, batch_size: int, bf16: bool = False) -> np.ndarray:
    """Logits in this process only (no Trainer): for scoring during training. Token logits are padded with
    -100 to the longest row, as ``Trainer.predict`` pads them."""
    import contextlib

    import torch

    order = _by_length(features)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    chunks = []
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.inference_mode(), autocast, float32_head(model, bf16):
        for lo in range(0, len(order), batch_size):
            batch = collator([{k: v for k, v in features[i].items() if k in MODEL_INPUTS} for i in order[lo:lo + batch_size]])
            batch = {k: v.to(device) for k, v in batch.items() if k in MODEL_INPUTS}
            chunks.append(model(**batch).logits.float().cpu().numpy())
    model.train(was_training)
    if chunks and chunks[0].ndim == 3:
        width = max(c.shape[1] for c in chunks)
        chunks = [np.pad(c, ((0, 0), (0, width - c.shape[1]), (0, 0)), constant_values=-100) for c in chunks]
    return _unsort(np.concatenate(chunks), order)


class DevScorer:
    """``scorer(model) -> metrics`` on the task's dev split (its first evaluation split when it has none named dev;
    for ``training.eval_steps`` and ``training.selection``). ``last_logits`` are the logits of the latest call;
    :meth:`keep_best` marks them as the selected model's (``best_logits``), so the evaluation after training need
    not score dev again."""

    def __init__(self, task, env, tokenizer, max_length: int, training: TrainingSpec):
        self.task, self.env, self.training = task, env, training
        self.split = "dev" if "dev" in task.eval_splits else task.eval_splits[0]
        self.examples = task.examples(self.split, env)
        self.features = task.featurize(tokenizer, self.examples, max_length, env)
        self.collator = task.collator(tokenizer)
        self.last_logits: np.ndarray | None = None
        self.best_logits: np.ndarray | None = None

    def __call__(self, model) -> dict[str, float]:
        self.last_logits = predict_here(model, self.features, self.collator, self.training.eval_batch_size,
                                        bool(self.training.bf16))
        return self.task.score(self.split, self.examples, self.features, self.last_logits, self.env)

    def keep_best(self) -> None:
        self.best_logits = self.last_logits


def dev_scorer(task, env, tokenizer, max_length: int, training: TrainingSpec) -> DevScorer:
    """The :class:`DevScorer` of ``task``'s dev split."""
    return DevScorer(task, env, tokenizer, max_length, training)


def _reset_precision(bf16: bool) -> None:
    """Call before making TrainingArguments. Mixed precision outlives the Trainer that set it: TrainingArguments
    writes it into ``ACCELERATE_MIXED_PRECISION`` and never clears it, and accelerate keeps one process-wide
    AcceleratorState, so a float32 Trainer made after a bf16 one in the same process would still autocast."""
    from accelerate.state import AcceleratorState

    wanted = "bf16" if bf16 else "no"
    if os.environ.get("ACCELERATE_MIXED_PRECISION", "no") in ("no", "bf16"):  # leave fp16/fp8 users' setting
        os.environ["ACCELERATE_MIXED_PRECISION"] = wanted
    state = AcceleratorState._shared_state
    if state and str(state.get("_mixed_precision", "no")) != wanted:
        AcceleratorState._reset_state()


class float32_head:
    """Context: the task head (:data:`HEAD_MODULES`) runs in float32 even under bfloat16 autocast. A bf16 head
    rounds logits to ~3 significant digits, which ties candidates that a ranking must order."""

    def __init__(self, model, enabled: bool = True):
        from .peft_tuning import HEAD_MODULES

        self.heads = [getattr(model, name) for name in HEAD_MODULES if enabled and hasattr(model, name)]

    def __enter__(self):
        import torch

        for head in self.heads:
            original = head.forward

            def forward(*args, _original=original, **kwargs):
                args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
                with torch.autocast("cuda" if _cuda() else "cpu", enabled=False):
                    return _original(*args, **kwargs)

            head.forward = forward
        return self

    def __exit__(self, *exc):
        for head in self.heads:
            del head.forward  # back to the class's forward
        return False


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
