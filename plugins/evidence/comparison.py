"""Paired comparison of runs on the same examples: each run's metric, its difference to a baseline with a
bootstrap interval over examples, and per-seed paired tests when both sides have several seeds.

Runs are paired by seed value and their predictions by example id; runs of different tasks, runs
without predictions for the split, and runs scored on different examples are refused (KinjectError).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kinject.api import KinjectError
from kinject.plugins.evidence.metrics import MetricDef, build_task, define, task_metric_refs
from kinject.plugins.evidence.runs import Run, RunSet, load_predictions
from kinject.plugins.evidence.scorers import scorer_for
from kinject.plugins.evidence.stats import seed_tests

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


def pair(metric: MetricDef, baseline: dict[int, list[dict]], others: list[dict[int, list[dict]]],
         n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0, method: str = "percentile",
         greater_is_better: bool = True) -> list[dict]:
    """The baseline's row and one row per other system: metric value (mean over seeds), per-seed values,
    difference to the baseline with its intervals, a verdict and per-seed tests (aligned records in).

    ``ci_low``/``ci_high``: the two-way bootstrap over seeds and examples (:mod:`.bootstrap`; with one seed the
    example-only interval); ``ci_low_examples``/``ci_high_examples``: examples only, i.e. conditional on these trained
    models. Examples that share a ``group`` (a unit: a child term's two pairs, a query's candidates) are resampled
    together. A system run with other seeds than the baseline is paired over the seeds both have (``paired_seeds``;
    its ``value`` is then its mean over all its seeds, the difference is over the shared ones); two single-seed runs
    of different seeds are paired by example only; several seeds with none in common is an error."""
    from kinject.plugins.evidence.bootstrap import bootstrap_intervals, verdict

    scorer = scorer_for(metric, [r for side in (baseline, *others) for r in side.values()])
    base_stats, base_values = _stack(scorer, baseline)
    first = baseline[min(baseline)]
    groups = [r.get("group", r["id"]) for r in first]
    rows = [{"value": float(np.mean(list(base_values.values()))), "per_seed": base_values}]
    for side in others:
        stats, values = _stack(scorer, side)
        shared = sorted(set(baseline) & set(side))
        a, b = base_stats, stats
        if set(baseline) != set(side):
            if shared:
                a = _stack(scorer, {s: baseline[s] for s in shared})[0]
                b = _stack(scorer, {s: side[s] for s in shared})[0]
            elif len(baseline) > 1 or len(side) > 1:
                raise KinjectError(f"no seed in common (baseline seeds {sorted(baseline)}, other seeds "
                                   f"{sorted(side)}): a paired comparison needs the same seeds on both sides")
        both, examples = bootstrap_intervals(scorer, a, b, groups=groups, n_resamples=n_resamples,
                                             confidence=confidence, seed=seed, method=method)
        row = {"value": float(np.mean(list(values.values()))), "per_seed": values, "difference": both.difference,
               "ci_low": both.low, "ci_high": both.high, "interval": both.resampled,
               "ci_low_examples": examples.low, "ci_high_examples": examples.high,
               "standard_error": both.standard_error, "method": both.method, "seeds_paired": both.seeds,
               "units": both.groups, "verdict": verdict(both.low, both.high, greater_is_better),
               "identical": bool(np.array_equal(a, b)), "seed_tests": seed_tests(base_values, values)}
        if shared and set(baseline) != set(side):
            row["paired_seeds"] = shared
        rows.append(row)
    return rows


FEW_SEEDS = 5  # below this many paired seeds the table flags the verdict as provisional


def compare(baseline, *others, split: str = "test", metrics: list[str] | str | None = None,
            n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """`kinject compare` from Python: run folders (or ``--repeats`` parents, globs, ``kinject.run`` results), the
    first the baseline; returns what ``compare --json`` prints (``result["metrics"][0]["rows"]``: values, the
    difference, its intervals, the verdict)."""
    from kinject.plugins.evidence.runs import find_runs, short_names

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
                 method: str = "percentile") -> dict[str, Any]:
    """Compare ``run_sets[1:]`` with ``run_sets[0]`` (the baseline) on ``split``; see the module docstring."""
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
    for key in metrics or [default_metric(baseline.first, split)]:
        direction = task.greater_is_better(key) if task is not None else metric_direction(key)
        rows = pair(define(key, refs, labels), aligned[0], aligned[1:], n_resamples, confidence, seed, method,
                    greater_is_better=direction)
        for run_set, row in zip(run_sets, rows):
            reported = {s: (r.metrics.get(split) or {}).get(key) for s, r in run_set.runs.items()}
            for s, value in row["per_seed"].items():
                if isinstance(reported[s], (int, float)) and abs(reported[s] - value) > REPORTED_TOLERANCE:
                    out["warnings"].append(f"{run_set.runs[s].path}: {key} recomputed from predictions is "
                                           f"{value:.6g} but metrics.json says {reported[s]:.6g}")
            row.update(run=run_set.name, path=str(run_set.path), strategy=run_set.strategy, seeds=sorted(run_set.runs),
                       per_seed={str(s): v for s, v in row["per_seed"].items()})
            if any(s.probe() for s in run_sets):  # the knowledge probe beside the task metric
                row["probe"] = _probe_row(run_set)
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
    rows = pair(definition, aligned[0], aligned[1:], n_resamples, confidence, seed)
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
    base, row = pair(definition, {0: a}, [{0: b}], n_resamples, confidence, seed)
    return {"metric": metric, "baseline": base["value"], "other": row["value"], "difference": row["difference"],
            "ci_low": row["ci_low"], "ci_high": row["ci_high"], "confidence": confidence, "n": len(a),
            "n_resamples": n_resamples, "method": row["method"], "verdict": row["verdict"],
            "identical": row["identical"], "interval": "examples (one trained model per side)"}


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def comparison_table(result: dict[str, Any], block: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows (text) of one metric's comparison: run, seeds, value, difference, the seed-inclusive interval
    and its verdict, the example-only interval, p-values. Fewer than :data:`FEW_SEEDS` paired seeds are flagged
    (``†``) in the seeds cell; identical predictions say so."""
    level = f"{result['confidence'] * 100:g}%"
    headers = ["run", "seeds", block["metric"], "Δ vs baseline", f"{level} CI (seeds × examples)", "verdict",
               f"{level} CI (examples: these models)", "t-test p", "Wilcoxon p"]
    rows = []
    for i, row in enumerate(block["rows"]):
        tests = row.get("seed_tests") or {}
        seeds = str(len(row["seeds"]))
        if row.get("paired_seeds"):
            seeds += f" ({len(row['paired_seeds'])} paired)"
        if i == 0:
            cells = ["baseline", "", "", "", "", ""]
        else:
            if row.get("seeds_paired", len(row["seeds"])) < FEW_SEEDS:
                seeds += " †"
            verdict = row.get("verdict", "")
            if row.get("identical"):
                verdict = "identical predictions"
            cells = [f"{row['difference']:+.4f}", f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]", verdict,
                     f"[{row['ci_low_examples']:+.4f}, {row['ci_high_examples']:+.4f}]" if "ci_low_examples" in row
                     else "", _p(tests.get("t_pvalue")), _p(tests.get("wilcoxon_pvalue"))]
        rows.append([row["run"], seeds, f"{row['value']:.4f}", *cells])
    if any("probe" in row for row in block["rows"]):
        headers.append("probe AUROC (base; gain)")
        for cells, row in zip(rows, block["rows"]):
            probe = row.get("probe")
            cells.append("-" if not probe else f"{probe['model']:.4f} ({probe['base']:.4f}; {probe['gain']:+.4f})")
    return headers, rows


def table_notes(result: dict[str, Any], block: dict[str, Any]) -> list[str]:
    """The lines printed under a comparison table: what the intervals and flags mean."""
    notes = [f"CI (seeds × examples): two-way bootstrap over seeds and {('units' if any(r.get('units', 0) < result['examples'] for r in block['rows'][1:]) else 'examples')} "
             "(the verdict reads it: gain / loss / no evidence); CI (examples): conditional on these trained models."]
    if any(r.get("seeds_paired", len(r["seeds"])) < FEW_SEEDS for r in block["rows"][1:]):
        notes.append(f"† fewer than {FEW_SEEDS} paired seeds: seed-to-seed spread is estimated from few runs; "
                     "treat the verdict as provisional.")
    if any(r.get("identical") for r in block["rows"][1:]):
        notes.append("identical predictions: the two systems score every example alike (difference 0 by "
                     "construction, e.g. a method that changed nothing).")
    direction = block.get("greater_is_better", True)
    if not direction:
        notes.append(f"{block['metric']}: lower is better (a negative difference is a gain).")
    return notes


def probe_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """The knowledge probe compared between arms (paired over the same probe-test facts), or None."""
    probe = result.get("probe")
    if not probe or not probe.get("rows"):
        return None
    level = f"{result['confidence'] * 100:g}%"
    headers = ["run", "seeds", "probe AUROC", "Δ vs baseline", f"{level} CI (seeds × examples)", "verdict"]
    rows = []
    for i, row in enumerate(probe["rows"]):
        cells = ["baseline", "", ""] if i == 0 else [f"{row['difference']:+.4f}",
                                                    f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]", row["verdict"]]
        rows.append([row["run"], str(len(row["seeds"])), f"{row['value']:.4f}", *cells])
    return headers, rows


def print_comparison(result: dict[str, Any], console) -> None:
    """One rich table per metric: value, difference to the baseline, intervals, verdict, per-seed p-values; then the
    knowledge probe compared between arms."""
    from rich.markup import escape
    from rich.table import Table

    def show(title: str, headers: list[str], rows: list[list[str]]) -> None:
        table = Table(title=title, title_justify="left")
        for i, column in enumerate(headers):
            table.add_column(escape(column), justify="left" if i == 0 else "right", overflow="fold")
        for row in rows:
            table.add_row(*map(escape, row))
        console.print(table)

    for block in result["metrics"]:
        headers, rows = comparison_table(result, block)
        show(f"{result['task']} {result['split']} {block['metric']}: {result['examples']} examples, "
             f"{result['resamples']} bootstrap resamples", headers, rows)
        for note in table_notes(result, block):
            console.print(note, highlight=False, soft_wrap=True)
    probe = result.get("probe")
    if probe:
        found = probe_table(result)
        if found:
            show(f"knowledge probe ({probe['kind']}: held-out facts of the graph when the run held facts out, else "
                 "edges of the injected graph; docs/knowledge-sources.md)", *found)
        if probe.get("note"):
            console.print(f"probe: {probe['note']}", highlight=False, soft_wrap=True)
