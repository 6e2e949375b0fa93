"""Model selection on dev while fine-tuning (``training.selection``): score the task's dev split after every epoch
(or every ``training.select_every`` steps), keep the weights of the best score of the task's selection metric (the
highest, or the lowest for a metric whose evaluator says lower is better: ``Evaluator.greater_is_better``), stop
after ``training.patience`` evaluations without improvement, and end training with the best weights.

Resumable as the rest of training: the selection state is part of each Trainer checkpoint (an ``ExportableState``
callback: its state is in the checkpoint's trainer_state.json, which the Trainer writes last, so a checkpoint is
complete with it or not at all) and is read back from the checkpoint a run resumes from; the best weights are
safetensors files in the stage's ``work/``, kept while a checkpoint refers to them. Scoring uses no random numbers,
so it does not change what is trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

CALLBACK_NAME = "KinjectDevSelection"  # its key in trainer_state.json's stateful_callbacks


class DevSelection:
    """A Trainer callback: ``DevSelection(scorer, metric, work, every=None, patience=None)``; ``.summary()`` after
    training is what train.json records (metric, best step and score, the dev curve, whether it stopped early)."""

    def __new__(cls, scorer: Callable, metric: str, work: Path, every: int | None = None,
                patience: int | None = None, resume_from: str | None = None, stage: str = "train",
                greater_is_better: bool = True):
        from transformers import TrainerCallback
        from transformers.trainer_callback import ExportableState

        work = Path(work)
        state = {"best": None, "best_step": None, "curve": [], "bad": 0, "stopped_early": False}
        if resume_from:
            state.update(_saved_state(Path(resume_from)) or {})

        def best_file(step: int) -> Path:
            return work / f"best-step-{step}.safetensors"

        def evaluate(args, trainer_state, control, model) -> None:
            from kinject.api import plugin_manager

            scores = scorer(model)
            if metric not in scores:
                from kinject.api import KinjectError

                raise KinjectError(f"training.selection: the dev split reports no {metric!r} ({', '.join(scores)})")
            step, value = trainer_state.global_step, float(scores[metric])
            state["curve"].append([step, value])
            if trainer_state.is_world_process_zero:
                plugin_manager().hook.kinject_metrics_logged(
                    stage=stage, metrics={f"eval/{k}": float(v) for k, v in scores.items()
                                                if isinstance(v, (int, float))}, step=step)
            if state["best"] is None or (value > state["best"] if greater_is_better else value < state["best"]):
                from safetensors.torch import save_file

                state.update(best=value, best_step=step, bad=0)
                if hasattr(scorer, "keep_best"):  # its logits are the selected model's, unless a later score wins
                    scorer.keep_best()
                if trainer_state.is_world_process_zero:  # DDP: one writer; the weights are the same in every rank
                    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
                    save_file(_unshared(tensors), str(best_file(step)))
                    drop_unreferenced()  # the previous best, unless a checkpoint still refers to it
            else:
                state["bad"] += 1
                if patience and state["bad"] >= patience:
                    control.should_training_stop = True
                    state["stopped_early"] = True

        def drop_unreferenced() -> None:
            """Best-weight files no complete checkpoint (nor the current state) refers to."""
            keep = {state["best_step"]} | {(_saved_state(folder) or {}).get("best_step")
                                           for folder in work.glob("checkpoint-*")}
            for path in work.glob("best-step-*.safetensors"):
                if int(path.stem.rsplit("-", 1)[1]) not in keep:
                    path.unlink(missing_ok=True)

        class Callback(TrainerCallback, ExportableState):
            def state(self) -> dict:  # written into each checkpoint's trainer_state.json
                return {"args": {}, "attributes": dict(state)}

            def on_epoch_end(self, args, trainer_state, control, model=None, **kwargs):
                if every is None:
                    evaluate(args, trainer_state, control, model)

            def on_step_end(self, args, trainer_state, control, model=None, **kwargs):
                if every is not None and trainer_state.global_step % every == 0:
                    evaluate(args, trainer_state, control, model)

            def on_save(self, args, trainer_state, control, **kwargs):
                if trainer_state.is_world_process_zero:  # the checkpoint is complete: older best weights may go
                    drop_unreferenced()

            def on_train_end(self, args, trainer_state, control, model=None, **kwargs):
                if state["best_step"] is None:
                    return
                from safetensors.torch import load_file

                from kinject.api import barrier

                barrier()  # DDP: process 0 has written the best weights before any process reads them
                path = best_file(state["best_step"])
                if not path.exists():
                    raise RuntimeError(f"training.selection: the best weights ({path}) are missing")
                model.load_state_dict(load_file(str(path)), strict=False)
                if trainer_state.is_world_process_zero:
                    for other in work.glob("best-step-*.safetensors"):
                        if other != path:
                            other.unlink(missing_ok=True)

            @staticmethod
            def scores_at(trainer_state) -> bool:
                """Whether this callback scores dev at the step ``trainer_state`` is at."""
                if every is not None:
                    return trainer_state.global_step % every == 0
                return float(trainer_state.epoch or 0).is_integer()  # the last step of an epoch

            @staticmethod
            def summary() -> dict:
                return {"metric": metric, "greater_is_better": greater_is_better, "best_step": state["best_step"],
                        "best_score": state["best"],
                        "curve": state["curve"], "evaluations": len(state["curve"]),
                        "stopped_early": state["stopped_early"], "every": every or "epoch", "patience": patience}

        Callback.__name__ = Callback.__qualname__ = CALLBACK_NAME
        return Callback()


def _saved_state(checkpoint: Path, saved: dict | None = None) -> dict | None:
    """The selection state a Trainer checkpoint holds (None: none, or its trainer_state.json is unreadable);
    ``saved``: that trainer_state.json, already read."""
    from kinject.api import DataError, read_record

    try:
        saved = read_record(checkpoint / "trainer_state.json") if saved is None else saved
    except DataError:
        return None
    callbacks = saved.get("stateful_callbacks")
    entry = callbacks.get(CALLBACK_NAME) if isinstance(callbacks, dict) else None
    attributes = entry.get("attributes") if isinstance(entry, dict) else None
    return attributes if isinstance(attributes, dict) else None


def best_weights(checkpoint: Path, saved: dict) -> Path | None:
    """The best weights file (in the stage's work folder) the selection state of ``checkpoint`` refers to (None:
    none); ``saved``: its trainer_state.json."""
    step = (_saved_state(checkpoint, saved) or {}).get("best_step")
    return Path(checkpoint).parent / f"best-step-{step}.safetensors" if isinstance(step, int) else None


def _unshared(tensors: dict) -> dict:
    """safetensors refuses tensors that share memory (tied embeddings): keep one copy of each storage."""
    seen: dict[tuple, str] = {}
    out = {}
    for name, tensor in tensors.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen[key] = name
        out[name] = tensor
    return out
