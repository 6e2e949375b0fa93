"""References a stage config holds to the model, task and knowledge sources it uses.

A reference carries what identifies the thing (keyed: name, options, a fingerprint of its files) and where
to find it on this machine (not keyed: paths). A stage body rebuilds the object from its reference
(``ref.build()``; within one process the object the run already validated is reused), so everything a body
can read is in its config - and in its cache key.
"""

from __future__ import annotations


import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from kinject.fingerprint import NOT_KEYED
from kinject.interfaces import Environment, KnowledgeSource, StageContext, Task
from kinject.io import file_digest


class Ref(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), frozen=True)

    def code_modules(self) -> list[str]:
        """Modules that implement what this reference names (they join the stage's code fingerprint:
        a task or source is looked up by name, so no import statement leads to it)."""
        return []


def files_fingerprint(paths: list[Path], root: Path | None = None) -> str:
    """Hash of (relative name, content digest) of each file: changes when any file's bytes change, not when a
    file is only copied, restored or touched (times are not part of it)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        try:
            content = file_digest(path)
        except OSError:
            continue
        name = str(path.relative_to(root)) if root and path.is_relative_to(root) else path.name
        digest.update(f"{name}\0{content}\n".encode())
    return digest.hexdigest()[:32]


# -- model ----------------------------------------------------------------------------------------- #
class ModelRef(Ref):
    """The encoder a stage starts from, as the run spec names it."""

    name: str
    fingerprint: str = Field(description="What identifies the weights: package version, tiny version, a "
                             "local folder's file stats, or the hub revision.")
    revision: str | None = None
    layers: int | None = None
    max_length: int = 128
    attn_implementation: str = "sdpa"
    pooling: str = "cls"
    path: str = Field(json_schema_extra=NOT_KEYED, description="Where the model resolved on this machine.")

    def code_modules(self) -> list[str]:
        """The model's provider (:mod:`kinject.models`): how it is found and loaded is code every stage runs."""
        from kinject.models import provider

        return list(dict.fromkeys([type(provider(self.name)).__module__, "kinject.models"]))

    def load_encoder(self):
        """The encoder, cut to ``layers`` (loaded by the model's provider: :mod:`kinject.models`)."""
        from kinject.models import load_model

        return load_model(self, "encoder")

    def load_tokenizer(self):
        from kinject.models import load_model

        return load_model(self, "tokenizer")


# -- task ------------------------------------------------------------------------------------------ #
class InputTransform(Ref):
    """A strategy's change to a task's inputs, applied wherever the task's examples are read (training, dev
    selection, evaluation): ``function`` ("module:function") is called as ``function(examples, split, env,
    transform) -> examples``; ``options`` and ``sources`` (knowledge sources it reads: keyed, holding the run's facts
    out like every source) are what it may use. E.g. knowledge handed to the model as text beside each input."""

    function: str
    options: dict[str, Any] = Field(default_factory=dict)
    sources: tuple["SourceRef", ...] = ()

    def code_modules(self) -> list[str]:
        return [self.function.partition(":")[0], *(m for s in self.sources for m in s.code_modules())]

    def apply(self, examples: list[dict], split: str, env: Environment) -> list[dict]:
        import importlib

        module, _, name = self.function.partition(":")
        return getattr(importlib.import_module(module), name)(examples, split, env, self)


class TransformedTask:
    """A task whose examples pass through an :class:`InputTransform`; everything else is the task's own. Records a
    transform adds to an example under ``context`` are copied into that example's prediction record."""

    def __init__(self, task: Task, transform: InputTransform):
        self.task, self.transform = task, transform

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["task"], name)

    def examples(self, split: str, env: Environment) -> list[dict]:
        return self.transform.apply(self.task.examples(split, env), split, env)

    def predictions(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
                    env: Environment) -> list[dict]:
        records = self.task.predictions(split, examples, features, predictions, env)
        if len(records) == len(examples):
            for record, example in zip(records, examples):
                if "context" in example:
                    record["context"] = example["context"]
        return records


class TaskRef(Ref):
    """A task by name with its validated options, the data it reads and the sampling that shapes it."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    data: str = Field("", description="Dataset description + fingerprint of its files.")
    data_seed: int = Field(0, description="Seed of the task's own data sampling (e.g. training queries).")
    limit: int | None = None
    max_chars: int | None = Field(None, description="Texts are cut to this many characters when read.")
    fold: tuple[int, int, int] | None = Field(None, description="Cross-validation fold (i, k, seed) of the train split.")
    data_dir: str = Field(".", json_schema_extra=NOT_KEYED)
    inputs: InputTransform | None = Field(None, description="A strategy's transform of the task's inputs.")
    _task: Task | None = PrivateAttr(None)

    @classmethod
    def of(cls, task: Task, env: Environment) -> "TaskRef":
        files = task.data_files(env)
        data = task.describe_data(env) + (f"#{files_fingerprint(files, Path(env.data_dir).resolve())}"
                                          if files else "")
        ref = cls(name=task.name, options=task.config.model_dump(mode="json"), data=data, data_seed=env.seed,
                  limit=env.limit, max_chars=env.max_chars, fold=env.fold, data_dir=str(env.data_dir))
        ref._task = task
        return ref

    def code_modules(self) -> list[str]:
        """The task's module, those of the evaluators it scores with and of an input transform, and for a fold run
        :mod:`kinject.splits` (how its folds are drawn)."""
        task = self.raw()
        evaluators = [type(ref.build()).__module__ for ref in task.metric_refs()]
        folds = ["kinject.splits"] if self.fold else []
        return [type(task).__module__, *evaluators, *(self.inputs.code_modules() if self.inputs else []), *folds]

    def raw(self) -> Task:
        """The task object as configured (the run's own instance when in the same process)."""
        if self._task is None:
            from kinject.registry import registry

            cls = registry("tasks").get(self.name)
            self._task = cls(cls.Config.model_validate(self.options))
        return self._task

    def build(self) -> Task:
        """The task a stage uses: :meth:`raw`, its inputs transformed when the reference carries a transform."""
        task = self.raw()
        return TransformedTask(task, self.inputs) if self.inputs is not None else task

    def with_inputs(self, transform: InputTransform) -> "TaskRef":
        """This reference with an input transform (same task object)."""
        out = self.model_copy(update={"inputs": transform})
        out._task = self._task
        return out

    def environment(self, ctx: StageContext) -> Environment:
        return Environment(data_dir=Path(self.data_dir), cache_dir=ctx.cache_dir, seed=self.data_seed,
                           limit=self.limit, offline=ctx.offline, max_chars=self.max_chars, fold=self.fold)


# -- held-out facts -------------------------------------------------------------------------------- #
class HoldOutRef(Ref):
    """The facts a run holds out of every knowledge source (``knowledge.exclude``): keyed by what they are (their
    digest), rebuilt from where they come from (the task's splits, a file) when a stage reads a source."""

    splits: tuple[str, ...] = ()
    facts: int = Field(0, description="How many facts (name pairs) are held out.")
    digest: str = Field("", description="What identifies the held-out set (its digest).")
    task: TaskRef | None = Field(None, json_schema_extra=NOT_KEYED)
    file: str | None = Field(None, json_schema_extra=NOT_KEYED)
    _facts: Any = PrivateAttr(None)

    @classmethod
    def of(cls, task: Task | None, env: Environment, splits: list[str], file: str | None) -> "HoldOutRef | None":
        """The hold-out of a run (None when nothing is held out: no facts in these splits and no file)."""
        import dataclasses

        ref = cls(splits=tuple(splits) if task is not None else (), file=file,
                  task=TaskRef.of(task, dataclasses.replace(env, limit=None)) if task is not None and splits else None)
        facts = ref.held_out()
        if not len(facts):
            return None
        out = ref.model_copy(update={"facts": len(facts), "digest": facts.digest})
        out._facts = facts
        return out

    def code_modules(self) -> list[str]:
        return self.task.code_modules() if self.task is not None else []

    def held_out(self):
        """The held-out facts (:func:`kinject.facts.held_out_facts`), computed once."""
        if self._facts is None:
            from kinject.errors import KinjectError
            from kinject.facts import held_out_facts

            triples: list[tuple[str, str, str]] = []
            if self.task is not None:
                task = self.task.build()
                env = Environment(data_dir=Path(self.task.data_dir), cache_dir=Path("."), seed=self.task.data_seed,
                                  limit=None, max_chars=self.task.max_chars, fold=self.task.fold)
                for split in self.splits:
                    triples += [(t.head, t.relation, t.tail) for t in task.facts(split, env)]
            files = (self.file,) if self.file else ()
            facts = held_out_facts(triples, files)
            if self.digest and facts.digest != self.digest:
                raise KinjectError(f"knowledge.exclude: the held-out facts changed since the run was planned "
                                   f"(digest {facts.digest}, planned {self.digest})")
            self._facts = facts
        return self._facts


# -- knowledge source ------------------------------------------------------------------------------ #
class SourceRef(Ref):
    """A knowledge source by name with its options and a fingerprint of the knowledge it yields; ``holdout``: the
    facts the run holds out of it (``build`` then returns it with them removed)."""

    name: str
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)
    fingerprint: str = ""
    data_dir: str = Field(".", json_schema_extra=NOT_KEYED)
    holdout: HoldOutRef | None = None
    _source: KnowledgeSource | None = PrivateAttr(None)
    _held: Any = PrivateAttr(None)

    @classmethod
    def of(cls, source: KnowledgeSource, env: Environment) -> "SourceRef":
        ref = cls(name=source.name, kind=source.kind, options=source.config.model_dump(mode="json"),
                  fingerprint=source.fingerprint(env), data_dir=str(env.data_dir))
        ref._source = source
        return ref

    def code_modules(self) -> list[str]:
        return [type(self.raw()).__module__, *(self.holdout.code_modules() if self.holdout else [])]

    def raw(self) -> KnowledgeSource:
        """The source as configured, nothing held out."""
        if self._source is None:
            from kinject.registry import registry

            cls = registry("sources").get(self.name)
            self._source = cls(cls.Config.model_validate(self.options))
        return self._source

    def build(self) -> KnowledgeSource:
        """The source a stage reads: with the run's held-out facts removed (:class:`kinject.facts.HeldOutSource`)
        when it holds some out."""
        if self.holdout is None:
            return self.raw()
        if self._held is None:
            from kinject.facts import HeldOutSource

            self._held = HeldOutSource(self.raw(), self.holdout.held_out())
        return self._held

    def holding_out(self, holdout: "HoldOutRef | None") -> "SourceRef":
        """This reference with the run's hold-out (its fingerprint covers the held-out facts)."""
        if holdout is None or self.holdout is not None:
            return self
        out = self.model_copy(update={"holdout": holdout})
        out._source, out._held = self._source, None
        return out

    def environment(self, ctx: StageContext, limit: int | None = None) -> Environment:
        return Environment(data_dir=Path(self.data_dir), cache_dir=ctx.cache_dir, limit=limit, offline=ctx.offline)

    def environment_for(self, env: Environment) -> Environment:
        """The source's environment where only another environment (e.g. a task's) is at hand."""
        return Environment(data_dir=Path(self.data_dir), cache_dir=env.cache_dir, offline=env.offline)


def source_refs_in(value: Any) -> list["SourceRef"]:
    """The :class:`SourceRef` s inside a stage config, at any depth (fields, lists, tuples, dicts)."""
    if isinstance(value, SourceRef):
        return [value]
    if isinstance(value, BaseModel):
        return [ref for name in type(value).model_fields for ref in source_refs_in(getattr(value, name))]
    if isinstance(value, (list, tuple)):
        return [ref for item in value for ref in source_refs_in(item)]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in source_refs_in(item)]
    return []


def fresh_held_out_views(config: BaseModel) -> None:
    """Forget the held-out views the config's sources built before (another stage's reading): what
    :func:`held_out_removed` then counts is this stage body's."""
    for ref in source_refs_in(config):
        ref._held = None


def held_out_removed(config: BaseModel) -> int | None:
    """What the hold-out removed from the sources the stage body read since :func:`fresh_held_out_views` (triples, or
    text statements; each source's last pass): None when it read no held-out source."""
    read = [ref._held for ref in source_refs_in(config) if ref._held is not None and (ref._held.removed or
                                                                                       ref._held.kept)]
    return sum(view.removed for view in read) if read else None


InputTransform.model_rebuild()
TaskRef.model_rebuild()
