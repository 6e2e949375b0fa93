"""Did a run learn anything? A run whose predictions take one value for every example (a constant predictor), or
whose score does not beat the constant baseline computed from the gold labels (the majority class; for a regression
task their mean; for sequence labelling the majority tag), has learned nothing its comparison could speak for.

:func:`not_learned` is the one check every view uses (compare and its ``--json``, report, forest plot, grid
leaderboard, model card, a method's comparison stage and so ``kinject.run``'s result): a verdict involving such a run
is ``not learned: <run>`` instead of "no evidence" or "identical predictions".
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np

from kinject.evidence.metrics import MetricDef

NOT_LEARNED = "not learned"
SEQUENCE = ("entity-f1", "pico-f1")  # evaluators whose gold and pred are one label per token
TOLERANCE = 1e-9


def _key(value: Any) -> str:
    if isinstance(value, list) and not any(isinstance(v, (list, dict)) for v in value):
        value = sorted(map(str, value))  # a multi-label prediction: a set
    return json.dumps(value, sort_keys=True, default=str)


def constant_value(records: list[dict], metric: MetricDef | None = None) -> str | None:
    """The one value every prediction takes (as text), None when they vary: the predicted label (a label set for
    multi-label), every token's tag for sequence labelling, every candidate's score for retrieval."""
    if not records:
        return None
    if metric is not None and metric.evaluator in SEQUENCE:
        values = {_key(tag) for r in records for tag in r["pred"]}
    elif "ranking" in records[0]:
        if not all("scores" in r for r in records):
            return None
        values = {_key(float(s)) for r in records for s in r["scores"]}
        return f"one score ({next(iter(values))}) for every candidate" if len(values) == 1 else None
    else:
        values = {_key(r["pred"]) for r in records}
    return next(iter(values)) if len(values) == 1 else None


def constant_baseline(records: list[dict], metric: MetricDef) -> tuple[list[dict], str] | None:
    """The records of the constant predictor built from the gold labels, and its name; None where no constant
    predictor is defined (retrieval, a metric of scores)."""
    if not records or "ranking" in records[0] or metric.evaluator in ("auroc", "ece"):
        return None
    gold = [r["gold"] for r in records]
    if metric.evaluator in SEQUENCE:
        tag, _ = Counter(_key(t) for g in gold for t in g).most_common(1)[0]
        value = json.loads(tag)
        return [{**r, "pred": [value] * len(r["gold"])} for r in records], f"the majority tag {value!r} everywhere"
    if all(isinstance(g, (int, float)) and not isinstance(g, bool) for g in gold) and metric.evaluator == "pearson":
        mean = float(np.mean(gold))
        return [{**r, "pred": mean} for r in records], f"the gold mean {mean:.4g}"
    if all(isinstance(g, list) for g in gold):
        counts = Counter(str(x) for g in gold for x in set(map(str, g)))
        labels = sorted(label for label, c in counts.items() if c > len(gold) / 2)
        return [{**r, "pred": labels} for r in records], f"the label set {labels} (each label in most examples)"
    label, _ = Counter(_key(g) for g in gold).most_common(1)[0]
    value = json.loads(label)
    return [{**r, "pred": value} for r in records], f"the majority class {value!r}"


def _scores(metric: MetricDef, record_sets: list[list[dict]]) -> list[float]:
    """The metric of each record set, from one scorer fitted on them all."""
    from kinject.evidence.scorers import scorer_for

    scorer = scorer_for(metric, record_sets)
    return [float(np.asarray(scorer.value(scorer.stats(records).T[:, None, :]))[0]) for records in record_sets]


def check(records: list[dict], metric: MetricDef, greater_is_better: bool = True) -> dict | None:
    """Why one run's predictions show it learned nothing (``{constant, score, baseline, baseline_name, reason}``),
    or None when it learned something (or nothing can be said: no constant baseline and predictions that vary)."""
    constant = constant_value(records, metric)
    baseline = None
    try:
        built = constant_baseline(records, metric)
        if built is not None:
            base_records, name = built
            score, base = _scores(metric, [records, base_records])
            baseline = (base, score, name)
        elif metric.evaluator == "auroc":
            baseline = (0.5, _scores(metric, [records])[0], "chance (AUROC 0.5)")
    except Exception:  # noqa: BLE001 - a third party's evaluator that cannot score a constant: no baseline
        baseline = None
    beaten = baseline is None or (baseline[1] > baseline[0] + TOLERANCE if greater_is_better
                                  else baseline[1] < baseline[0] - TOLERANCE)
    if constant is None and beaten:
        return None
    out: dict[str, Any] = {"constant": constant is not None, "score": None, "baseline": None, "baseline_name": None}
    reasons = []
    if constant is not None:
        reasons.append(f"constant predictor ({constant if constant.startswith('one score') else 'every prediction ' + constant})")
    if baseline is not None:
        out.update(baseline=baseline[0], score=baseline[1], baseline_name=baseline[2])
        if not beaten:
            reasons.append(f"{metric.key} {baseline[1]:.4f} does not beat the constant baseline's {baseline[0]:.4f} "
                           f"({baseline[2]})")
    out["reason"] = "; ".join(reasons)
    return out


def not_learned(metric: MetricDef, per_seed: dict[int, list[dict]], greater_is_better: bool = True) -> dict | None:
    """:func:`check` over a system's seeds (seed -> records): None when every seed learned something, else
    ``{seeds (those flagged), of (how many), reason (the first flagged seed's), constant, score, baseline}``."""
    flagged = {seed: found for seed in sorted(per_seed)
               if (found := check(per_seed[seed], metric, greater_is_better)) is not None}
    if not flagged:
        return None
    first = flagged[min(flagged)]
    return {**first, "seeds": sorted(flagged), "of": len(per_seed)}


def describe(flag: dict) -> str:
    """One line: why a system learned nothing, with how many of its seeds."""
    share = "" if flag.get("of", 1) == 1 else f" ({len(flag['seeds'])} of {flag['of']} seeds)"
    return f"{flag['reason']}{share}"


def verdict_of(verdict: str, flags: list[tuple[str, dict | None]]) -> str:
    """``verdict``, or ``not learned: <names>`` when a compared system (``(name, its not_learned flag)``) learned
    nothing."""
    names = [name for name, flag in flags if flag]
    return f"{NOT_LEARNED}: {', '.join(names)}" if names else verdict


def run_not_learned(run_dir, split: str = "test") -> dict | None:
    """:func:`check` of one run folder's ``predictions/<split>.jsonl`` on its task's primary metric (the model card's
    check); None when it learned something or has no such predictions."""
    from pathlib import Path

    from kinject.evidence.comparison import default_metric, metric_direction
    from kinject.evidence.metrics import build_task, define, task_metric_refs
    from kinject.evidence.runs import Run

    run = Run(Path(run_dir))
    if not (run.path / "predictions" / f"{split}.jsonl").is_file():
        return None
    try:
        key = default_metric(run, split)
        task = build_task(run.task_spec)
        direction = task.greater_is_better(key) if task is not None else metric_direction(key)
        return check(run.predictions(split), define(key, task_metric_refs(task), run.labels), direction)
    except Exception:  # noqa: BLE001 - a run whose metric cannot be recomputed: nothing to say
        return None
