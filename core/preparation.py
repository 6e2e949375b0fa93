"""Preparing a run: everything that can fail on user input fails here (:func:`prepare`), before any stage starts
or anything is written - the settings a run starts from (:func:`kinject.defaults.start_settings`: a strategy's
protocol, a task's recommended values, the precision), the task, strategy, sources and model looked up and checked,
the facts held out of every source, the inputs that are not sources checked against them, the strategy's stage
plan checked."""

from __future__ import annotations

import dataclasses
import logging
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from kinject.errors import KinjectError, SpecError
from kinject.fingerprint import check_body
from kinject.interfaces import Environment, KnowledgeSource, Strategy, Task, TaskGroup
from kinject.registry import registry
from kinject.spec import RunSpec
from kinject.spec_reading import default_cache_dir, default_data_dir, validate_plugin_config
from kinject.context import RunContext



log = logging.getLogger("kinject")

#: every name kinject and its built-in plugins import from the ``transformers`` package itself (a test checks it)
TRANSFORMERS_NAMES = ("AutoConfig", "AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification",
                      "AutoModelForTokenClassification", "AutoTokenizer", "BertConfig", "BertModel", "BertTokenizerFast",
                      "DataCollatorForTokenClassification", "DataCollatorWithPadding", "PreTrainedTokenizerFast",
                      "PretrainedConfig", "Trainer", "TrainerCallback", "TrainingArguments", "set_seed")
_IMPORTING = threading.Lock()
_IMPORTED: list[bool] = []


def import_transformers() -> None:
    """Resolve :data:`TRANSFORMERS_NAMES` once per process, one thread at a time: transformers imports its names
    lazily, and two threads resolving one at once fail ("cannot import name 'BertConfig'"), e.g. two threads calling
    ``kinject.run`` on a fresh cache. Every run calls it while it resolves its model (:func:`_resolve_model`)."""
    if _IMPORTED:
        return
    with _IMPORTING:
        if not _IMPORTED:
            import transformers

            for name in TRANSFORMERS_NAMES:
                getattr(transformers, name)
            _IMPORTED.append(True)


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
    """The model's loadable path (its settings are checked against its config once the spec's other fields are)."""
    from kinject.models import check_offline_model, resolve_model
    from kinject.registry import registry

    # transformers' names resolved once, one thread at a time, before anything uses them: before a named model is
    # built, and for any other model once its name is checked (a typo stays an error before torch loads)
    if spec.model.name in registry("models").names():
        import_transformers()
    path = resolve_model(spec.model.name, env.cache_dir)
    check_offline_model(spec.model.name, path)
    import_transformers()
    if spec.model.revision and Path(path).exists():
        raise SpecError(f"model.revision: {spec.model.revision!r} pins a hub revision, but model "
                        f"{spec.model.name!r} is a local model ({path})")
    return path


_DRY_RUN: list[bool] = []  # non-empty while a dry run prepares (nothing will be written)


@contextmanager
def dry_running() -> Iterator[None]:
    """Prepare runs for a dry run: the stage cache need not be writable."""
    _DRY_RUN.append(True)
    try:
        yield
    finally:
        _DRY_RUN.pop()


def prepare(spec: RunSpec, resume: bool = False, command: list[str] | None = None) -> RunContext:
    """Resolve and check everything that can fail on user input - spec, data, sources, the strategy's
    own checks and its stage plan - before any stage starts or anything is written."""
    from kinject import defaults

    spec, settled = defaults.start_settings(spec)  # the protocol, the task's recommended values, the precision
    task, strategy, sources = resolve_components(spec)
    env = make_environment(spec)
    if not _DRY_RUN:  # a dry run writes no stage: a read-only cache is fine for it
        from kinject.files import check_writable

        check_writable(env.cache_dir, "stage cache")
    from kinject.context import read_hook_settings

    for name, options in spec.hooks.items():  # every hook's settings checked before a model is built or data read
        read_hook_settings(name, options)
    model_path = _resolve_model(spec, env)
    run = RunContext(spec=spec, env=env, task=task, strategy=strategy, sources=sources, model_path=model_path,
                     resume=resume, command=command, recommended=settled.get("recommended", {}),
                     protocol=settled.get("protocol", {}), defaults=dict(settled.get("defaults", {})))
    if any(settled.values()):
        run.decided_by["presets"] = defaults.by(defaults.start_settings)
    from kinject.models import check_model

    check_model(spec.model, model_path)  # reads the model's config (transformers): after every typo check
    if spec.knowledge.exclude is None:
        _fill_exclude(run, defaults.default_exclude(run))
        run.decided_by["exclude"] = defaults.by(defaults.default_exclude)
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
        rules = defaults.default_rules(run)
        if rules:
            run.defaults.update(rules)
            run.decided_by["defaults"] = defaults.by(defaults.default_rules)
    run.holdout = _holdout(run)
    if task is not None:  # a starting model that is itself a run declares the held-out facts it saw
        from kinject.knowledge.provenance import model_input, record

        entry = model_input(run, spec.model.name, "model.name")
        if entry is not None:
            record(run, entry)
    with plugin_code("strategies", strategy):
        run.resolved = strategy.validate(run)
        run.stages = strategy.stages(run)
    run.stages.extend(_extra_stages(run))  # e.g. the knowledge probe, for every strategy
    if run.holdout is not None:  # every source of every stage, the defaults a strategy builds itself included
        run.stages = [dataclasses.replace(stage, config=_holding_out(stage.config, run.holdout))
                      for stage in run.stages]
    _check_stages(run)
    return run


def _extra_stages(run: RunContext) -> list:
    """The stages hook plugins add (``kinject_extra_stages``), asked one plugin at a time in pluggy's order. A setting
    a plugin decides for the user (an entry it adds to or changes in ``run.defaults``) is credited to it:
    ``decided_by[field]``."""
    from kinject import defaults
    from kinject.hooks import plugin_manager

    manager = plugin_manager()
    stages: list = []
    for impl in reversed(manager.hook.kinject_extra_stages.get_hookimpls()):
        others = [plugin for name, plugin in manager.list_name_plugin() if name != impl.plugin_name]
        before = dict(run.defaults)
        for extra in manager.subset_hook_caller("kinject_extra_stages", remove_plugins=others)(run=run):
            stages.extend(extra or [])
        for name in [name for name, why in run.defaults.items() if before.get(name) != why]:
            run.decided_by[name] = f"{defaults.HOOK_PLUGIN}{impl.plugin_name}: {defaults.by(impl.function)}"
    return stages


def _check_task_kind(strategy: Strategy, task: Task, env: Environment) -> None:
    """One line when the strategy does not support the task's shape (its head's kind)."""
    kinds = type(strategy).task_kinds
    kind = task.head(env).kind
    if kind not in kinds:
        names = {"sequence": "sequence classification (single texts, pairs, retrieval)", "token": "token tagging"}
        raise SpecError(f"task: strategy {strategy.name!r} supports {' and '.join(names.get(k, k) for k in sorted(kinds))}"
                        f" tasks; {task.name!r} is a {names.get(kind, kind)} task (kinject list strategies shows what "
                        "each supports)")


def _fill_exclude(run: RunContext, splits: list[str]) -> None:
    """``knowledge.exclude`` left unset, filled with the default hold-out's splits (still counted as unset)."""
    knowledge = run.spec.knowledge
    filled = type(knowledge).model_validate({**knowledge.model_dump(), "exclude": list(splits)})
    filled.__pydantic_fields_set__ = set(knowledge.model_fields_set)
    run.spec = run.spec.model_copy(update={"knowledge": filled})


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
        from kinject.deprecation import explain_import_error

        try:
            _, distribution, version = registry(kind).origin(plugin.name)
            where = f" from {distribution} {version}"
        except KinjectError:
            where = ""
        # kinject's own module or name, in a third party's plugin: say so, not "a package is missing"
        moved = explain_import_error(exc) if where and not where.startswith(" from kinject ") else None
        if moved:
            raise PluginLoadError(f"{SINGULAR[kind]} {plugin.name!r}{where} {moved}") from None
        raise PluginLoadError(f"{SINGULAR[kind]} {plugin.name!r}{where}: {type(exc).__name__}: {exc} (a package it "
                              "needs is missing or broken)") from None


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


