"""kinject's metrics in the run's trackers (``training.report_to``): the Trainer reports its training curves
itself; this hook plugin adds what kinject computes around training - the evaluate stages' metrics and the dev
scores of model selection - to the same tracker. TensorBoard event files go to the run folder's ``logs/<stage>``."""

from __future__ import annotations

import logging
import os

from kinject.api import hookimpl

log = logging.getLogger("kinject")
_RUN: dict = {"report_to": [], "writers": {}}


@hookimpl
def kinject_run_start(spec, run_dir):
    _close()
    _RUN["report_to"] = list((spec.get("training") or {}).get("report_to") or [])


@hookimpl
def kinject_metrics_logged(stage, metrics, step):
    numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not numbers or not _RUN["report_to"]:
        return
    if "tensorboard" in _RUN["report_to"] and os.environ.get("KINJECT_LOG_DIR"):
        writer = _writer(stage)
        for name, value in numbers.items():
            writer.add_scalar(f"kinject/{name}", value, step or 0)
        writer.flush()
    if "wandb" in _RUN["report_to"]:
        try:
            import wandb

            if wandb.run is not None:
                wandb.log({f"{stage}/{k}": v for k, v in numbers.items()})
        except ImportError:
            pass
    if "mlflow" in _RUN["report_to"]:
        try:
            import mlflow

            if mlflow.active_run() is not None:
                mlflow.log_metrics({f"{stage}.{k}".replace("@", "_at_"): v for k, v in numbers.items()}, step=step)
        except ImportError:
            pass


@hookimpl
def kinject_run_end(spec, run_dir, metrics):
    _close()


def _writer(stage: str):
    if stage not in _RUN["writers"]:
        from torch.utils.tensorboard import SummaryWriter

        _RUN["writers"][stage] = SummaryWriter(log_dir=os.path.join(os.environ["KINJECT_LOG_DIR"], stage))
    return _RUN["writers"][stage]


def _close() -> None:
    for writer in _RUN["writers"].values():
        writer.close()
    _RUN["writers"].clear()
