"""Training through HF Trainer: seeded, length-grouped (:mod:`.batching`), dynamically padded, resumable, and
launchable unchanged under torchrun / accelerate launch (DDP; gloo on CPU); its callbacks and checkpoints.
Prediction is in :mod:`.prediction`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable


from kinject.api import TrainingSpec

from .batching import PaddingCounter, to_dataset, with_length_buckets
from .prediction import cuda_available, reset_precision


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
    reset_precision(bool(kwargs["bf16"]))
    os.environ.pop("ACCELERATE_DYNAMO_BACKEND", None)  # torch_compile outlives its Trainer there (as precision does)
    return TrainingArguments(**kwargs)


#: the trainer state files a checkpoint may hold -> the keys each one's dict has (as the Trainer writes them)
STATE_FILES = {"optimizer.pt": ("state", "param_groups"), "scheduler.pt": (), "scaler.pt": (),
               "rng_state*.pth": ("python", "numpy", "cpu")}


def state_file_problem(path: Path, keys: tuple[str, ...] = ()) -> str | None:
    """Why a trainer state file (``optimizer.pt``, ``rng_state.pth``, ...) is not one the Trainer can resume from
    (None when it is): a regular file that torch's safe loader reads (memory-mapped) as a dict with ``keys``."""
    import pickle
    import stat
    from contextlib import nullcontext

    import torch

    try:
        from transformers.trainer import safe_globals  # the numpy types an rng_state.pth holds, as the Trainer allows
    except ImportError:
        safe_globals = nullcontext

    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would hang the loader, a device feed it forever
        return "not a regular file"
    try:
        with safe_globals():
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                state = torch.load(path, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError, TypeError, OSError) as exc:
        return f"not a torch state file ({(str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]})"
    if not isinstance(state, dict) or any(key not in state for key in keys):
        return f"a {type(state).__name__} without {', '.join(keys) or 'a state dict'}"
    return None


def checkpoint_problem(folder: Path, step: int) -> str | None:
    """Why the Trainer checkpoint ``folder`` of step ``step`` cannot be resumed from (None: it can): its
    trainer_state.json (written last) missing, damaged or of another step, a weights file cut short, a trainer state
    file (:data:`STATE_FILES`) damaged, the best weights its dev selection refers to missing or cut short."""
    from kinject.api import DataError, read_record, weights_problem

    from .selection import best_weights

    try:
        state = read_record(folder / "trainer_state.json")
    except DataError as exc:
        return f"trainer_state.json: {getattr(exc, 'reason', exc)}"
    if state.get("global_step") != step:
        return "its trainer_state.json is not of this step"
    weights = [*sorted(folder.glob("*.safetensors")), *([best] if (best := best_weights(folder, state)) else [])]
    for path in weights:
        if not path.is_file():
            return f"{path.name}: missing"
        if why := weights_problem(path):
            return f"{path.name}: {why}"
    for pattern, keys in STATE_FILES.items():
        for path in sorted(folder.glob(pattern)):
            if why := state_file_problem(path, keys):
                return f"{path.name}: {why}"
    return None


def stage_of(work: Path) -> str:
    """The stage whose work folder ``work`` is (``<cache>/stages/<stage>/<key>.partial/work``), else the folder."""
    work = Path(work)
    return work.parent.parent.name if work.parent.name.endswith(".partial") else str(work)


def last_checkpoint(work: Path) -> str | None:
    """The newest Trainer checkpoint in ``work`` that training can resume from (None: none), said in one line
    (``resuming stage X from its checkpoint at step N`` or ``no checkpoint: starting stage X over``). Newer ones
    that are incomplete (a process killed while writing) or damaged (:func:`checkpoint_problem`) are removed, each
    with a warning, so training resumes from the one before and rewrites them."""
    import logging
    import re
    import shutil

    log = logging.getLogger("kinject")
    work = Path(work)
    found = sorted((int(m.group(1)), p) for p in work.iterdir()
                   if p.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", p.name))) if work.is_dir() else []
    for step, folder in reversed(found):
        problem = checkpoint_problem(folder, step)
        if problem is None:
            log.info("resuming stage %s from its checkpoint at step %d", stage_of(work), step)
            return str(folder)
        log.warning("resume: checkpoint %s is incomplete or damaged (%s); resuming from the checkpoint before it, "
                    "if any", folder, problem)
        shutil.rmtree(folder, ignore_errors=True)
    log.info("no checkpoint: starting stage %s over", stage_of(work))
    return None


class HookCallback:
    """Forward Trainer logs to the kinject.hooks event ``kinject_metrics_logged``; with a ``scorer``, also
    score the dev split every ``eval_steps`` steps and announce it as ``eval/<metric>``. In one process, Ctrl-C or
    SIGTERM while training ends the current step, saves a checkpoint and then stops the run, saying so
    (:meth:`kinject.api.Interrupted.defer`); ``--resume`` continues from it."""

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

            def on_train_begin(self, args, state, control, **kwargs):
                from kinject.api import Interrupted

                if args.world_size == 1:  # under DDP every process would have to save at the same step
                    Interrupted.defer(True)

            def on_train_end(self, args, state, control, **kwargs):
                from kinject.api import Interrupted

                Interrupted.defer(False)

            def on_save(self, args, state, control, **kwargs):
                from kinject.api import Interrupted

                signum = Interrupted.take_deferred()
                if signum is not None:  # the checkpoint of the interrupted step is complete: stop here
                    Interrupted.defer(False)
                    raise Interrupted(signum, saved_step=state.global_step)

            def on_step_end(self, args, state, control, model=None, **kwargs):
                from kinject.api import Interrupted, check_fence

                if Interrupted.deferred() is not None and not control.should_save:
                    import logging

                    logging.getLogger("kinject").warning(
                        "interrupted: saving a checkpoint at step %d first (interrupt again to stop at once)",
                        state.global_step)
                    control.should_save = True
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
    if cuda_available() and not hasattr(collator, "set_epoch"):  # collate in 2 worker processes while the GPU computes
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
