"""Model selection on dev while fine-tuning (``training.selection``): score the task's dev split after every epoch
(or every ``training.select_every`` steps), keep the weights of the best score of the task's selection metric, stop
after ``training.patience`` evaluations without improvement, and end training with the best weights.

Resumable as the rest of training: the selection state is written into each Trainer checkpoint
(``kinject-selection.json``) and read back from the checkpoint a run resumes from; the best weights are a
safetensors file in the stage's ``work/``. Scoring uses no random numbers, so it does not change what is trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

STATE_FILE = "kinject-selection.json"


class DevSelection:
    """A Trainer callback: ``DevSelection(scorer, metric, work, every=None, patience=None)``; ``.summary()`` after
    training is what train.json records (metric, best step and score, the dev curve, whether it stopped early)."""

    def __new__(cls, scorer: Callable, metric: str, work: Path, every: int | None = None,
                patience: int | None = None, resume_from: str | None = None, stage: str = "train"):
        from transformers import TrainerCallback

        work = Path(work)
        state = {"best": None, "best_step": None, "curve": [], "bad": 0, "stopped_early": False}
        if resume_from and (Path(resume_from) / STATE_FILE).exists():
            state.update(json.loads((Path(resume_from) / STATE_FILE).read_text()))

        def best_file(step: int) -> Path:
            return work / f"best-step-{step}.safetensors"

        def evaluate(args, trainer_state, control, model) -> None:
            from kinject.hooks import plugin_manager

            scores = scorer(model)
            if metric not in scores:
                from kinject.errors import KinjectError

                raise KinjectError(f"training.selection: the dev split reports no {metric!r} ({', '.join(scores)})")
            step, value = trainer_state.global_step, float(scores[metric])
            state["curve"].append([step, value])
            if trainer_state.is_world_process_zero:
                plugin_manager().hook.kinject_metrics_logged(
                    stage=stage, metrics={f"eval/{k}": float(v) for k, v in scores.items()
                                                if isinstance(v, (int, float))}, step=step)
            if state["best"] is None or value > state["best"]:
                from safetensors.torch import save_file

                previous = state["best_step"]
                state.update(best=value, best_step=step, bad=0)
                tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
                save_file(_unshared(tensors), str(best_file(step)))
                if previous is not None and previous != step:
                    best_file(previous).unlink(missing_ok=True)
            else:
                state["bad"] += 1
                if patience and state["bad"] >= patience:
                    control.should_training_stop = True
                    state["stopped_early"] = True

        class Callback(TrainerCallback):
            def on_epoch_end(self, args, trainer_state, control, model=None, **kwargs):
                if every is None:
                    evaluate(args, trainer_state, control, model)

            def on_step_end(self, args, trainer_state, control, model=None, **kwargs):
                if every is not None and trainer_state.global_step % every == 0:
                    evaluate(args, trainer_state, control, model)

            def on_save(self, args, trainer_state, control, **kwargs):
                folder = Path(args.output_dir) / f"checkpoint-{trainer_state.global_step}"
                if folder.is_dir() and trainer_state.is_world_process_zero:
                    (folder / STATE_FILE).write_text(json.dumps(state))

            def on_train_end(self, args, trainer_state, control, model=None, **kwargs):
                if state["best_step"] is None:
                    return
                from safetensors.torch import load_file

                path = best_file(state["best_step"])
                if not path.exists():
                    raise RuntimeError(f"training.selection: the best weights ({path}) are missing")
                model.load_state_dict(load_file(str(path)), strict=False)

            @staticmethod
            def scores_at(trainer_state) -> bool:
                """Whether this callback scores dev at the step ``trainer_state`` is at."""
                if every is not None:
                    return trainer_state.global_step % every == 0
                return float(trainer_state.epoch or 0).is_integer()  # the last step of an epoch

            @staticmethod
            def summary() -> dict:
                return {"metric": metric, "best_step": state["best_step"], "best_score": state["best"],
                        "curve": state["curve"], "evaluations": len(state["curve"]),
                        "stopped_early": state["stopped_early"], "every": every or "epoch", "patience": patience}

        return Callback()


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
