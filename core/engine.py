"""The run engine: resolve and validate a spec, plan the strategy's declared stages through a content-keyed
cache, run what is missing, and write the run directory atomically.

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
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from kinject import __version__
from kinject.distributed import barrier, is_main_process, rank  # noqa: F401 (re-exported)
from kinject.errors import KinjectError, SpecError
from kinject.fingerprint import check_body, code_fingerprint, keyed_dump, stable_hash
from kinject.interfaces import Environment, KnowledgeSource, Stage, StageContext, Strategy, Task, TaskGroup
from kinject.registry import registry
from kinject.results import summarize_seeds
from kinject.spec import RunSpec, default_cache_dir, default_data_dir, validate_plugin_config

__kinject_fingerprint__ = False  # orchestration: what it does to a stage is covered by CONTRACT below

log = logging.getLogger("kinject")

#: bump when the engine changes what a stage body receives (invalidates every cached stage)
CONTRACT = "2"


# -- contexts ---------------------------------------------------------------------------------- #
@dataclass
class RunContext:
    """A prepared run: the spec, its resolved and validated components, and the planned stages."""

    spec: RunSpec
    env: Environment
    task: Task | None
    strategy: Strategy
    sources: list[KnowledgeSource]
    model_path: str
    resume: bool = False
    stages: list[Stage] = field(default_factory=list)
    members: list[tuple[str, "RunContext | None", str]] = field(default_factory=list)  # task groups
    command: list[str] | None = None
    recommended: dict[str, Any] = field(default_factory=dict)  # the task's settings applied to this spec
    _refs: dict[str, Any] = field(default_factory=dict)

    def model_ref(self):
        """The run's base model as stage configs hold it (see :class:`kinject.refs.ModelRef`)."""
        from kinject.refs import ModelRef, model_fingerprint

        if "model" not in self._refs:
            m = self.spec.model
            self._refs["model"] = ModelRef(
                name=m.name, fingerprint=model_fingerprint(m.name, self.model_path, m.revision), revision=m.revision,
                layers=m.layers, max_length=m.max_length, attn_implementation=m.attn_implementation,
                pooling=m.pooling, path=self.model_path)
        return self._refs["model"]

    def task_ref(self, task: Task | None = None):
        """A task (the run's by default) as stage configs hold it (see :class:`kinject.refs.TaskRef`)."""
        from kinject.refs import TaskRef

        task = task or self.task
        key = f"task:{id(task)}"
        if key not in self._refs:
            self._refs[key] = TaskRef.of(task, self.env)
        return self._refs[key]

    def source_refs(self) -> list:
        from kinject.refs import SourceRef

        if "sources" not in self._refs:
            self._refs["sources"] = [SourceRef.of(s, self.env) for s in self.sources]
        return self._refs["sources"]

    def hooks(self):
        from kinject.hooks import plugin_manager

        return plugin_manager().hook


@dataclass
class PlannedStage:
    stage: Stage
    key: str
    folder: Path
    cached: bool
    record: dict  # what the key hashes (stage.json keeps it, so a later miss can say what changed)


# -- resolution and validation ----------------------------------------------------------------- #
def resolve_components(spec: RunSpec) -> tuple[Task | None, Strategy, list[KnowledgeSource]]:
    """Look up and configure the task, strategy and sources; errors name the spec field."""
    from kinject.errors import UnknownNameError

    def build(kind: str, ref, field_path: str):
        try:
            cls = registry(kind).get(ref.name)
        except UnknownNameError as exc:
            raise type(exc)(f"{field_path}.name: {exc}") from None
        return cls(validate_plugin_config(cls, ref, field_path))

    task = build("tasks", spec.task, "task") if spec.task is not None else None
    strategy = build("strategies", spec.strategy, "strategy")
    if task is None and strategy.needs_task:
        raise SpecError(f"task: required for strategy {strategy.name!r}; pass --task NAME or set task.name "
                        "in --config")
    sources = [build("sources", ref, f"sources.{i}") for i, ref in enumerate(spec.sources)]
    return task, strategy, sources


def resolved_spec(spec: RunSpec, task: Task, strategy: Strategy, sources: list[KnowledgeSource]) -> dict:
    data = spec.model_dump(mode="json")
    data["task"] = {"name": task.name, **task.config.model_dump(mode="json")} if task is not None else None
    data["strategy"] = {"name": strategy.name, **strategy.config.model_dump(mode="json")}
    data["sources"] = [{"name": s.name, **s.config.model_dump(mode="json")} for s in sources]
    return data


def make_environment(spec: RunSpec) -> Environment:
    from kinject.models import offline

    return Environment(
        data_dir=Path(spec.data_dir) if spec.data_dir else default_data_dir(),
        cache_dir=Path(spec.cache_dir) if spec.cache_dir else default_cache_dir(),
        seed=spec.seed, limit=spec.training.limit, offline=offline())


def _resolve_model(spec: RunSpec, env: Environment) -> str:
    from kinject.models import resolve_model

    path = resolve_model(spec.model.name, env.cache_dir)
    if spec.model.revision and Path(path).exists():
        raise SpecError(f"model.revision: {spec.model.revision!r} pins a hub revision, but model "
                        f"{spec.model.name!r} is a local model ({path})")
    return path


def prepare(spec: RunSpec, resume: bool = False, command: list[str] | None = None) -> RunContext:
    """Resolve and check everything that can fail on user input - spec, data, sources, the strategy's
    own checks and its stage plan - before any stage starts or anything is written."""
    task, strategy, sources = resolve_components(spec)
    applied: dict[str, Any] = {}
    if task is not None and not isinstance(task, TaskGroup):
        from kinject.spec import apply_recommended

        spec, applied = apply_recommended(spec, type(task).recommended)
    env = make_environment(spec)
    model_path = _resolve_model(spec, env)
    run = RunContext(spec=spec, env=env, task=task, strategy=strategy, sources=sources, model_path=model_path,
                     resume=resume, command=command, recommended=applied)
    if isinstance(task, TaskGroup):
        run.members = _prepare_members(run)
        return run
    if task is not None:
        task.prepare_data(env)
    for source in sources:
        source.check(env)
    strategy.validate(run)
    run.stages = strategy.stages(run)
    _check_stages(run)
    return run


def _prepare_members(run: RunContext) -> list[tuple[str, RunContext | None, str]]:
    """Prepare every member of a task group; members without data are kept as (name, None, reason)."""
    from kinject.errors import DataMissingError

    out = []
    for member in run.task.members(run.env):
        member_spec = run.spec.model_copy(update={"task": type(run.spec.task)(name=member)})
        try:
            out.append((member, prepare(member_spec, resume=run.resume, command=run.command), ""))
        except DataMissingError as exc:
            log.warning("%s: skipped (%s)", member, exc)
            out.append((member, None, str(exc)))
    return out


def _check_stages(run: RunContext) -> None:
    names: set[str] = set()
    for stage in run.stages:
        check_body(stage.body, stage.name)
        if stage.name in names:
            raise KinjectError(f"strategy {run.strategy.name!r}: two stages named {stage.name!r}")
        missing = [name for name in stage.inputs if name not in names]
        if missing:
            raise KinjectError(f"strategy {run.strategy.name!r}: stage {stage.name!r} needs {missing} "
                               "which no earlier stage produces")
        names.add(stage.name)


# -- keys and the plan ------------------------------------------------------------------------- #
def _library_versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "-"
    return out


def _ref_modules(value: Any) -> list[str]:
    """Code modules of every reference (task, source) held anywhere in a stage config."""
    from pydantic import BaseModel

    from kinject.refs import Ref

    out: list[str] = []
    if isinstance(value, Ref):
        out.extend(value.code_modules())
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            out.extend(_ref_modules(getattr(value, name)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            out.extend(_ref_modules(item))
    elif isinstance(value, dict):
        for item in value.values():
            out.extend(_ref_modules(item))
    return out


def stage_record(stage: Stage, input_keys: dict[str, str]) -> dict:
    """Everything the stage's key hashes."""
    code = code_fingerprint(stage.body, (*stage.code, *dict.fromkeys(_ref_modules(stage.config))))
    return {"stage": stage.name, "config_type": f"{type(stage.config).__module__}.{type(stage.config).__qualname__}",
            "config": keyed_dump(stage.config), "inputs": input_keys,
            "code": code, "body": f"{stage.body.__module__}.{stage.body.__qualname__}",
            "libraries": _library_versions(stage.libraries), "contract": CONTRACT}


def plan(run: RunContext) -> list[PlannedStage]:
    """The stages with their keys, cache folders and whether each is already cached."""
    keys: dict[str, str] = {}
    out = []
    root = run.env.cache_dir / "stages"
    for stage in run.stages:
        record = stage_record(stage, {name: keys[name] for name in stage.inputs})
        key = stable_hash(record)
        keys[stage.name] = key
        folder = root / stage.name / key[:20]
        out.append(PlannedStage(stage, key, folder, (folder / "stage.json").exists(), record))
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def record_differences(old: dict, new: dict) -> list[str]:
    """What differs between two stage records, as short human-readable items."""
    diffs = []
    a, b = _flatten(old.get("config", {})), _flatten(new.get("config", {}))
    for name in sorted(set(a) | set(b)):
        if a.get(name, "<unset>") != b.get(name, "<unset>"):
            diffs.append(f"{name}: {a.get(name, '<unset>')!r} -> {b.get(name, '<unset>')!r}")
    code_a, code_b = old.get("code", {}), new.get("code", {})
    changed = sorted(m for m in set(code_a) | set(code_b) if code_a.get(m) != code_b.get(m))
    if changed:
        diffs.append("code changed: " + ", ".join(changed))
    for name in sorted(set(old.get("inputs", {})) | set(new.get("inputs", {}))):
        if old.get("inputs", {}).get(name) != new.get("inputs", {}).get(name):
            diffs.append(f"input {name} changed")
    for name in sorted(set(old.get("libraries", {})) | set(new.get("libraries", {}))):
        if old.get("libraries", {}).get(name) != new.get("libraries", {}).get(name):
            diffs.append(f"{name} {old.get('libraries', {}).get(name)} -> {new['libraries'].get(name)}")
    for name in ("config_type", "body", "contract"):
        if old.get(name) != new.get(name):
            diffs.append(f"{name}: {old.get(name)} -> {new.get(name)}")
    return diffs


def explain_miss(planned: PlannedStage, cache_dir: Path) -> str:
    """Why a stage is not cached: the fewest differences to any cached run of the same stage."""
    best: list[str] | None = None
    for path in (Path(cache_dir) / "stages" / planned.stage.name).glob("*/stage.json"):
        try:
            old = json.loads(path.read_text()).get("record")
        except (OSError, ValueError):
            continue
        if not old:
            continue
        diffs = record_differences(old, planned.record)
        if diffs and (best is None or len(diffs) < len(best)):
            best = diffs
    return "; ".join(best) if best else "never run with this cache"


# -- running ----------------------------------------------------------------------------------- #
def run_stage(run: RunContext, planned: PlannedStage, stage_dirs: dict[str, Path],
              alone: bool = False) -> tuple[bool, float]:
    """Run one stage unless cached. Returns (cached, seconds).

    ``alone``: this process runs the stage by itself (a spread stage under torchrun): no barriers, and the
    body runs in a fresh single-process worker (:mod:`kinject.worker`).
    """
    stage, key, folder = planned.stage, planned.key, planned.folder
    sync = (lambda: None) if alone else barrier
    main = alone or is_main_process()
    hooks = run.hooks()
    done = (folder / "stage.json").exists()
    hooks.kinject_stage_start(stage=stage.name, key=key, cached=done)
    start = time.perf_counter()
    if not done:
        partial = folder.with_name(folder.name + ".partial")
        if main:
            if partial.exists() and not run.resume:
                shutil.rmtree(partial)
            if (partial / "out").exists():
                shutil.rmtree(partial / "out")  # outputs are rewritten; checkpoints in work/ survive
            (partial / "out").mkdir(parents=True, exist_ok=True)
            (partial / "work").mkdir(parents=True, exist_ok=True)
        sync()
        ctx = StageContext(name=stage.name, key=key, out=partial / "out", work=partial / "work",
                           inputs={name: stage_dirs[name] for name in stage.inputs}, resume=run.resume,
                           cache_dir=run.env.cache_dir, offline=run.env.offline)
        if alone:
            _run_in_worker(stage, ctx)
        else:
            stage.body(stage.config, ctx)
        sync()
        if main:
            info = {"stage": stage.name, "key": key, "record": planned.record,
                    "config": stage.config.model_dump(mode="json"), "kinject": __version__,
                    "seconds": round(time.perf_counter() - start, 3), "rank": rank()}
            (partial / "out" / "stage.json").write_text(json.dumps(info, indent=2, default=str))
            (partial / "out").rename(folder)
            shutil.rmtree(partial, ignore_errors=True)
        sync()
    seconds = time.perf_counter() - start
    hooks.kinject_stage_end(stage=stage.name, key=key, cached=done, seconds=seconds)
    return done, seconds


def _run_in_worker(stage: Stage, ctx: StageContext) -> None:
    import os
    import sys

    from kinject.worker import DISTRIBUTED_VARIABLES, job

    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_VARIABLES}
    result = subprocess.run([sys.executable, "-m", "kinject.worker"], input=json.dumps(job(stage, ctx)),
                            text=True, env=env)
    if result.returncode != 0:
        raise KinjectError(f"stage {stage.name!r} failed in its worker process (exit code {result.returncode}; "
                           "its error is printed above)")


def run_stages(run: RunContext) -> list[tuple[PlannedStage, bool, float]]:
    """Run the plan in order. Under torchrun, each run of consecutive ``spread`` stages is shared out: process
    r runs stages r, r + N, ...; all processes wait for the whole group before going on."""
    from kinject.distributed import world_size

    planned_stages = plan(run)
    stage_dirs: dict[str, Path] = {}
    out: list[tuple[PlannedStage, bool, float]] = []
    i = 0
    while i < len(planned_stages):
        planned = planned_stages[i]
        if not (planned.stage.spread and world_size() > 1):
            cached, seconds = run_stage(run, planned, stage_dirs)
            stage_dirs[planned.stage.name] = planned.folder
            out.append((planned, cached, seconds))
            i += 1
            continue
        group = []
        while i < len(planned_stages) and planned_stages[i].stage.spread:
            group.append(planned_stages[i])
            i += 1
        mine = {}
        for j, member in enumerate(group):
            if j % world_size() == rank():
                mine[j] = run_stage(run, member, stage_dirs, alone=True)
        barrier()
        for j, member in enumerate(group):
            stage_dirs[member.stage.name] = member.folder
            out.append((member, *mine.get(j, (True, 0.0))))
    return out


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


def _link_or_copy(src: str, dst: str) -> None:
    import os

    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def describe_data(run: RunContext) -> str:
    """What data the run's task reads (or that it has no task)."""
    return run.task.describe_data(run.env) if run.task is not None else "(no task)"


def default_output(spec: RunSpec) -> Path:
    return Path("runs") / (f"{spec.strategy.name}-{spec.task.name}" if spec.task else spec.strategy.name)


def _collect(folder: Path, stage: Stage, state: dict) -> None:
    """Fold one finished stage's outputs into what the run directory will hold."""
    if (folder / "metrics.json").exists():
        state["metrics"] = json.loads((folder / "metrics.json").read_text())
    if (folder / "comparison.json").exists():
        state["comparison"] = json.loads((folder / "comparison.json").read_text())
    if stage.produces_model and (folder / "model").exists():
        state["model"] = folder / "model"
    state["exports"].extend(folder / name for name in stage.artifacts if (folder / name).exists())


def execute(run: RunContext, output: Path) -> dict[str, Any]:
    """Run every stage and write ``output`` (run.json, metrics.json, model/, artifacts, kinject.log) atomically."""
    from contextlib import ExitStack

    from transformers import set_seed

    from kinject.io import atomic_directory

    if run.members:
        return execute_group(run, output)
    set_seed(run.spec.seed)
    resolved = resolved_spec(run.spec, run.task, run.strategy, run.sources)
    output = Path(output)
    hooks = run.hooks()
    with ExitStack() as stack:
        tmp = stack.enter_context(atomic_directory(output, replace=True)) if is_main_process() else None
        if tmp is not None:
            handler = logging.FileHandler(tmp / "kinject.log", encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logging.getLogger().addHandler(handler)
            stack.callback(handler.close)
            stack.callback(logging.getLogger().removeHandler, handler)
            if logging.getLogger().level > logging.INFO or logging.getLogger().level == logging.NOTSET:
                logging.getLogger().setLevel(logging.INFO)
        hooks.kinject_run_start(spec=resolved, run_dir=output)
        records = []
        state: dict[str, Any] = {"metrics": {}, "comparison": None, "model": None, "exports": []}
        for planned, cached, seconds in run_stages(run):
            records.append({"name": planned.stage.name, "key": planned.key, "cached": cached,
                            "seconds": round(seconds, 3), "dir": str(planned.folder)})
            _collect(planned.folder, planned.stage, state)
        metrics = state["metrics"]
        if state["comparison"] is not None:
            metrics = {**metrics, "comparison": state["comparison"]}
        if tmp is not None:
            _write_run_dir(tmp, run, resolved, records, metrics, state)
            hooks.kinject_run_end(spec=resolved, run_dir=output, metrics=metrics)
    barrier()
    return metrics


def _write_run_dir(tmp: Path, run: RunContext, resolved: dict, records: list, metrics: dict, state: dict) -> None:
    note = type(run.task).recommended_note if run.task is not None else ""
    info = {"spec": resolved, "command": run.command, "recommended": {"applied": run.recommended, "how": note},
            "stages": records, "versions": _versions(),
            "git_sha": _git_sha(), "seed": run.spec.seed, "data": describe_data(run),
            "model_path": run.model_path, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (tmp / "run.json").write_text(json.dumps(info, indent=2, default=str))
    (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if state["model"] is not None:
        shutil.copytree(state["model"], tmp / "model", copy_function=_link_or_copy)
    for path in state["exports"]:  # stage artifacts a person reads (plots, masks, predictions)
        if path.is_dir():
            shutil.copytree(path, tmp / path.name, copy_function=_link_or_copy, dirs_exist_ok=True)
        else:
            _link_or_copy(str(path), str(tmp / path.name))


def execute_repeats(runs: list[RunContext], output: Path) -> dict[str, Any]:
    """Run prepared runs that differ only in seed into ``output/seed-<s>`` and summarise them."""
    per_seed = {run.spec.seed: execute(run, Path(output) / f"seed-{run.spec.seed}") for run in runs}
    summary = summarize_seeds(per_seed)
    if is_main_process():
        (Path(output) / "metrics.json").write_text(json.dumps(summary, indent=2))
    return summary


def execute_group(run: RunContext, output: Path) -> dict[str, Any]:
    """Run the strategy on every member of a task group (e.g. BLURB) and write the group summary.

    Members were prepared (validated) up front; those whose data is missing are named in the summary.
    """
    member_metrics: dict[str, dict] = {}
    missing: dict[str, str] = {}
    for name, member_run, reason in run.members:
        if member_run is None:
            missing[name] = reason
            continue
        member_metrics[name] = execute(member_run, Path(output) / name)
    summary = run.task.summarize(member_metrics, run.env)
    summary["missing"] = missing
    if is_main_process():
        Path(output).mkdir(parents=True, exist_ok=True)
        (Path(output) / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
