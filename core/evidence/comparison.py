"""Paired comparison of runs on the same examples: each run's metric, its difference to a baseline with the
verdict's interval over seeds and examples (:mod:`.bootstrap`; one paired seed: examples only and no verdict), the
example-only interval, per-seed paired tests when both sides have several seeds, and a flag on any system that
learned nothing (:mod:`.learned`). The tables are :mod:`.tables`'.

Runs are paired by seed value and their predictions by example id; runs of different tasks, runs
without predictions for the split, and runs scored on different examples are refused (KinjectError).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kinject.api import KinjectError
from kinject.evidence.metrics import MetricDef, build_task, define, task_metric_refs
from kinject.evidence.runs import Run, RunSet, load_predictions
from kinject.evidence.scorers import scorer_for
from kinject.evidence.stats import finite_or_none, seed_tests
from kinject.evidence.tables import (FEW_SEEDS, comparison_table, print_comparison,  # noqa: F401 - re-exported
                                           probe_table, table_notes)

REPORTED_TOLERANCE = 1e-6


def _id_mismatch(name_a: str, ids_a: list[str], name_b: str, ids_b: list[str]) -> KinjectError:
    only_a, only_b = sorted(set(ids_a) - set(ids_b)), sorted(set(ids_b) - set(ids_a))
    detail = "; ".join(f"{len(ids)} only in {name} (e.g. {ids[0]!r})" for name, ids in
                       ((name_a, only_a), (name_b, only_b)) if ids)
    return KinjectError(f"{name_a} and {name_b} were scored on different examples ({detail}); "
                        "paired comparisons need the same evaluation set")


def align(reference: list[str], records: list[dict], name: str, reference_name: str) -> list[dict]:
    """``records`` in the order of the ``reference`` ids; KinjectError when the id sets differ."""
    by_id = {str(r["id"]): r for r in records}
    if len(by_id) != len(reference) or any(i not in by_id for i in reference):
        raise _id_mismatch(reference_name, reference, name, list(by_id))
    return [by_id[i] for i in reference]


def _stack(scorer, seeds: dict[int, list[dict]]) -> tuple[np.ndarray, dict[int, float]]:
    """(n, d, seeds) statistics of one system and its metric per seed."""
    arrays = {seed: scorer.stats(records) for seed, records in seeds.items()}
    values = {seed: float(scorer.value(a.T[:, None, :])[0]) for seed, a in arrays.items()}
    return np.stack([arrays[s] for s in sorted(arrays)], axis=-1), values


def _intervals(found: dict) -> dict[str, list[float]]:
    return {kind: [interval.low, interval.high] for kind, interval in found.items()}


def pair(metric: MetricDef, baseline: dict[int, list[dict]], others: list[dict[int, list[dict]]],
         n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0, method: str = "percentile",
         greater_is_better: bool = True, interval: str | None = None, learned: bool = True,
         draws: list[dict[int, dict[str, str]]] | None = None) -> list[dict]:
    """The baseline's row and one row per other system: metric value (mean over the seeds its difference uses),
    per-seed values, the difference to the baseline with its intervals, a verdict and per-seed tests (aligned records
    in).

    ``ci_low``/``ci_high``: the verdict's interval (``interval``, default
    :data:`~kinject.evidence.bootstrap.DEFAULT_INTERVAL`; with one paired seed the example-only interval and
    no verdict); ``ci_low_examples``/``ci_high_examples``: examples only, i.e. conditional on these trained models;
    ``intervals``: every kind of :data:`~kinject.evidence.bootstrap.INTERVALS`. Examples that share a
    ``group`` (a unit: a child term's two pairs, a query's candidates) are resampled together. A system run with other
    seeds than the baseline is paired over the seeds both have (``paired_seeds``; ``value`` and ``baseline_value``
    are both over those seeds, ``value_all_seeds`` over all of its own); two single-seed runs of different seeds are
    compared example by example and marked ``unpaired``; several seeds with none in common is an error.
    ``learned``: flag a system that learned nothing (``not_learned``, :mod:`.learned`): a baseline that did voids
    the verdict (``not learned``); an arm's seeds that did are counted in its difference (``collapsed``).
    ``draws``: per system (baseline first), seed -> {stage name: key} of its random-draw stages
    (:func:`~kinject.evidence.draws.seed_draws`); paired seeds that share one are ``shared_stages`` (module
    :mod:`.draws`): the interval's seed part is over their distinct draws, or, with one, conditional on it."""
    from kinject.evidence.bootstrap import DEFAULT_INTERVAL, interval_set, verdict
    from kinject.evidence.learned import NOT_LEARNED, collapsed_text, not_learned

    kind = interval or DEFAULT_INTERVAL
    memo: dict = {}  # each record set's statistics, computed once for the comparison and the learned checks
    scorer = scorer_for(metric, [r for side in (baseline, *others) for r in side.values()], memo=memo)
    base_stats, base_values = _stack(scorer, baseline)
    first = baseline[min(baseline)]
    groups = [r.get("group", r["id"]) for r in first]
    cache: dict = {}  # the best input-free predictor, per gold labels: one search for every system and seed
    check = (lambda side: not_learned(metric, side, greater_is_better, cache, memo)) if learned else \
        (lambda side: None)
    base_flag = check(baseline)
    rows = [{"value": float(np.mean(list(base_values.values()))), "per_seed": base_values, "not_learned": base_flag}]
    for index, side in enumerate(others):
        stats, values = _stack(scorer, side)
        shared = sorted(set(baseline) & set(side))
        a, b = base_stats, stats
        unpaired = False
        if set(baseline) != set(side):
            if shared:
                a = _stack(scorer, {s: baseline[s] for s in shared})[0]
                b = _stack(scorer, {s: side[s] for s in shared})[0]
            elif len(baseline) > 1 or len(side) > 1:
                raise KinjectError(f"no seed in common (baseline seeds {sorted(baseline)}, other seeds "
                                   f"{sorted(side)}): a paired comparison needs the same seeds on both sides")
            else:
                unpaired = True
        seeds = sorted(shared if shared else baseline)
        labels, stages = shared_draws(draws, index, seeds) if not unpaired else (None, [])
        found = interval_set(scorer, a, b, groups=groups, n_resamples=n_resamples, confidence=confidence, seed=seed,
                             method=method, draws=labels)
        both, examples = found[kind], found["examples"]
        flag = check(side)
        call = verdict(both.low, both.high, greater_is_better, seeds=both.seeds)
        if base_flag:  # a baseline that learned nothing voids the comparison
            call = NOT_LEARNED
        row = {"value": both.b, "per_seed": values, "baseline_value": both.a, "difference": both.difference,
               "ci_low": both.low, "ci_high": both.high, "interval": both.resampled, "interval_kind": both.kind,
               "ci_low_examples": examples.low, "ci_high_examples": examples.high, "intervals": _intervals(found),
               "standard_error": both.standard_error, "method": both.method, "seeds_paired": 0 if unpaired else
               both.seeds, "units": both.groups, "verdict": call, "not_learned": flag,
               "identical": bool(np.array_equal(a, b)), "seed_tests": seed_tests(base_values, values),
               "p_value": finite_or_none(both.p_value)}
        if flag:  # the arm's seeds that learned nothing: an outcome of the method, counted in its difference
            row["collapsed"] = collapsed_text(flag)
        if stages:
            row["shared_stages"] = shared_record(stages, labels, both)
            row["interval"] = f"{both.resampled}, {row['shared_stages']['text']}"
        if unpaired:
            row["unpaired"] = {"baseline_seed": min(baseline), "seed": min(side)}
            row["interval"] = f"examples only, unpaired seeds ({min(side)} vs {min(baseline)})"
        if shared and set(baseline) != set(side):
            row["paired_seeds"] = shared
            row["value_all_seeds"] = float(np.mean(list(values.values())))
        rows.append(row)
    return rows


def shared_draws(draws: list[dict[int, dict[str, str]]] | None, index: int,
                 seeds: list[int]) -> tuple[list[int] | None, list[str]]:
    """(a draw label per paired seed, the stages drawn once for several of them) of the baseline and other system
    ``index``; (None, []) when no stage is shared or the draws are unknown."""
    from kinject.evidence.draws import draw_labels

    if not draws or len(seeds) < 2:
        return None, []
    labels, stages = draw_labels([draws[0], draws[index + 1]], seeds)
    return (labels, stages) if stages else (None, [])


def shared_record(stages: list[str], labels: list[int], interval) -> dict:
    """``shared_stages`` of a row: the stages, how many draws the seeds had, whether the verdict is conditional on
    them (one draw for every seed, or an interval kind that does not model draws), and the words for both."""
    from kinject.evidence.bootstrap import DRAWN
    from kinject.evidence.draws import conditional_text, draws_text

    count, seeds = len(set(labels)), len(labels)
    conditional = count == 1 or interval.kind not in DRAWN
    return {"stages": stages, "draws": count, "seeds": seeds, "conditional": conditional,
            "text": conditional_text(stages, count) if conditional else draws_text(stages, count)}


def compare(baseline, *others, split: str = "test", metrics: list[str] | str | None = None,
            n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """`kinject compare` from Python: run folders (or ``--repeats`` parents, globs, ``kinject.run`` results), the
    first the baseline; returns what ``compare --json`` prints (``result["metrics"][0]["rows"]``: values, the
    difference, its intervals, the verdict)."""
    from kinject.evidence.runs import find_runs, short_names

    names = [str(getattr(x, "output", x)) for x in (baseline, *others)]
    sets = find_runs(names)
    if len(sets) < 2:
        raise KinjectError("compare needs at least two runs")
    short_names(sets)
    return compare_runs(sets, split, [metrics] if isinstance(metrics, str) else metrics, n_resamples=n_resamples,
                        seed=seed)


def _task_view(run: Run):
    task = build_task(run.task_spec)
    return task, task_metric_refs(task) if task is not None else []


def default_metric(run: Run, split: str) -> str:
    """The task's primary metric, else the first metric metrics.json reports for the split."""
    task, _ = _task_view(run)
    try:
        return task.primary_metric()
    except Exception:  # noqa: BLE001 - no task plugin, or one without a primary metric
        names = list((run.metrics.get(split) or {}).keys())
        if not names:
            raise KinjectError(f"{run.path}: no metric for split {split!r}; pass --metric") from None
        return names[0]


def compare_runs(run_sets: list[RunSet], split: str = "test", metrics: list[str] | None = None,
                 n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                 method: str = "percentile", interval: str | None = None) -> dict[str, Any]:
    """Compare ``run_sets[1:]`` with ``run_sets[0]`` (the baseline) on ``split``; see the module docstring.
    ``interval``: the verdict's interval kind (default :data:`~kinject.evidence.bootstrap.DEFAULT_INTERVAL`)."""
    from kinject.evidence.learned import verdict_of

    if len(run_sets) < 1:
        raise KinjectError("compare: no runs given")
    baseline = run_sets[0]
    tasks = {s.name: s.task for s in run_sets}
    if len(set(tasks.values())) > 1:
        raise KinjectError("runs of different tasks: " + ", ".join(f"{n} is {t}" for n, t in tasks.items()))
    reference = None
    aligned: list[dict[int, list[dict]]] = []
    for run_set in run_sets:
        per_seed = {}
        for seed_value, run in sorted(run_set.runs.items()):
            records = run.predictions(split)
            if reference is None:
                reference, reference_name = [str(r["id"]) for r in records], str(run.path)
            per_seed[seed_value] = align(reference, records, str(run.path), reference_name)
        aligned.append(per_seed)
    _, refs = _task_view(baseline.first)
    labels = baseline.first.labels
    out: dict[str, Any] = {"task": baseline.task, "split": split, "examples": len(reference), "baseline": baseline.name,
                           "confidence": confidence, "resamples": n_resamples, "metrics": [], "warnings": []}
    task = build_task(baseline.first.task_spec)
    from kinject.evidence.draws import seed_draws
    from kinject.evidence.runs import smoke_reasons

    draws = [{seed_value: seed_draws(run.info) for seed_value, run in run_set.runs.items()} for run_set in run_sets]
    for key in metrics or [default_metric(baseline.first, split)]:
        direction = task.greater_is_better(key) if task is not None else metric_direction(key)
        rows = pair(define(key, refs, labels), aligned[0], aligned[1:], n_resamples, confidence, seed, method,
                    greater_is_better=direction, interval=interval, draws=draws)
        for run_set, row in zip(run_sets, rows):
            reported = {s: (r.metrics.get(split) or {}).get(key) for s, r in run_set.runs.items()}
            for s, value in row["per_seed"].items():
                if isinstance(reported[s], (int, float)) and abs(reported[s] - value) > REPORTED_TOLERANCE:
                    out["warnings"].append(f"{run_set.runs[s].path}: {key} recomputed from predictions is "
                                           f"{value:.6g} but metrics.json says {reported[s]:.6g}")
            row.update(run=run_set.name, path=str(run_set.path), strategy=run_set.strategy, seeds=sorted(run_set.runs),
                       per_seed={str(s): v for s, v in row["per_seed"].items()}, smoke=smoke_reasons(run_set))
            if any(s.probe() for s in run_sets):  # the knowledge probe beside the task metric
                row["probe"] = _probe_row(run_set)
        for row in rows[1:]:  # a baseline that learned nothing is named in the verdict
            row["verdict"] = verdict_of(row["verdict"], (rows[0]["run"], rows[0]["not_learned"]))
        out["metrics"].append({"metric": key, "greater_is_better": direction, "rows": rows})
    if any(s.probe() for s in run_sets):
        out["probe"] = compare_probes(run_sets, n_resamples, confidence, seed)
    return out


def metric_direction(key: str) -> bool:
    """Whether a higher value of metric ``key`` is better, from the evaluator that reports it (True when unknown)."""
    from kinject.api import MetricRef

    try:
        found = define(key)
        return MetricRef(name=found.evaluator, options=found.options).build().greater_is_better(key)
    except Exception:  # noqa: BLE001 - a metric no evaluator defines: higher-is-better, as most are
        return True


PROBE_METRIC = "auroc_macro"


def compare_probes(run_sets: list[RunSet], n_resamples: int = 2000, confidence: float = 0.95,
                   seed: int = 0) -> dict[str, Any]:
    """The knowledge probe of every arm against the baseline's, paired over the same probe-test facts (its
    per-pair predictions) with the two-way interval; or why it cannot be (an arm without per-pair predictions,
    arms probed on different facts)."""
    from kinject.api import MetricRef

    facts = {}
    for run_set in run_sets:
        for run in run_set.runs.values():
            info = (run.probe or {}).get("facts") or {}
            facts.setdefault(run_set.name, set()).add((info.get("digest"), info.get("kind")))
    kinds = sorted({kind for found in facts.values() for _, kind in found if kind})
    digests = {d for found in facts.values() for d, _ in found}
    out: dict[str, Any] = {"kind": kinds[0] if len(kinds) == 1 else "+".join(kinds) or "unknown", "rows": []}
    if None in digests or len(digests) != 1:
        out["note"] = ("the arms were probed on different facts (or before probes recorded theirs): the probe "
                       "columns are not comparable between arms; run them with the same hooks.knowledge-probe.source "
                       "(kinject grid does)")
        return out
    try:
        aligned = []
        reference = None
        for run_set in run_sets:
            per_seed = {}
            for seed_value, run in sorted(run_set.runs.items()):
                records = run.predictions("probe")
                if reference is None:
                    reference, name = [str(r["id"]) for r in records], str(run.path)
                per_seed[seed_value] = align(reference, records, str(run.path), name)
            aligned.append(per_seed)
    except KinjectError as exc:
        out["note"] = f"no paired probe interval: {exc}"
        return out
    ref = MetricRef(name="auroc", options={"averages": ["macro"], "positive": "yes"})
    definition = MetricDef(PROBE_METRIC, "auroc", ref.build().config.model_dump(), ("no", "yes"))
    rows = pair(definition, aligned[0], aligned[1:], n_resamples, confidence, seed, learned=False)
    for run_set, row in zip(run_sets, rows):
        row.update(run=run_set.name, seeds=sorted(run_set.runs), per_seed={str(s): v for s, v in row["per_seed"].items()})
    out["rows"] = rows
    return out


def _probe_row(run_set: RunSet) -> dict | None:
    """The run set's knowledge probe (AUROC of its model and of the base model, mean over seeds, and the gain)."""
    probe = run_set.probe()
    if probe is None:
        return None
    mean = lambda values: float(np.mean(list(values.values())))  # noqa: E731
    return {"measure": probe["measure"], "model": mean(probe["model"]), "base": mean(probe["base"]),
            "gain": probe["gain"], "chance": probe["chance"], "seeds": sorted(probe["model"])}


def _file_context(path: Path) -> Run | None:
    """The run directory a prediction file sits in (``<run>/predictions/<split>.jsonl``), if any."""
    run_dir = Path(path).resolve().parent.parent
    return Run(run_dir) if (run_dir / "run.json").is_file() else None


def compare_prediction_files(baseline: Path, other: Path, metric: str, task_kind: str | None = None, seed: int = 0,
                             *, n_resamples: int = 2000, confidence: float = 0.95, task: Any = None, env: Any = None,
                             labels: list[str] | None = None) -> dict[str, Any]:
    """``metric`` of two prediction files, ``other`` minus ``baseline``, with a paired bootstrap interval.

    Returns ``{metric, baseline, other, difference, ci_low, ci_high, confidence, n, n_resamples, method}``.
    The metric's evaluator options come from ``task`` (its ``metric_refs()``; e.g. ChemProt's positive
    classes), else from the run directory the file sits in, else from the metric's name; the label order
    (needed by AUROC/ECE) from ``labels``, ``task.head(env)``, or the run's model/config.json.
    """
    a = load_predictions(Path(baseline), task_kind)
    b = align([str(r["id"]) for r in a], load_predictions(Path(other), task_kind), str(other), str(baseline))
    context = _file_context(baseline)
    if task is None and context is not None:
        task = build_task(context.task_spec)
    if labels is None and task is not None and env is not None:
        labels = list(task.head(env).labels)
    if labels is None and context is not None:
        labels = list(context.labels)
    definition = define(metric, task_metric_refs(task) if task is not None else [], labels or ())
    direction = task.greater_is_better(metric) if task is not None else metric_direction(metric)
    base, row = pair(definition, {0: a}, [{0: b}], n_resamples, confidence, seed, greater_is_better=direction)
    return {"metric": metric, "baseline": base["value"], "other": row["value"], "difference": row["difference"],
            "ci_low": row["ci_low"], "ci_high": row["ci_high"], "confidence": confidence, "n": len(a),
            "n_resamples": n_resamples, "method": row["method"], "verdict": row["verdict"],
            "identical": row["identical"], "interval": "examples only (one trained model per side)",
            "not_learned": {"baseline": base["not_learned"], "other": row["not_learned"]},
            **({"collapsed": row["collapsed"]} if row.get("collapsed") else {})}
