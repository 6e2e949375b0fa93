"""Prediction: logits of a model over features (length-sorted batches, in input order, across processes), the dev
scorer of model selection, and precision control for a float32 head."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from kinject.api import TrainingSpec

from .batching import to_dataset


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
    cpu = not cuda_available()
    kwargs: dict[str, Any] = dict(output_dir=str(work), per_device_eval_batch_size=batch_size, report_to=[],
                                  use_cpu=cpu, dataloader_num_workers=0, disable_tqdm=True, bf16=bf16)
    if world_size() > 1 and cpu:
        kwargs["ddp_backend"] = "gloo"
    reset_precision(bf16)
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


def keep_scores(task, records: list[dict], logits: np.ndarray) -> list[dict]:
    """``records`` with the ``scores`` an evaluator of ``task`` declares it needs (``Evaluator.needs``): the model's
    raw outputs of each record (one logit row per evaluation unit), where the task's own records lack them - so
    ``kinject compare``, grids and reports can hand them back and recompute the metric. A task whose units are not
    one logit row each (token tagging) keeps its records as they are; the comparison then names what is missing."""
    needed = any("scores" in getattr(ref.build(), "needs", ()) for ref in task.metric_refs())
    rows = np.asarray(logits)
    if not needed or not records or all("scores" in r for r in records) or len(records) != len(rows) or rows.ndim > 2:
        return records
    flat = rows.reshape(len(records), -1).astype(float)
    return [r if "scores" in r else {**r, "scores": row.tolist()} for r, row in zip(records, flat)]


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


def reset_precision(bf16: bool) -> None:
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
                with torch.autocast("cuda" if cuda_available() else "cpu", enabled=False):
                    return _original(*args, **kwargs)

            head.forward = forward
        return self

    def __exit__(self, *exc):
        for head in self.heads:
            del head.forward  # back to the class's forward
        return False


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
