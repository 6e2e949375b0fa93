"""The run engine: resolve a spec into components, run the strategy's stages through a content-keyed
cache, and write the run directory atomically.

Stage key = sha256(stage name + stage config + keys of its inputs + stage version + kinject version).
A finished stage lives in ``<cache>/stages/<name>/<key>/``; an unfinished one in ``<key>.partial/``
(its ``work/`` keeps trainer checkpoints for ``--resume``). Finishing is a rename, so a crash never
leaves a stage that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinject import __version__
from kinject.errors import KinjectError
from kinject.interfaces import Environment, KnowledgeSource, Stage, Strategy, Task
from kinject.registry import registry
from kinject.spec import RunSpec, default_cache_dir, default_data_dir, validate_plugin_config

log = logging.getLogger("kinject")


# -- distributed helpers (no-ops in a single process) ------------------------------------------- #
def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    return rank() == 0


def barrier() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            from accelerate import PartialState

            PartialState()
        dist.barrier()


def stable_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


# -- contexts ---------------------------------------------------------------------------------- #
@dataclass
class RunContext:
    """Everything a strategy's stages see: the spec, resolved components, and the environment."""

    spec: RunSpec
    env: Environment
    task: Task
    strategy: Strategy
    sources: list[KnowledgeSource]
    model_path: str
    resume: bool = False
    stage_keys: dict[str, str] = field(default_factory=dict)
    stage_dirs: dict[str, Path] = field(default_factory=dict)

    def base_config(self) -> dict[str, Any]:
        """What every model-training stage depends on: model, task (with config), training, seed."""
        return {
            "model": self.spec.model.model_dump(),
            "task": {"name": self.task.name, **self.task.config.model_dump(mode="json"),
                     "data": self.task.describe_data(self.env)},
            "training": self.spec.training.cache_fields(),
            "seed": self.spec.seed,
        }

    def hooks(self):
        from kinject.hooks import plugin_manager

        return plugin_manager().hook


@dataclass
class StageContext:
    """What one stage gets: its output folder, its inputs' folders, a persistent work folder."""

    run: RunContext
    stage: Stage
    key: str
    out: Path
    work: Path
    inputs: dict[str, Path]

    @property
    def resume(self) -> bool:
        return self.run.resume


# -- resolution -------------------------------------------------------------------------------- #
def resolve_components(spec: RunSpec) -> tuple[Task, Strategy, list[KnowledgeSource]]:
    """Look up and configure the task, strategy and sources; errors name the spec field."""
    from kinject.errors import UnknownNameError

    def build(kind: str, ref, field_path: str):
        try:
            cls = registry(kind).get(ref.name)
        except UnknownNameError as exc:
            raise type(exc)(f"{field_path}.name: {exc}") from None
        return cls(validate_plugin_config(cls, ref, field_path))

    task = build("tasks", spec.task, "task")
    strategy = build("strategies", spec.strategy, "strategy")
    sources = [build("sources", ref, f"sources.{i}") for i, ref in enumerate(spec.sources)]
    return task, strategy, sources


def resolved_spec(spec: RunSpec, task: Task, strategy: Strategy, sources: list[KnowledgeSource]) -> dict:
    data = spec.model_dump(mode="json")
    data["task"] = {"name": task.name, **task.config.model_dump(mode="json")}
    data["strategy"] = {"name": strategy.name, **strategy.config.model_dump(mode="json")}
    data["sources"] = [{"name": s.name, **s.config.model_dump(mode="json")} for s in sources]
    return data


def make_environment(spec: RunSpec) -> Environment:
    from kinject.models import offline

    return Environment(
        data_dir=Path(spec.data_dir) if spec.data_dir else default_data_dir(),
        cache_dir=Path(spec.cache_dir) if spec.cache_dir else default_cache_dir(),
        seed=spec.seed, limit=spec.training.limit, offline=offline())


def prepare(spec: RunSpec, resume: bool = False) -> RunContext:
    """Resolve and check everything that can fail on user input, before anything is written."""
    from kinject.models import resolve_model

    task, strategy, sources = resolve_components(spec)
    env = make_environment(spec)
    task.check(env)
    task.validate(env)
    for source in sources:
        source.check(env)
    model_path = resolve_model(spec.model.name, env.cache_dir)
    run = RunContext(spec=spec, env=env, task=task, strategy=strategy, sources=sources,
                     model_path=model_path, resume=resume)
    return run


# -- stage cache ------------------------------------------------------------------------------- #
def stage_key(stage: Stage, input_keys: dict[str, str]) -> str:
    return stable_hash({"stage": stage.name, "config": stage.config, "inputs": input_keys,
                        "version": stage.version, "kinject": __version__})


def plan(run: RunContext) -> list[tuple[Stage, str, Path, bool]]:
    """The stages with their keys, cache folders and whether each is already cached."""
    stages = run.strategy.stages(run)
    keys: dict[str, str] = {}
    out = []
    root = run.env.cache_dir / "stages"
    for stage in stages:
        missing = [name for name in stage.inputs if name not in keys]
        if missing:
            raise KinjectError(f"strategy {run.strategy.name!r}: stage {stage.name!r} needs {missing} "
                               "which no earlier stage produces")
        key = stage_key(stage, {name: keys[name] for name in stage.inputs})
        keys[stage.name] = key
        folder = root / stage.name / key[:20]
        out.append((stage, key, folder, (folder / "stage.json").exists()))
    return out


def run_stage(run: RunContext, stage: Stage, key: str, folder: Path) -> tuple[bool, float]:
    """Run one stage unless cached. Returns (cached, seconds)."""
    hooks = run.hooks()
    done = (folder / "stage.json").exists()
    hooks.kinject_stage_start(stage=stage.name, key=key, cached=done)
    start = time.perf_counter()
    if not done:
        partial = folder.with_name(folder.name + ".partial")
        if is_main_process():
            if partial.exists() and not run.resume:
                shutil.rmtree(partial)
            if (partial / "out").exists():
                shutil.rmtree(partial / "out")  # outputs are rewritten; checkpoints in work/ survive
            (partial / "out").mkdir(parents=True, exist_ok=True)
            (partial / "work").mkdir(parents=True, exist_ok=True)
        barrier()
        ctx = StageContext(run=run, stage=stage, key=key, out=partial / "out", work=partial / "work",
                           inputs={name: run.stage_dirs[name] for name in stage.inputs})
        stage.fn(ctx)
        barrier()
        if is_main_process():
            record = {"stage": stage.name, "key": key, "config": stage.config, "inputs": dict(
                (n, run.stage_keys[n]) for n in stage.inputs), "version": stage.version,
                "kinject": __version__, "seconds": round(time.perf_counter() - start, 3)}
            (partial / "out" / "stage.json").write_text(json.dumps(record, indent=2, default=str))
            (partial / "out").rename(folder)
            shutil.rmtree(partial, ignore_errors=True)
        barrier()
    seconds = time.perf_counter() - start
    hooks.kinject_stage_end(stage=stage.name, key=key, cached=done, seconds=seconds)
    return done, seconds


# -- run --------------------------------------------------------------------------------------- #
def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"kinject": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "accelerate", "peft", "adapters", "datasets"):
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
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def default_output(spec: RunSpec) -> Path:
    return Path("runs") / f"{spec.strategy.name}-{spec.task.name}"


def execute(run: RunContext, output: Path) -> dict[str, Any]:
    """Run every stage and write ``output`` (run.json, metrics.json, model/, kinject.log) atomically."""
    from transformers import set_seed

    set_seed(run.spec.seed)
    resolved = resolved_spec(run.spec, run.task, run.strategy, run.sources)
    output = Path(output)
    tmp = output.with_name(f".{output.name}.partial")  # a crashed run's leftovers are cleared here
    handler = None
    if is_main_process():
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        handler = logging.FileHandler(tmp / "kinject.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        if logging.getLogger().level > logging.INFO or logging.getLogger().level == logging.NOTSET:
            logging.getLogger().setLevel(logging.INFO)
    hooks = run.hooks()
    try:
        hooks.kinject_run_start(spec=resolved, run_dir=output)
        records, metrics, model_dir, exports = [], {}, None, []
        for stage, key, folder, _cached in plan(run):
            cached, seconds = run_stage(run, stage, key, folder)
            run.stage_keys[stage.name] = key
            run.stage_dirs[stage.name] = folder
            records.append({"name": stage.name, "key": key, "cached": cached, "seconds": round(seconds, 3),
                            "dir": str(folder)})
            if (folder / "metrics.json").exists():
                metrics = json.loads((folder / "metrics.json").read_text())
            if stage.produces_model and (folder / "model").exists():
                model_dir = folder / "model"
            exports.extend(folder / name for name in stage.artifacts if (folder / name).exists())
        if is_main_process():
            info = {"spec": resolved, "stages": records, "versions": _versions(), "git_sha": _git_sha(),
                    "seed": run.spec.seed, "data": run.task.describe_data(run.env),
                    "model_path": run.model_path, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            (tmp / "run.json").write_text(json.dumps(info, indent=2, default=str))
            (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
            if model_dir is not None:
                shutil.copytree(model_dir, tmp / "model", copy_function=_link_or_copy)
            for path in exports:  # stage artifacts a person reads (plots, masks, tables)
                if path.is_dir():
                    shutil.copytree(path, tmp / path.name, copy_function=_link_or_copy, dirs_exist_ok=True)
                else:
                    _link_or_copy(str(path), str(tmp / path.name))
            hooks.kinject_run_end(spec=resolved, run_dir=output, metrics=metrics)
            if handler is not None:
                logging.getLogger().removeHandler(handler)
                handler.close()
                handler = None
            if output.exists():
                shutil.rmtree(output)
            output.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(output)
        barrier()
        return metrics
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()
        if is_main_process() and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def summarize_repeats(per_seed: dict[int, dict]) -> dict[str, Any]:
    """mean ± std (sample std, ddof=1) of every numeric metric across seeds, per split."""
    import statistics

    summary: dict[str, Any] = {}
    first = next(iter(per_seed.values()), {})
    for split, values in first.items():
        if not isinstance(values, dict):
            continue
        summary[split] = {}
        for name in values:
            series = [m[split][name] for m in per_seed.values()
                      if isinstance(m.get(split, {}).get(name), (int, float))]
            if len(series) == len(per_seed):
                summary[split][name] = {"mean": statistics.fmean(series),
                                        "std": statistics.stdev(series) if len(series) > 1 else 0.0,
                                        "n": len(series), "values": series}
    return summary


def execute_group(run: RunContext, output: Path) -> dict[str, Any]:
    """Run the strategy on every member of a task group (e.g. BLURB) and write the group summary.

    Members whose data is missing are skipped and named in the summary.
    """
    from kinject.errors import DataMissingError
    from kinject.interfaces import TaskGroup

    assert isinstance(run.task, TaskGroup)
    member_metrics: dict[str, dict] = {}
    missing: dict[str, str] = {}
    for member in run.task.members(run.env):
        member_spec = run.spec.model_copy(update={"task": type(run.spec.task)(name=member)})
        try:
            member_run = prepare(member_spec, resume=run.resume)
        except DataMissingError as exc:
            missing[member] = str(exc)
            log.warning("%s: skipped (%s)", member, exc)
            continue
        member_metrics[member] = execute(member_run, Path(output) / member)
    summary = run.task.summarize(member_metrics, run.env)
    summary["missing"] = missing
    if is_main_process():
        Path(output).mkdir(parents=True, exist_ok=True)
        (Path(output) / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
