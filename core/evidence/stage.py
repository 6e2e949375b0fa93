"""The paired-comparison stage methods end their plan with: a method against its baseline on the same test
examples, the difference with a paired bootstrap interval (:mod:`kinject.evidence.comparison`)."""

from __future__ import annotations

import json
import logging

from kinject.api import RUN_METRICS_FILE, Stage, StageConfig, StageContext, TaskRef, is_main_process
from kinject.training import plain

log = logging.getLogger("kinject")
details = logging.getLogger("kinject.details")  # the run log only: the console says it once, under the verdict


class CompareConfig(StageConfig):
    """A method against its baseline on the same test examples: difference + paired bootstrap interval."""

    task: TaskRef
    metric: str
    split: str
    baseline: str
    other: str
    labels: tuple[str, str]
    resamples: int = 2000
    seed: int = 0


def compare_body(cfg: CompareConfig, ctx: StageContext) -> None:
    from .comparison import compare_prediction_files

    files = [ctx.inputs[name] / "predictions" / f"{cfg.split}.jsonl" for name in (cfg.baseline, cfg.other)]
    if not all(f.exists() for f in files):
        log.warning("compare: no per-example predictions for %s; no interval", cfg.split)
        return
    task = cfg.task.build()
    result = plain(compare_prediction_files(files[0], files[1], cfg.metric, task_kind=task.kind, seed=cfg.seed,
                                            n_resamples=cfg.resamples, task=task, env=cfg.task.environment(ctx)))
    result.update({"baseline_name": cfg.labels[0], "other_name": cfg.labels[1], "split": cfg.split,
                   "metric": cfg.metric})
    from .learned import describe, verdict_of

    flags = result.get("not_learned") or {}
    result["verdict"] = verdict_of(result["verdict"], (cfg.labels[0], flags.get("baseline")))
    for label, flag in ((cfg.labels[0], flags.get("baseline")), (cfg.labels[1], flags.get("other"))):
        if flag:
            details.warning("%s learned nothing: %s", label, describe(flag))
    if is_main_process():
        (ctx.out / "comparison.json").write_text(json.dumps(result, indent=2))
        (ctx.out / RUN_METRICS_FILE).write_text(json.dumps({"comparison": result}, indent=2))


def compare_stage(run, baseline: str, other: str, name: str = "compare", labels: tuple[str, str] | None = None,
                  metric: str | None = None) -> Stage:
    """Compare the predictions of evaluate stages ``other`` vs ``baseline`` on the test split (or the last
    evaluated split): the run's metrics.json gets a ``comparison`` entry, the console a line."""
    splits = run.spec.training.eval_splits or list(run.task.eval_splits)
    split = "test" if "test" in splits else splits[-1]
    config = CompareConfig(task=run.task_ref(), metric=metric or run.task.primary_metric(), split=split,
                           baseline=baseline, other=other, labels=labels or (baseline, other), seed=run.spec.seed)
    return Stage(name=name, body=compare_body, config=config, inputs=(baseline, other), artifacts=("comparison.json",))
