"""The search report stage (kimera-search-report): each mask-search round's metric minus the unmasked round's, with
a paired bootstrap interval over the scoring set's evaluation units (kinject.evidence), from the per-example
predictions the search stage stored. Kept out of the search stage, so editing the statistics re-keys no mask and
no training."""

from __future__ import annotations

import json
import logging

from kinject.api import KinjectError, StageConfig, StageContext, TaskRef

from .search import ROUND_PREDICTIONS, no_redundant_head_warning, read_round_predictions

log = logging.getLogger("kinject")


class SearchReportConfig(StageConfig):
    """Each mask-search round's metric minus the unmasked round's, with a paired bootstrap interval."""

    task: TaskRef
    search_stage: str  # the input stage whose search.json and round predictions are read
    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0


def search_report_body(cfg: SearchReportConfig, ctx: StageContext) -> None:
    """search.json: the search stage's search.json with each round's interval against round 0 (and the warning
    for a search that marked no head redundant with round 1's interval)."""
    folder = ctx.inputs[cfg.search_stage]
    search = json.loads((folder / "search.json").read_text())
    rounds = read_round_predictions(folder / ROUND_PREDICTIONS)
    intervals: list[dict | None] = []
    if rounds:
        task = cfg.task.build()
        intervals = round_intervals(task, task.head(cfg.task.environment(ctx)).labels, search["metric"], rounds,
                                    cfg.resamples, cfg.confidence, cfg.seed)
    add_intervals(search, intervals)
    (ctx.out / "search.json").write_text(json.dumps(search, indent=2))


def round_intervals(task, labels, metric: str, rounds: list[list[dict]], resamples: int = 2000,
                    confidence: float = 0.95, seed: int = 0) -> list[dict | None]:
    """Per round (None for round 0), its ``metric`` minus round 0's with the paired bootstrap interval over the
    evaluation units (queries for retrieval, examples otherwise), from each round's prediction records. A metric
    that cannot be recomputed from them gives [] (one warning)."""
    from kinject.evidence import pair
    from kinject.evidence import define, task_metric_refs

    intervals: list[dict | None] = [None]
    try:
        definition = define(metric, task_metric_refs(task), labels)
        for records in rounds[1:]:
            _, row = pair(definition, {0: rounds[0]}, [{0: records}], resamples, confidence, seed)
            intervals.append({"difference": row["difference"], "ci_low": row["ci_low"], "ci_high": row["ci_high"],
                              "confidence": confidence, "units": len(rounds[0])})
    except (NotImplementedError, KinjectError, ValueError) as exc:
        log.warning("kimera search report: no confidence interval for the rounds (%s)", str(exc) or type(exc).__name__)
        return []
    return intervals


def add_intervals(search: dict, intervals: list[dict | None]) -> None:
    """Merge each round's interval into its record of ``search`` (a search.json), with ``threshold_in_ci``: the stop
    threshold, a difference of (tau - 1) x baseline, lies inside the interval, i.e. the decision to keep or stop at
    that round is within the scoring set's noise. Logs each round's interval."""
    margin = (search["tau"] - 1.0) * search["baseline"]  # the difference at which the search stops
    for record, ci in zip(search["rounds"], intervals):
        if ci:
            record.update(ci, threshold_in_ci=bool(ci["ci_low"] <= margin <= ci["ci_high"]))
            log.info("kimera %s mask round %d: %s=%.4f, vs unmasked %+.4f [%.0f%% CI %+.4f, %+.4f]%s",
                     search["kind"], record["round"], search["metric"], record["metric"], ci["difference"],
                     100 * ci["confidence"], ci["ci_low"], ci["ci_high"],
                     " (the stop threshold lies inside)" if record["threshold_in_ci"] else "")
    if search["no_redundant_heads"] and any(intervals):
        search["warning"] = no_redundant_head_warning(search["kind"], search["metric"], search["rounds"],
                                                      search["threshold"])
        log.warning("%s", search["warning"])
