"""The run engine: resolve and validate a spec, plan the strategy's declared stages through a content-keyed
cache (:mod:`kinject.planning`), run what is missing, and write the run directory atomically.

Stage key = sha256(name + keyed config fields + input stage keys + the source of the modules that implement
the stage body + library versions); see :mod:`kinject.fingerprint`. A finished stage lives in
``<cache>/stages/<name>/<key>/`` (with ``stage.json``, what made the key); an unfinished one in
``<key>.partial/`` (its ``work/`` keeps trainer checkpoints for ``--resume``). Finishing is a rename, so a
crash never leaves a stage that looks finished. Everything that can fail on user input fails in
:func:`prepare`, before any stage starts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import subprocess
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterator

from kinject import __version__
from kinject.distributed import barrier, is_main_process, rank  # noqa: F401 (re-exported)
from kinject.errors import KinjectError, SpecError
from kinject.fingerprint import check_body
from kinject.interfaces import RUN_METRICS_FILE, Environment, KnowledgeSource, Stage, Strategy, Task, TaskGroup
from kinject.planning import (CONTRACT, PlannedStage, explain_miss, plan, record_differences,  # noqa: F401
                              run_stage, run_stages, stage_record)
from kinject.registry import registry
from kinject.results import summarize_seeds
from kinject.spec import RunSpec, default_cache_dir, default_data_dir, resolve_precision, validate_plugin_config


log = logging.getLogger("kinject")

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
    protocol: dict[str, Any] = field(default_factory=dict)  # the strategy's protocol preset applied to it
    defaults: dict[str, str] = field(default_factory=dict)  # settings kinject.choose's rules filled in, and why
    chosen: dict | None = None  # what cross-validation on a small train split chose (kinject.choose.choose)
    output: Path | None = None  # the run folder, once the run executes
    resolved: Any = None  # what the strategy's validate returned, for its stages
    holdout: Any = None  # the facts every knowledge source holds out (kinject.refs.HoldOutRef; None: none)
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
        """The run's knowledge sources as stage configs hold them (with the facts the run holds out)."""
        if "sources" not in self._refs:
            self._refs["sources"] = [self.source_ref(s) for s in self.sources]
        return self._refs["sources"]

    def source_ref(self, source: KnowledgeSource, env: Environment | None = None):
        """A knowledge source (the run's, or one a strategy defaults to) as a stage config holds it, with the facts
        the run holds out of every source (``knowledge.exclude``)."""
        from kinject.refs import SourceRef

        return SourceRef.of(source, env or self.env).holding_out(self.holdout)

    def hook_settings(self, name: str):
        """The settings of hook plugin ``name`` (``hooks.<name>`` of the spec, checked by the hook's ``Config``;
        its defaults when the spec sets none)."""
        if f"hook:{name}" not in self._refs:
            self._refs[f"hook:{name}"] = _hook_settings(name, self.spec.hooks.get(name, {}))
        return self._refs[f"hook:{name}"]

    @property
    def knowledge_epochs(self) -> float | None:
        """The knowledge dose the run asks for (``knowledge.epochs``; None: the strategy's own budget)."""
        return self.spec.knowledge.epochs

    def hooks(self):
        from kinject.hooks import plugin_manager

        return plugin_manager().hook


def _hook_settings(name: str, options: dict[str, Any]):
    """A hook plugin's settings validated by its ``Config`` (a PluginConfig the hook module or object declares)."""
    from kinject.errors import UnknownNameError
    from kinject.registry import registry
    from kinject.spec import PluginRef, validate_plugin_config

    try:
        hook = registry("hooks").get(name)
    except UnknownNameError as error:
        raise SpecError(f"hooks.{name}: {error}") from None
    if getattr(hook, "Config", None) is None:
        if options:
            raise SpecError(f"hooks.{name}: hook plugin {name!r} takes no settings")
        return None
    return validate_plugin_config(hook, PluginRef(name=name, **options), f"hooks.{name}")


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

    from kinject.io import CHARS_PER_TOKEN

    fold = None
    if spec.fold:
        parts = [int(x) for x in spec.fold.split("/")]
        index, k, seed = (*parts, 0) if len(parts) == 2 else parts
        if not 0 <= index < k or k < 2:
            raise SpecError(f"fold: {spec.fold!r}: expected i/k with 0 <= i < k and k >= 2")
        fold = (index, k, seed)
    return Environment(
        data_dir=Path(spec.data_dir) if spec.data_dir else default_data_dir(),
        cache_dir=Path(spec.cache_dir) if spec.cache_dir else default_cache_dir(),
        seed=spec.seed, limit=spec.training.limit, offline=offline(),
        max_chars=spec.model.max_length * CHARS_PER_TOKEN, fold=fold)


def _resolve_model(spec: RunSpec, env: Environment) -> str:
    """The model's loadable path, its config read and the model settings checked against it (before any stage)."""
    from kinject.models import check_model_settings, model_config, resolve_model

    path = resolve_model(spec.model.name, env.cache_dir)
    if spec.model.revision and Path(path).exists():
        raise SpecError(f"model.revision: {spec.model.revision!r} pins a hub revision, but model "
                        f"{spec.model.name!r} is a local model ({path})")
    check_model_settings(spec.model, model_config(spec.model.name, path, spec.model.revision))
    return path


def prepare(spec: RunSpec, resume: bool = False, command: list[str] | None = None) -> RunContext:
    """Resolve and check everything that can fail on user input - spec, data, sources, the strategy's
    own checks and its stage plan - before any stage starts or anything is written."""
    spec, protocol = _apply_protocol(spec)
    task, strategy, sources = resolve_components(spec)
    applied: dict[str, Any] = {}
    if task is not None and not isinstance(task, TaskGroup):
        from kinject.spec import apply_recommended

        spec, applied = apply_recommended(spec, type(task).recommended)
    spec = resolve_precision(spec)
    env = make_environment(spec)
    from kinject.files import check_writable

    check_writable(env.cache_dir, "stage cache")
    model_path = _resolve_model(spec, env)
    run = RunContext(spec=spec, env=env, task=task, strategy=strategy, sources=sources, model_path=model_path,
                     resume=resume, command=command, recommended=applied, protocol=protocol)
    for name in spec.hooks:  # every hook's settings checked before any data is read
        run.hook_settings(name)
    if isinstance(task, TaskGroup):
        run.members = _prepare_members(run)
        return run
    if task is not None:
        with plugin_code("tasks", task):
            task.prepare_data(env)
    for source in sources:
        with plugin_code("sources", source):
            source.check(env)
    if task is not None:
        _check_task_kind(strategy, task, env)
        from kinject.choose import default_rules

        run.defaults = default_rules(run)  # a dev split too small to rank, a head rate, a long split's epochs
    run.holdout = _holdout(run)
    with plugin_code("strategies", strategy):
        run.resolved = strategy.validate(run)
        run.stages = strategy.stages(run)
    for extra in run.hooks().kinject_extra_stages(run=run):  # e.g. the knowledge probe, for every strategy
        run.stages.extend(extra or [])
    if run.holdout is not None:  # every source of every stage, the defaults a strategy builds itself included
        run.stages = [dataclasses.replace(stage, config=_holding_out(stage.config, run.holdout))
                      for stage in run.stages]
    _check_stages(run)
    return run


def _check_task_kind(strategy: Strategy, task: Task, env: Environment) -> None:
    """One line when the strategy does not support the task's shape (its head's kind)."""
    kinds = type(strategy).task_kinds
    kind = task.head(env).kind
    if kind not in kinds:
        names = {"sequence": "sequence classification (single texts, pairs, retrieval)", "token": "token tagging"}
        raise SpecError(f"task: strategy {strategy.name!r} supports {' and '.join(names.get(k, k) for k in sorted(kinds))}"
                        f" tasks; {task.name!r} is a {names.get(kind, kind)} task (kinject list strategies shows what "
                        "each supports)")


def _holdout(run: RunContext):
    """The facts every knowledge source of the run holds out (``knowledge.exclude`` of the task's splits, and
    ``knowledge.exclude_file``); None when there are none."""
    from kinject.refs import HoldOutRef

    spec = run.spec.knowledge
    splits = [s for s in spec.exclude if run.task is not None and s in (run.task.train_split, *run.task.eval_splits)]
    if spec.exclude_file and not Path(spec.exclude_file).expanduser().is_file():
        raise SpecError(f"knowledge.exclude_file: {spec.exclude_file} is not a file (head<TAB>relation<TAB>tail lines)")
    if not splits and not spec.exclude_file:
        return None
    file = str(Path(spec.exclude_file).expanduser().resolve()) if spec.exclude_file else None
    with plugin_code("tasks", run.task) if run.task is not None else _nothing():
        return HoldOutRef.of(run.task, run.env, splits, file)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _holding_out(value: Any, holdout: Any) -> Any:
    """``value`` (a stage config, or part of one) with every SourceRef in it holding the run's facts out."""
    from pydantic import BaseModel

    from kinject.refs import SourceRef

    if isinstance(value, SourceRef):
        return value.holding_out(holdout)
    if isinstance(value, BaseModel):
        changed = {}
        for name in type(value).model_fields:
            item = getattr(value, name)
            new = _holding_out(item, holdout)
            if new is not item:
                changed[name] = new
        return value.model_copy(update=changed) if changed else value
    if isinstance(value, (list, tuple)):
        items = [_holding_out(item, holdout) for item in value]
        return type(value)(items) if any(a is not b for a, b in zip(items, value)) else value
    if isinstance(value, dict):
        items = {k: _holding_out(v, holdout) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    return value


@contextmanager
def plugin_code(kind: str, plugin: Any) -> Iterator[None]:
    """Run a plugin's code; an ImportError anywhere in it (a package it needs is missing or broken) becomes one
    line naming the plugin and its distribution (a PluginLoadError, exit 2)."""
    from kinject.errors import PluginLoadError
    from kinject.registry import SINGULAR

    try:
        yield
    except ImportError as exc:
        try:
            info = registry(kind).info(plugin.name)
            where = f" from {info.distribution} {info.version}"
        except KinjectError:
            where = ""
        raise PluginLoadError(f"{SINGULAR[kind]} {plugin.name!r}{where}: {type(exc).__name__}: {exc} (a package it "
                              "needs is missing or broken)") from None


def _apply_protocol(spec: RunSpec) -> tuple[RunSpec, dict[str, Any]]:
    """The spec with its strategy's ``protocol`` preset applied (``kinject``: none)."""
    from kinject.errors import UnknownNameError
    from kinject.spec import apply_protocol

    if spec.protocol == "kinject":
        return spec, {}
    try:
        cls = registry("strategies").get(spec.strategy.name)
    except UnknownNameError as exc:
        raise type(exc)(f"strategy.name: {exc}") from None
    presets = cls.protocols.get(spec.protocol)
    if presets is None and spec.protocol == "quick":  # --quick works for a strategy that declares no quick protocol
        log.info("protocol quick: strategy %r declares none; its stages keep their own budgets, fine-tuning gets "
                 "training.max_steps=30", spec.strategy.name)
        presets = QUICK
    if presets is None:
        known = ", ".join(["kinject", *cls.protocols])
        raise SpecError(f"protocol: strategy {spec.strategy.name!r} has no {spec.protocol!r} protocol (has: {known})")
    check_protocol(cls, spec.protocol, presets)
    return apply_protocol(spec, presets)


#: ``--quick`` for a strategy without a quick protocol of its own
QUICK: dict[str, dict[str, Any]] = {"training": {"max_steps": 30}}


def check_protocol(cls: type, name: str, presets: dict) -> None:
    """A protocol preset names real fields: sections strategy / model / training, each key a field of the strategy's
    config, ModelSpec or TrainingSpec (a dotted ``--set``-style key, or a typo, would silently do nothing)."""
    from kinject.spec import ModelSpec, TrainingSpec

    fields = {"strategy": cls.Config.model_fields, "model": ModelSpec.model_fields,
              "training": TrainingSpec.model_fields}
    for section, values in presets.items():
        where = f"strategy {cls.name or cls.__name__!r}'s protocol {name!r}"
        if section not in fields:
            raise SpecError(f"protocol: {where} has a section {section!r}; a protocol sets strategy, model and "
                            "training fields ({section: {field: value}})")
        unknown = [k for k in (values or {}) if k not in fields[section]]
        if unknown:
            raise SpecError(f"protocol: {where} sets {section}.{unknown[0]}, which is no field of {section} "
                            f"(fields: {', '.join(sorted(fields[section]))})")


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


def describe_data(run: RunContext) -> str:
    """What data the run's task reads (or that it has no task)."""
    return run.task.describe_data(run.env) if run.task is not None else "(no task)"


def describe_training(run: RunContext) -> list[str]:
    """What the run trains on, for --dry-run: the task's training examples and every knowledge source a stage
    reads (the configured ones or a strategy's default), with its options."""
    from kinject.refs import SourceRef

    out = []
    if run.task is not None and not run.members:
        examples = len(run.task.examples(run.task.train_split, run.env))
        out.append(f"task {run.task.name} {run.task.train_split} split: {examples} examples"
                   + (f" (--limit {run.env.limit})" if run.env.limit else ""))
    seen: set[str] = set()

    def sources(value):
        if isinstance(value, SourceRef):
            yield value
        elif hasattr(type(value), "model_fields"):
            for name in type(value).model_fields:
                yield from sources(getattr(value, name))
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from sources(item)

    for stage in run.stages:
        for ref in sources(stage.config):
            options = {k: v for k, v in ref.options.items() if v not in (None, [], {}, False)}
            text = f"knowledge source {ref.name} ({ref.kind}) {options}"
            if text not in seen:
                seen.add(text)
                out.append(f"{text}, first read by stage {stage.name}")
    return out


def default_output(spec: RunSpec) -> Path:
    return Path("runs") / (f"{spec.strategy.name}-{spec.task.name}" if spec.task else spec.strategy.name)


# -- the run folder ---------------------------------------------------------------------------------- #
RUN_MARKER = ".kinject-run"  # in every folder a run writes: what lets a later run replace it


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a folder a kinject run wrote (its marker, or a run.json of a run made before it)."""
    path = Path(path)
    if (path / RUN_MARKER).is_file():
        return True
    try:
        info = json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and {"spec", "stages"} <= set(info)


def _replaceable(path: Path) -> bool:
    return path.is_dir() and (not any(path.iterdir()) or is_run_folder(path))


def check_output(output: Path, env: Environment) -> Path:
    """The run folder ``output`` as an absolute path, after checking that a run may replace it: it does not exist,
    is empty or is an earlier run, and neither is nor holds the current folder, the cache or the data dir.
    SpecError (one line naming the folder) otherwise."""
    import os

    out = Path(os.path.normpath(Path(output).absolute()))
    cwd = Path.cwd()
    if out == cwd or out in cwd.parents:
        raise SpecError(f"output: {output} is the current folder or holds it, and a run replaces its folder as a "
                        "whole; name a folder for the run, e.g. -o runs/NAME")
    for what, folder in (("stage cache", env.cache_dir), ("data dir", env.data_dir)):
        folder = Path(os.path.normpath(Path(folder).absolute()))
        if folder == out or out in folder.parents:
            raise SpecError(f"output: {output} holds the {what} ({folder}); name another folder for the run")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SpecError(f"output: {output} exists and is not a folder; name a folder for the run")
    if out.is_dir() and not _replaceable(out):
        entries = sorted(p.name for p in out.iterdir())
        shown = ", ".join(repr(e) for e in entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
        raise SpecError(f"output: {output} exists and is not a kinject run folder (it holds {shown}); a run replaces "
                        "only an empty folder or an earlier run: choose another -o")
    return out


@contextmanager
def run_folder(output: Path, run: RunContext, kind: str = "run") -> Iterator[Path | None]:
    """The folder a run writes into, put in place of ``output`` atomically when the block succeeds (the earlier
    run there is kept until then; a failure leaves it as it was). Checks ``output`` first
    (:func:`check_output`); yields None in processes other than the main one."""
    from kinject.files import atomic_directory, check_writable

    output = check_output(output, run.env)
    if not is_main_process():
        yield None
        return
    check_writable(output.parent, "output folder")
    with atomic_directory(output, replace=True, replaceable=_replaceable) as tmp:
        (tmp / RUN_MARKER).write_text(json.dumps({"kinject": __version__, "kind": kind}) + "\n")
        yield tmp


# -- executing --------------------------------------------------------------------------------------- #
def _collect(folder: Path, stage: Stage, state: dict) -> None:
    """Fold one finished stage's outputs into what the run directory will hold."""
    if (folder / "metrics.json").exists():
        state["metrics"] = json.loads((folder / "metrics.json").read_text())
    if (folder / "comparison.json").exists():
        state["comparison"] = json.loads((folder / "comparison.json").read_text())
    if (folder / RUN_METRICS_FILE).exists():  # sections a stage adds to the run's metrics (e.g. the knowledge probe)
        state["sections"].update(json.loads((folder / RUN_METRICS_FILE).read_text()))
    if stage.produces_model and (folder / "model").exists():
        state["model"] = folder / "model"
    state["exports"].extend(folder / name for name in stage.artifacts if (folder / name).exists())


def execute(run: RunContext, output: Path) -> dict[str, Any]:
    """Run every stage and write the run folder ``output`` (run.json, metrics.json, model/, artifacts, kinject.log),
    replacing an earlier run there atomically."""
    with run_folder(output, run, "group" if run.members else "run") as tmp:
        metrics = _run_into(run, tmp, Path(output))
    barrier()
    return metrics


def _run_into(run: RunContext, folder: Path | None, shown: Path) -> dict[str, Any]:
    """Run ``run`` writing its files into ``folder`` (None: a process that writes nothing); ``shown`` is where the
    folder will be once the run succeeds (for hooks and messages)."""
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
        state: dict[str, Any] = {"metrics": {}, "comparison": None, "model": None, "exports": [], "sections": {}}
        for planned, cached, seconds in run_stages(run):
            config_type = type(planned.stage.config)
            records.append({"name": planned.stage.name, "key": planned.key, "cached": cached,
                            "seconds": round(seconds, 3), "dir": str(planned.folder),
                            "config_type": f"{config_type.__module__}.{config_type.__qualname__}"})
            _collect(planned.folder, planned.stage, state)
        metrics = {**state["metrics"], **{k: v for k, v in state["sections"].items() if k not in state["metrics"]}}
        from kinject.knowledge import combine_doses, dose_line

        dose = combine_doses([(r["name"], Path(r["dir"])) for r in records])
        if dose is not None:  # what the run's knowledge-consuming stages consumed (kinject.knowledge)
            metrics["dose"] = dose
            log.info("%s", dose_line(dose))
        if state["comparison"] is not None:
            metrics = {**metrics, "comparison": state["comparison"]}
        state["wall_seconds"] = round(time.perf_counter() - started, 3)
        if folder is not None:
            _write_run_dir(folder, run, resolved, records, metrics, state)
            hooks.kinject_run_end(spec=resolved, run_dir=shown, metrics=metrics)
    return metrics


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

    note = type(run.task).recommended_note if run.task is not None else ""
    info = {"spec": resolved, "command": run.command, "recommended": {"applied": run.recommended, "how": note},
            "protocol": {"name": run.spec.protocol, "applied": run.protocol},
            "defaults": run.defaults, "chosen": run.chosen,
            "knowledge": knowledge_record(run), "stages": records, "wall_seconds": state.get("wall_seconds"),
            "versions": _versions(),
            "git_sha": _git_sha(), "seed": run.spec.seed, "data": describe_data(run),
            "model_path": run.model_path, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (tmp / "run.json").write_text(json.dumps(info, indent=2, default=str))
    (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if state["model"] is not None:
        copy_tree(state["model"], tmp / "model")
    for path in state["exports"]:  # stage artifacts a person reads (plots, masks, predictions)
        copy_tree(path, tmp / path.name)


def knowledge_record(run: RunContext) -> dict:
    """run.json's ``knowledge``: the dose asked for and the facts held out of every source."""
    spec, held = run.spec.knowledge, run.holdout
    return {"epochs": spec.epochs, "exclude": list(spec.exclude), "exclude_file": spec.exclude_file,
            "held_out": None if held is None else {"facts": held.facts, "digest": held.digest,
                                                  "splits": list(held.splits), "file": held.file}}


def execute_repeats(runs: list[RunContext], output: Path) -> dict[str, Any]:
    """Run prepared runs that differ only in seed into ``output/seed-<s>`` and summarise them (the folder is
    replaced as a whole, atomically)."""
    with run_folder(output, runs[0], "repeats") as tmp:
        per_seed = {run.spec.seed: _run_into(run, tmp / f"seed-{run.spec.seed}" if tmp else None,
                                             Path(output) / f"seed-{run.spec.seed}") for run in runs}
        summary = summarize_seeds(per_seed)
        if tmp is not None:
            (tmp / "metrics.json").write_text(json.dumps(summary, indent=2))
    barrier()
    return summary


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
        member_metrics[name] = _run_into(member_run, folder / name if folder else None, shown / name)
    summary = run.task.summarize(member_metrics, run.env)
    summary["missing"] = missing
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
