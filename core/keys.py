"""Stage keys and the plan: each stage's key, its cache folder, whether it is cached, and the record its
stage.json keeps (what `kinject run --dry-run` compares to say why a stage misses: :mod:`kinject.plugins.cli.misses`).

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
CONTRACT = "4"


@dataclass
class PlannedStage:
    stage: Stage
    key: str
    folder: Path
    cached: bool
    record: dict  # what the key hashes (stage.json keeps it, so a later miss can say what changed)


def _library_versions(names: tuple[str, ...]) -> dict[str, str]:
    return {name: _version(name) for name in names}


@functools.lru_cache(maxsize=None)
def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def _ref_modules(value: Any) -> list[str]:
    """Code modules of every reference (task, source) held anywhere in a stage config."""
    from pydantic import BaseModel

    from kinject.interfaces import StageConfig
    from kinject.refs import Ref

    out: list[str] = []
    if isinstance(value, Ref):
        out.extend(value.code_modules())
    if isinstance(value, StageConfig):  # a stage config held by another (its methods compute: e.g. a model loader)
        out.extend(cls.__module__ for cls in type(value).__mro__ if issubclass(cls, StageConfig))
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
    config_modules = [cls.__module__ for cls in type(stage.config).__mro__
                      if cls.__module__ not in ("builtins", "pydantic.main") and not cls.__module__.startswith("pydantic")]
    code = code_fingerprint(stage.body, (*stage.code, *dict.fromkeys([*config_modules, *_ref_modules(stage.config)])))
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
