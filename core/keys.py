"""Stage keys and the plan: each stage's key, its cache folder, whether it is cached, and the record its
stage.json keeps (what `kinject run --dry-run` compares to say why a stage misses: :mod:`kinject.cli.misses`).

Key = sha256(stage name + keyed config fields + input stage keys + code fingerprint + library versions +
:data:`CONTRACT`). See :mod:`kinject.fingerprint` for what the code fingerprint covers.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kinject.fingerprint import code_fingerprint, keyed_dump, stable_hash
from kinject.interfaces import Stage

if TYPE_CHECKING:  # pragma: no cover
    from kinject.context import RunContext


log = logging.getLogger("kinject")

#: bump when the engine changes what a stage body receives (invalidates every cached stage)
CONTRACT = "5"


@dataclass
class PlannedStage:
    stage: Stage
    key: str
    folder: Path
    cached: bool
    record: dict  # what the key hashes (stage.json keeps it, so a later miss can say what changed)
    code_modules: dict[str, list[str]]  # module -> the definitions of the stage's code found there (not keyed)


def _library_versions(names: tuple[str, ...]) -> dict[str, str]:
    return {name: _version(name) for name in names}


@functools.lru_cache(maxsize=None)
def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def _references(value: Any, classes: list[type], modules: list[str]) -> None:
    """The code every reference (task, source) held anywhere in a stage config names (``modules``), and the stage
    configs it holds (``classes``: their methods compute, e.g. a model loader)."""
    from pydantic import BaseModel

    from kinject.interfaces import StageConfig
    from kinject.refs import Ref

    if isinstance(value, Ref):
        modules.extend(value.code_modules())
    if isinstance(value, StageConfig):
        classes.extend(cls for cls in type(value).__mro__ if issubclass(cls, StageConfig))
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _references(getattr(value, name), classes, modules)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _references(item, classes, modules)
    elif isinstance(value, dict):
        for item in value.values():
            _references(item, classes, modules)


def stage_code(stage: Stage) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The stage's code as its key holds it: (definition name -> digest, module -> names found there)."""
    classes: list[type] = []
    modules: list[str] = list(stage.code)
    _references(stage.config, classes, modules)
    return code_fingerprint(stage.body, tuple(dict.fromkeys(classes)), tuple(dict.fromkeys(modules)))


def stage_record(stage: Stage, input_keys: dict[str, str], code: dict[str, str] | None = None) -> dict:
    """Everything the stage's key hashes. Code is named by definition, never by module: moving a definition to
    another file keeps every key."""
    code = stage_code(stage)[0] if code is None else code
    return {"stage": stage.name, "config_type": type(stage.config).__qualname__,
            "config": keyed_dump(stage.config), "inputs": input_keys,
            "code": code, "body": stage.body.__qualname__,
            "libraries": _library_versions(stage.libraries), "contract": CONTRACT}


def plan(run: RunContext) -> list[PlannedStage]:
    """The stages with their keys, cache folders and whether each is already cached."""
    keys: dict[str, str] = {}
    out = []
    root = run.env.cache_dir / "stages"
    for stage in run.stages:
        code, where = stage_code(stage)
        record = stage_record(stage, {name: keys[name] for name in stage.inputs}, code)
        key = stable_hash(record)
        keys[stage.name] = key
        folder = root / stage.name / key[:20]
        out.append(PlannedStage(stage, key, folder, (folder / "stage.json").exists(), record, where))
    return out
