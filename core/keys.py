"""Stage keys and the plan: each stage's key, its cache folder, whether it is cached, and why a stage misses.

Key = sha256(stage name + keyed config fields + input stage keys + code fingerprint + library versions +
:data:`CONTRACT`). See :mod:`kinject.fingerprint` for what the code fingerprint covers.
"""

from __future__ import annotations

import functools
import json
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


