"""kinject's run log: lifecycle events (run, stage, metrics) to the ``kinject`` logger.

The hook plugin ``runlog``; the logger goes to the console and to the run folder's kinject.log."""

from __future__ import annotations

import logging

from kinject.api import hookimpl


log = logging.getLogger("kinject")
details = logging.getLogger("kinject.details")  # the run log only: the console shows the metrics once, as a table


@hookimpl
def kinject_run_start(spec, run_dir):
    task = (spec.get("task") or {}).get("name", "(no task)")
    log.info("run start: strategy=%s task=%s seed=%s -> %s", spec["strategy"]["name"], task, spec["seed"], run_dir)


@hookimpl
def kinject_stage_start(stage, key, cached):
    log.info("stage %s [%s] %s", stage, key[:12], "cache hit" if cached else "running")


@hookimpl
def kinject_stage_end(stage, key, cached, seconds):
    log.info("stage %s done in %.1fs%s", stage, seconds, " (cached)" if cached else "")


@hookimpl
def kinject_metrics_logged(stage, metrics, step):
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
    (log if step is not None else details).info("%s step %s: %s", stage, step, shown)


@hookimpl
def kinject_run_end(spec, run_dir, metrics):
    details.info("run end: %s", metrics)
