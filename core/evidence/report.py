"""``kinject report``: one page (Markdown + self-contained HTML) about a set of runs.

Sections: the runs; their metrics (mean ± std over seeds); paired comparisons per task (as ``kinject
compare``); the seed papers' figures for the same tasks beside ours; every plot the runs wrote; each run's
exact command, versions and resolved spec. Written atomically: the page appears whole or not at all.
"""

from __future__ import annotations

import shlex
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from kinject.api import KinjectError
from kinject.evidence.comparison import compare_runs, comparison_table, probe_table, table_notes
from kinject.evidence.papers import figures_for, paper_title
from kinject.evidence.render import Block, Code, Details, Heading, Image, Para, TableBlock, to_html, to_markdown
from kinject.evidence.runs import RunSet, find_runs
from kinject.api import atomic_directory
from kinject.evidence import plural

SKIP_DIRS = {"model", "predictions"}


def _by_task(run_sets: list[RunSet]) -> dict[str, list[RunSet]]:
    out: dict[str, list[RunSet]] = {}
    for run_set in run_sets:
        out.setdefault(run_set.task, []).append(run_set)
    return out


def _mean_std(values: list[float], digits: int = 4) -> str:
    if values and all(isinstance(v, int) for v in values) and len(set(values)) == 1:  # counts (queries): as ints
        return str(values[0])
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _seed_values(run_set: RunSet, split: str, metric: str) -> list[float]:
    values = [(run.metrics.get(split) or {}).get(metric) for run in run_set.runs.values()]
    return [v if isinstance(v, int) else float(v) for v in values if isinstance(v, (int, float))]


def _runs_section(run_sets: list[RunSet]) -> list[Block]:
    rows = []
    for s in run_sets:
        info = s.first.info
        rows.append([s.name, s.task, s.strategy, ", ".join(map(str, sorted(s.runs))),
                     _elided(str((info.get("spec", {}).get("model") or {}).get("name", "?"))),
                     _elided(str(info.get("data", ""))), str(info.get("created", "")),
                     str(info.get("git_sha") or "-")[:12]])
    return [Heading(2, "Runs"), TableBlock(["run", "task", "strategy", "seeds", "model", "data", "created", "git"],
                                           rows)]


def _elided(text: str) -> str:
    """A machine's absolute folders shortened: the data dir to ``<data>``, the home folder to ``~``, any other long
    absolute path to its last two parts."""
    import os
    import re

    from kinject.api import default_data_dir

    for folder, short in ((str(default_data_dir()), "<data>"), (os.path.expanduser("~"), "~")):
        if folder and folder != "/":
            text = text.replace(folder.rstrip("/"), short)
    return re.sub(r"(?<![\w<~])/(?:[^\s/,;()]+/)+([^\s/,;()]+/[^\s/,;()]+)", r".../\1", text)


def _results_section(groups: dict[str, list[RunSet]], split: str) -> list[Block]:
    blocks: list[Block] = [Heading(2, f"Results ({split}; mean ± sample std over seeds)")]
    for task, sets in groups.items():
        names = []
        for s in sets:
            for run in s.runs.values():
                names += [k for k, v in (run.metrics.get(split) or {}).items()
                          if isinstance(v, (int, float)) and k not in names]
        if not names:
            blocks += [Heading(3, task), Para(f"No {split} metrics in these runs.")]
            continue
        rows = [[s.name, str(len(s.runs))] + [_mean_std(v) if (v := _seed_values(s, split, m)) else "-" for m in names]
                for s in sets]
        headers = ["run", "seeds", *names]
        if any(s.probe() for s in sets):  # the knowledge probe beside the task metrics
            headers += PROBE_COLUMNS
            for row, s in zip(rows, sets):
                row += _probe_cells(s)
        blocks += [Heading(3, task), TableBlock(headers, rows)]
    if any(s.probe() for sets in groups.values() for s in sets):
        blocks.append(Para(PROBE_NOTE))
    return blocks


PROBE_COLUMNS = ["probe AUROC", "probe AUROC, base model", "probe gain"]
PROBE_NOTE = ("Probe: the run's final encoder and the base model, frozen, each embed held-out HPO is-a facts (both "
              "term names, mean-pooled); a logistic regression fit on probe-train facts is scored on probe-test facts "
              "(AUROC; chance 0.5). Gain: the run's model minus the base model (docs/knowledge-sources.md).")


def _probe_cells(run_set: RunSet) -> list[str]:
    probe = run_set.probe()
    if probe is None:
        return ["-"] * len(PROBE_COLUMNS)
    gains = [probe["model"][seed] - probe["base"][seed] for seed in probe["model"]]
    return [_mean_std(list(probe["model"].values())), _mean_std(list(probe["base"].values())),
            _signed(gains)]


def _signed(values: list[float]) -> str:
    text = _mean_std(values)
    return text if text.startswith("-") else "+" + text


def _adjust(results: list[dict], headline: str | None) -> None:
    """Holm over every comparison of the report (each task's arms, each metric), but the ``headline`` (a run name,
    or TASK/RUN): in place (:mod:`.multiplicity`). A headline that names no compared run is an error."""
    from kinject.evidence.multiplicity import adjust

    rows = [row for result in results for block in result["metrics"] for row in block["rows"][1:]]
    named = [row for result in results for block in result["metrics"] for row in block["rows"][1:]
             if headline in (row["run"], f"{result['task']}/{row['run']}")] if headline else []
    if headline and not named:
        known = sorted({row["run"] for row in rows})
        raise KinjectError(f"--headline {headline}: names no compared run ({', '.join(known) or 'none'})")
    if len(named) > 1:
        raise KinjectError(f"--headline {headline}: names {len(named)} comparisons (tasks or metrics); name one, "
                           "as TASK/RUN with one --metric")
    adjust(rows, named[0] if named else None)


def _comparison_section(groups: dict[str, list[RunSet]], split: str, metrics: list[str] | None,
                        n_resamples: int, seed: int, headline: str | None = None) -> tuple[list[Block], list[dict]]:
    blocks: list[Block] = [Heading(2, "Paired comparisons"),
                           Para("Difference to the first run of each task (the baseline), with a 95% interval over "
                                "seeds and evaluation units (the verdict reads it; with one paired seed it is over "
                                "units only and no verdict is given), the interval over units alone (conditional on "
                                "these trained models) and, where both sides have several seeds, paired per-seed "
                                "t-test and Wilcoxon p-values; a baseline that learned nothing (one prediction for "
                                "every example, or no better than the best input-free predictor for the metric) "
                                "voids its comparisons, and an arm's seeds that did count as harm (docs/evidence.md). "
                                "Every comparison but a declared headline is Holm-adjusted with the others: raw and "
                                "adjusted p-values and verdicts are both shown.")]
    results, found = [], []
    for task, sets in groups.items():
        usable = [s for s in sets if all((r.path / "predictions" / f"{split}.jsonl").exists() for r in s.runs.values())]
        missing = [s.name for s in sets if s not in usable]
        result, problem = None, None
        if len(usable) >= 2:
            try:
                result = compare_runs(usable, split, metrics, n_resamples=n_resamples, seed=seed)
            except KinjectError as exc:
                problem = exc
        found.append((task, missing, len(usable), result, problem))
        if result is not None:
            results.append(result)
    _adjust(results, headline)
    for task, missing, usable, result, problem in found:
        blocks.append(Heading(3, task))
        if missing:
            blocks.append(Para(f"Without {split} predictions (not compared): {', '.join(missing)}."))
        if usable < 2:
            blocks.append(Para("Fewer than two runs with predictions: nothing to compare."))
            continue
        if result is None:
            blocks.append(Para(f"Not compared: {problem}"))
            continue
        for block in result["metrics"]:
            headers, rows = comparison_table(result, block, adjusted=True)
            blocks += [Para(f"{block['metric']} on {result['examples']} {split} examples ({result['resamples']} "
                            "resamples):"), TableBlock(headers, rows), Para(" ".join(table_notes(result, block)))]
        probe = probe_table(result)
        if probe:
            blocks += [Para(f"Knowledge probe ({result['probe']['kind']}), each arm against the baseline on the same "
                            "probe-test facts:"), TableBlock(*probe)]
        if (result.get("probe") or {}).get("note"):
            blocks.append(Para("Probe: " + result["probe"]["note"]))
        blocks += [Para("Warning: " + w) for w in result["warnings"]]
    return blocks, results


def _forest(results: list[dict], path: Path, split: str) -> Image | None:
    """The forest plot of every comparison of the report (each task's arms against its baseline)."""
    from kinject.evidence.forest import forest_plot, rows_of

    rows = [row for result in results for row in rows_of(result, f"{result['task']}: ")]
    drawn = forest_plot(rows, path, f"Each arm minus its baseline on {split} (verdict from the interval over seeds "
                                    "and examples; with 1 seed: examples only, no verdict)")
    return Image(drawn, "Every comparison at a glance: the difference to the baseline with its 95% intervals",
                 "forest.png") if drawn else None


def _intermediates(run_set: RunSet) -> set[str]:
    items = (run_set.first.info.get("spec", {}).get("strategy") or {}).get("intermediate") or []
    return {item.get("name") if isinstance(item, dict) else str(item) for item in items}


def _setting(figure) -> str:
    parts = [figure.method]
    if figure.intermediate:
        parts.append("no intermediate task" if figure.intermediate == "baseline" else
                     f"intermediate {figure.intermediate}")
    return ", ".join(p for p in (*parts, figure.note) if p)


def _papers_section(groups: dict[str, list[RunSet]], split: str) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Reported in the papers"),
                           Para("The seed papers' figures for these tasks (percent, as printed; transcribed with "
                                "their tables in kinject/evidence/papers.yaml) beside ours on the same metric x 100. "
                                "Ours are not at the papers' scale unless the scale column says so (their models are "
                                "BERT-base-sized and larger, trained on the full data): read the papers' figures as "
                                "context, not as a target.")]
    cited: set[str] = set()
    for task, sets in groups.items():
        found = figures_for(task, sets[0].first.task_spec, set().union(*(_intermediates(s) for s in sets)))
        if not found:
            continue
        cited.update(f.paper for f in found)
        rows = [[f"{f.paper}: {f.table}", f.model, _setting(f), f.metric, f.shown(), "the paper's"] for f in found]
        for metric in dict.fromkeys(f.metric for f in found):
            for s in sets:
                values = [100 * v for v in _seed_values(s, split, metric)]
                model = (s.first.info.get("spec", {}).get("model") or {}).get("name", "?")
                if values:
                    setting = f"{s.strategy}, {plural(len(values), 'seed')}, {split}"
                    rows.append([f"kinject: {s.name}", str(model), setting,
                                 metric, _mean_std(values, 2), _scale(s)])
        blocks += [Heading(3, task), TableBlock(["source", "model", "setting", "metric", "value", "scale"], rows)]
    return blocks + [Para(f"{key}: {paper_title(key)}") for key in sorted(cited)]


def _scale(run_set: RunSet) -> str:
    """How far a run is from a paper's scale: a smoke run (the tiny model, --limit, a few steps) says so plainly."""
    from kinject.evidence.runs import smoke_reasons

    model = (run_set.first.info.get("spec", {}).get("model") or {}).get("name", "?")
    return smoke_reasons(run_set) or f"not the paper's: {model}"


def _plots(run_sets: list[RunSet]) -> list[tuple[RunSet, Path, Path]]:
    out = []
    for s in run_sets:
        for run in s.runs.values():
            for png in sorted(run.path.rglob("*.png")):
                if not SKIP_DIRS & set(png.relative_to(run.path).parts[:-1]):
                    out.append((s, run.path, png))
    return out


def _commands_section(run_sets: list[RunSet]) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Commands and versions")]
    for s in run_sets:
        for seed, run in sorted(s.runs.items()):
            info = run.info
            command = info.get("command")
            versions = ", ".join(f"{k} {v}" for k, v in (info.get("versions") or {}).items())
            blocks += [Heading(3, f"{run.path} (seed {seed})"),
                       Code(shlex.join(command) if command else
                            "(not recorded: the run predates run.json's command field)"),
                       Para(f"versions: {versions or '-'}; git: {info.get('git_sha') or '-'}"),
                       Details("resolved spec", yaml.safe_dump(info.get("spec", {}), sort_keys=False))]
    return blocks


def build_report(arguments: list[str], output: Path, split: str = "test", metrics: list[str] | None = None,
                 n_resamples: int = 2000, seed: int = 0, headline: str | None = None) -> dict[str, Any]:
    """Write ``output/report.md`` (+ ``images/``), ``output/report.html`` and ``output/comparisons.json``.
    ``headline``: the one comparison declared before the runs (a run name, or TASK/RUN), left unadjusted; every
    other is Holm-adjusted."""
    import json

    from kinject.api import __version__

    output = Path(output)
    if output.exists() and any(output.iterdir()) and not (output / "report.md").exists():
        raise KinjectError(f"{output}: exists and is not a kinject report folder; choose another -o")
    run_sets = find_runs(arguments, groups=True)
    from kinject.evidence.runs import short_names

    short_names(run_sets)  # tables name runs by their path below the folder they share
    groups = _by_task(run_sets)
    comparisons, results = _comparison_section(groups, split, metrics, n_resamples, seed, headline)
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="kinject-report-"))
    forest = _forest(results, scratch / "forest.png", split)
    if forest is not None:  # the figure a reader wants first: right under the comparisons' heading
        comparisons[2:2] = [forest]
    plots = _plots(run_sets)
    images = [Image(png, f"{s.name}: {png.relative_to(root)}", f"{i:03d}-{png.name}")
              for i, (s, root, png) in enumerate(plots)]

    blocks: list[Block] = [Heading(1, "kinject report"),
                           Para(f"{len(run_sets)} run(s) of {len(groups)} task(s), split {split}; made "
                                f"{time.strftime('%Y-%m-%d %H:%M:%S %z')} by kinject {__version__}."),
                           *_runs_section(run_sets), *_results_section(groups, split), *comparisons,
                           *_papers_section(groups, split), Heading(2, "Plots"),
                           *(images or [Para("The runs wrote no plots.")]), *_commands_section(run_sets)]
    with atomic_directory(output, replace=True) as tmp:
        (tmp / "images").mkdir()
        for image in [*images, *([forest] if forest is not None else [])]:
            shutil.copyfile(image.path, tmp / "images" / image.name)
        (tmp / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
        (tmp / "report.html").write_text(to_html(blocks, "kinject report"), encoding="utf-8")
        (tmp / "comparisons.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    shutil.rmtree(scratch, ignore_errors=True)
    return {"markdown": output / "report.md", "html": output / "report.html", "runs": len(run_sets),
            "plots": len(images), "comparisons": len(results)}


def comparison_markdown(arguments: list[str], split: str = "test", metrics: list[str] | None = None,
                        n_resamples: int = 2000, seed: int = 0, root: Path | None = None) -> str:
    """The paired comparison of ``arguments`` (the first is the baseline) as Markdown tables, one per metric:
    each run's mean ± sample std over its seeds and per-seed values, the difference to the baseline with its
    paired bootstrap interval over examples, and the per-seed t-test / Wilcoxon p-values. For pages whose
    numbers are generated from the runs (docs/results.md), not copied by hand. ``root``: runs are named by their
    path relative to it."""
    run_sets = find_runs(arguments)
    if root is not None:
        for run_set in run_sets:
            run_set.name = str(Path(run_set.name).relative_to(root))
    result = compare_runs(run_sets, split, metrics, n_resamples=n_resamples, seed=seed)
    blocks: list[Block] = []
    for block in result["metrics"]:
        headers, rows = comparison_table(result, block)
        notes = table_notes(result, block)
        spread = [_mean_std(list(row["per_seed"].values())) for row in block["rows"]]
        per_seed = [", ".join(f"{v:.3f}" for _, v in sorted(row["per_seed"].items(), key=lambda kv: int(kv[0])))
                    for row in block["rows"]]
        headers = [headers[0], headers[1], f"{block['metric']} (mean ± std)", "per seed", *headers[3:]]
        rows = [[r[0], r[1], s, p, *r[3:]] for r, s, p in zip(rows, spread, per_seed)]
        blocks += [Para(f"**{result['task']}, {block['metric']}** on {result['examples']} {split} examples; "
                        f"baseline {result['baseline']}; {result['resamples']} paired bootstrap resamples "
                        f"(seed {seed})."), TableBlock(headers, rows), Para(" ".join(notes))]
    blocks += [Para("Warning: " + w) for w in result["warnings"]]
    return to_markdown(blocks)


def _lookup(node: Any, key: str) -> Any:
    """``node[key]``, else the nested ``node[a][b]`` for key ``a/b``; None when absent."""
    if isinstance(node, dict) and key in node:
        return node[key]
    for part in key.split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def metrics_markdown(arguments: list[str], split: str, metrics: list[str], root: Path | None = None) -> str:
    """A Markdown table of ``metrics`` (keys of each run's metrics.json under ``split``; ``a/b`` reaches into
    nested entries) per run: mean ± sample std over its seeds and the per-seed values."""
    run_sets = find_runs(arguments)
    rows = []
    for run_set in run_sets:
        name = str(Path(run_set.name).relative_to(root)) if root is not None else run_set.name
        cells = [name, str(len(run_set.runs))]
        for metric in metrics:
            values = []
            for run in run_set.runs.values():
                value = _lookup(run.metrics.get(split) if split else run.metrics, metric)
                if isinstance(value, (int, float)):
                    values.append(value)
            cells.append(f"{_mean_std(values)} ({', '.join(f'{v:.3f}' for v in values)})" if len(values) > 1
                         else _mean_std(values) if values else "-")
        rows.append(cells)
    return to_markdown([TableBlock(["run", "seeds", *metrics], rows)])
