"""The run engine: execute a prepared run (:mod:`kinject.preparation`) - its declared stages through the content-keyed
cache (:mod:`kinject.keys`, :mod:`kinject.stage_runner`), what is missing run - and write the run directory
atomically (:mod:`kinject.outputs`).

Stage key = sha256(name + keyed config fields + input stage keys + the source of the modules that implement
the stage body + library versions); see :mod:`kinject.fingerprint`. A finished stage lives in
``<cache>/stages/<name>/<key>/`` (with ``stage.json``, what made the key); an unfinished one in
``<key>.partial/`` (its ``work/`` keeps trainer checkpoints for ``--resume``). Finishing is a rename, so a
crash never leaves a stage that looks finished. Everything that can fail on user input fails in
:func:`prepare`, before any stage starts.
"""

from __future__ import annotations

import json
import logging
import platform
import subprocess
import time
from contextlib import ExitStack, contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterator

from kinject import __version__
from kinject.distributed import barrier
from kinject.interfaces import RUN_METRICS_FILE, Stage
from kinject.knowledge.dose import combine_doses, dose_line
from kinject.stage_runner import run_stages
from kinject.context import RunContext
from kinject.outputs import describe_data, run_folder
from kinject.preparation import resolved_spec


log = logging.getLogger("kinject")
details = logging.getLogger("kinject.details")  # the run log only: the console shows the dose once, under the table


# -- keys and the plan ------------------------------------------------------------------------- #
def _versions() -> dict[str, str]:
    out = {"kinject": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "tokenizers", "accelerate", "adapters", "datasets"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _git_sha() -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                cwd=Path(__file__).resolve().parent)
        return result.stdout.strip() or None if result.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


# -- executing --------------------------------------------------------------------------------------- #
def _collect(folder: Path, stage: Stage, state: dict) -> None:
    """Fold one finished stage's outputs into what the run directory will hold."""
    if (folder / "metrics.json").exists():
        state["metrics"] = json.loads((folder / "metrics.json").read_text())
    if (folder / RUN_METRICS_FILE).exists():  # sections a stage adds to the run's metrics (e.g. the knowledge probe)
        state["sections"].update(json.loads((folder / RUN_METRICS_FILE).read_text()))
    if stage.produces_model and (folder / "model").exists():
        state["model"] = folder / "model"
    state["exports"].extend(folder / name for name in stage.artifacts if (folder / name).exists())
    state["published"].extend(name for name in stage.published if (folder / name).exists())


def execute(run: RunContext, output: Path) -> dict[str, Any]:
    """Run every stage and write the run folder ``output`` (run.json, metrics.json, model/, artifacts, kinject.log),
    replacing an earlier run there atomically."""
    with run_folder(output, run, "group" if run.members else "run") as tmp:
        metrics = execute_into(run, tmp, Path(output))
    barrier()
    return metrics


def execute_into(run: RunContext, folder: Path | None, shown: Path) -> dict[str, Any]:
    """Run ``run`` writing its files into ``folder``, a folder inside one :func:`run_folder` holds (None: a process
    that writes nothing); ``shown`` is where it will be once the run succeeds (for hooks and messages). Several seeds
    into one folder: :func:`execute_repeats`."""
    from transformers import set_seed

    if run.members:
        return _run_group_into(run, folder, shown)
    run.output = shown
    set_seed(run.spec.seed)
    resolved = resolved_spec(run.spec, run.task, run.strategy, run.sources)
    hooks = run.hooks()
    with ExitStack() as stack:
        if folder is not None and run.spec.training.report_to:  # trackers write under the run folder's logs/
            stack.enter_context(_environment(KINJECT_LOG_DIR=str(folder / "logs")))
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(folder / "kinject.log", encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logging.getLogger().addHandler(handler)
            stack.callback(handler.close)
            stack.callback(logging.getLogger().removeHandler, handler)
            if logging.getLogger().level > logging.INFO or logging.getLogger().level == logging.NOTSET:
                logging.getLogger().setLevel(logging.INFO)
        hooks.kinject_run_start(spec=resolved, run_dir=shown)
        started = time.perf_counter()
        records = []
        state: dict[str, Any] = {"metrics": {}, "model": None, "exports": [], "sections": {}, "published": []}
        for planned, cached, seconds in run_stages(run):
            config_type = type(planned.stage.config)
            records.append({"name": planned.stage.name, "key": planned.key, "cached": cached,
                            "seconds": round(seconds, 3), "dir": str(planned.folder),
                            "config_type": f"{config_type.__module__}.{config_type.__qualname__}"})
            _collect(planned.folder, planned.stage, state)
        metrics = {**state["metrics"], **{k: v for k, v in state["sections"].items() if k not in state["metrics"]}}
        dose = combine_doses([(r["name"], Path(r["dir"])) for r in records])
        if dose is not None:  # what the run's knowledge-consuming stages consumed
            details.info("%s", dose_line(dose))
            metrics["dose"] = dose
        state["wall_seconds"] = round(time.perf_counter() - started, 3)
        if folder is not None:
            _write_run_dir(folder, run, resolved, records, metrics, state)
            hooks.kinject_run_end(spec=resolved, run_dir=shown, metrics=metrics)
    return metrics


def execute_repeats(runs: list[RunContext], output: Path) -> dict[str, Any]:
    """Run prepared runs that differ only in seed into ``output/seed-<s>`` (each a run folder) and write their summary
    over seeds as ``output``'s metrics.json; ``output`` is replaced as a whole, atomically."""
    from kinject.evidence.seeds import summarize_seeds

    with run_folder(output, runs[0], "repeats") as tmp:
        per_seed = {run.spec.seed: execute_into(run, tmp / f"seed-{run.spec.seed}" if tmp else None,
                                                Path(output) / f"seed-{run.spec.seed}") for run in runs}
        summary = summarize_seeds(per_seed)
        if tmp is not None:
            (tmp / "metrics.json").write_text(json.dumps(summary, indent=2))
    barrier()
    return summary


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Environment variables set for the block, restored after it."""
    import os

    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _write_run_dir(tmp: Path, run: RunContext, resolved: dict, records: list, metrics: dict, state: dict) -> None:
    """run.json, metrics.json and copies of the stages' model and artifacts (never links: editing a run's files
    must not change the cache)."""
    from kinject.files import copy_tree
    from kinject.machine import environment

    note = type(run.task).recommended_note if run.task is not None else ""
    info = {"spec": resolved, "arm": type(run.strategy).label(run.strategy.config), "command": run.command, "recommended": {"applied": run.recommended, "how": note},
            "protocol": {"name": run.spec.protocol, "applied": run.protocol},
            "defaults": run.defaults, "chosen": run.chosen, "decided_by": run.decided_by,
            "knowledge": knowledge_record(run), "stages": records, "wall_seconds": state.get("wall_seconds"),
            "versions": _versions(), "environment": environment(run.spec.training.bf16),
            "git_sha": _git_sha(), "seed": run.spec.seed, "data": describe_data(run),
            "model_path": run.model_path, "published": list(dict.fromkeys(state["published"])),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (tmp / "run.json").write_text(json.dumps(info, indent=2, default=str))
    (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if state["model"] is not None:
        copy_tree(state["model"], tmp / "model")
    for path in state["exports"]:  # stage artifacts a person reads (plots, masks, predictions)
        copy_tree(path, tmp / path.name)


def knowledge_record(run: RunContext) -> dict:
    """run.json's ``knowledge``: the dose asked for and the facts held out of every source."""
    spec, held = run.spec.knowledge, run.holdout
    return {"epochs": spec.epochs, "exclude": list(spec.exclude or []), "exclude_file": spec.exclude_file,
            "held_out": None if held is None else {"facts": held.facts, "digest": held.digest,
                                                  "splits": list(held.splits), "file": held.file},
            "inputs": run.inputs}



def _run_group_into(run: RunContext, folder: Path | None, shown: Path) -> dict[str, Any]:
    """Run the strategy on every member of a task group (e.g. BLURB) and write the group summary.

    Members were prepared (validated) up front; those whose data is missing are named in the summary.
    """
    member_metrics: dict[str, dict] = {}
    missing: dict[str, str] = {}
    for name, member_run, reason in run.members:
        if member_run is None:
            missing[name] = reason
            continue
        member_metrics[name] = execute_into(member_run, folder / name if folder else None, shown / name)
    summary = run.task.summarize(member_metrics, run.env)
    summary["missing"] = missing
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
