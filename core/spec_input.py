"""A run spec and a plugin's own config validated, every error one line naming the field: ``field.path: what is
wrong (what is allowed)``; the file and folder fields normalised (:data:`FILE_PATH`); the default data and cache
folders. Reading a spec from YAML and ``--set`` overrides is the front ends' (the training library's
:mod:`kinject.plugins.training.spec_files`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kinject.errors import SpecError
from kinject.spec import PluginRef, RunSpec


def format_validation_error(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(err["loc"]))
        msg = err["msg"]
        if err["type"] == "extra_forbidden" and model is not None:
            import difflib

            allowed = _allowed_fields(model, err["loc"][:-1])
            close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=2, cutoff=0.6)
            msg = "unknown field" + (f". Did you mean {' or '.join(map(repr, close))}?" if close else "") + \
                (f" (allowed: {', '.join(allowed)})" if close and allowed else f"; allowed: {', '.join(allowed)}"
                 if allowed else "")
        if err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def _allowed_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return sorted(getattr(current, "model_fields", {}))


#: ``Field(..., json_schema_extra=FILE_PATH)``: the field names a file or folder; a relative value written in a config
#: file is taken relative to that file's folder (:func:`resolve_config_paths`).
FILE_PATH: dict[str, Any] = {"path": True}
def build_spec(data: dict) -> RunSpec:
    """Validate the top level of a spec (plugin configs are validated by ``resolve_components``)."""
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, model=RunSpec)) from None


def validate_plugin_config(cls: type, ref: PluginRef, field: str):
    """Validate a plugin's options with its own Config; errors carry the spec field path. Its file and folder
    fields (FILE_PATH) that name something here are made absolute and normalised, so the same file spelled
    ``data/x.tsv``, ``./data/x.tsv`` or ``/abs/data/x.tsv`` makes the same stage keys."""
    try:
        config = cls.Config.model_validate(ref.options())
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, prefix=field, model=cls.Config)) from None
    changed = {}
    for name, info in cls.Config.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and extra.get("path"):
            value = getattr(config, name)
            normal = _normal_path(value)
            if normal != value:
                changed[name] = normal
    return config.model_copy(update=changed) if changed else config


def _normal_path(value: Any) -> Any:
    """An existing relative or unnormalised path as an absolute, normalised one (a list: each); others as they are."""
    if isinstance(value, list):
        return [_normal_path(v) for v in value]
    if isinstance(value, (str, Path)) and str(value):
        path = Path(value).expanduser()
        if path.exists():
            normal = os.path.normpath(path.absolute())
            return type(value)(normal) if isinstance(value, Path) else normal
    return value


def default_data_dir() -> Path:
    env = os.environ.get("KINJECT_DATA_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kinject" / "data"


def default_cache_dir() -> Path:
    env = os.environ.get("KINJECT_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kinject" / "cache"
