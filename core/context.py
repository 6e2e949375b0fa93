"""A prepared run (:class:`RunContext`): the validated spec, its components, the refs stage configs hold of them,
the settings of hook plugins, and the planned stages."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinject.errors import SpecError
from kinject.interfaces import Environment, KnowledgeSource, Stage, Strategy, Task
from kinject.registry import registry
from kinject.spec import RunSpec
from kinject.spec_reading import validate_plugin_config



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
    defaults: dict[str, str] = field(default_factory=dict)  # settings the default rules filled in, and why
    chosen: dict | None = None  # what was chosen before the run was prepared (kinject.defaults.decide)
    decided_by: dict[str, str] = field(default_factory=dict)  # "chosen"/"defaults" -> the implementation that decided
    output: Path | None = None  # the run folder, once the run executes
    resolved: Any = None  # what the strategy's validate returned, for its stages
    holdout: Any = None  # the facts every knowledge source holds out (kinject.refs.HoldOutRef; None: none)
    inputs: list[dict] = field(default_factory=list)  # inputs that are not sources and the held-out facts each saw
    _refs: dict[str, Any] = field(default_factory=dict)

    def model_ref(self):
        """The run's base model as stage configs hold it (see :class:`kinject.refs.ModelRef`)."""
        from kinject.models import model_fingerprint
        from kinject.refs import ModelRef

        if "model" not in self._refs:
            m = self.spec.model
            self._refs["model"] = ModelRef(
                name=m.name, fingerprint=model_fingerprint(m.name, self.model_path, m.revision), revision=m.revision,
                layers=m.layers, max_length=m.max_length, attn_implementation=m.attn_implementation,
                pooling=m.pooling, path=self.model_path)
        return self._refs["model"]

    def task_ref(self, task: Task | None = None):
        """A task (the run's by default) as stage configs hold it (see :class:`kinject.refs.TaskRef`); a TaskRef
        (e.g. ``run.task_ref().with_inputs(...)``) is returned as it is."""
        from kinject.refs import TaskRef

        if isinstance(task, TaskRef):
            return task
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
            self._refs[f"hook:{name}"] = read_hook_settings(name, self.spec.hooks.get(name, {}))
        return self._refs[f"hook:{name}"]

    @property
    def knowledge_epochs(self) -> float | None:
        """The knowledge dose the run asks for (``knowledge.epochs``; None: the strategy's own budget)."""
        return self.spec.knowledge.epochs

    def hooks(self):
        from kinject.hooks import plugin_manager

        return plugin_manager().hook


def read_hook_settings(name: str, options: dict[str, Any]):
    """A hook plugin's settings validated by its ``Config`` (a PluginConfig the hook module or object declares)."""
    from kinject.errors import UnknownNameError
    from kinject.spec import PluginRef

    try:
        hook = registry("hooks").get(name)
    except UnknownNameError as error:
        raise SpecError(f"hooks.{name}: {error}") from None
    if getattr(hook, "Config", None) is None:
        if options:
            raise SpecError(f"hooks.{name}: hook plugin {name!r} takes no settings")
        return None
    return validate_plugin_config(hook, PluginRef(name=name, **options), f"hooks.{name}")


