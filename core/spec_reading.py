"""Reading a run spec: a YAML file (a repeated key refused; its relative paths taken relative to the file) and
``a.b=c`` overrides, validated with a plugin's own config, every error one line naming the file and line or the
field (``field.path: what is wrong (what is allowed)``); the file and folder fields normalised (:data:`FILE_PATH`);
the default data and cache folders. `kinject run`, ``kinject.run``, a grid, a sweep and the STILT matrix read their
specs through here."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
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


# -- YAML and --set ------------------------------------------------------------------------------------------ #
def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise SpecError(f"--set {item!r}: expected KEY=VALUE, e.g. training.epochs=1")
    key, _, raw = item.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise SpecError(f"--set {item!r}: empty field name")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b=c`` overrides (YAML-typed values; numeric parts index lists)."""
    data = copy.deepcopy(data)
    for item in overrides:
        path, value = parse_override(item)
        node: Any = data
        for i, part in enumerate(path[:-1]):
            nxt_is_index = path[i + 1].isdigit()
            if isinstance(node, list):
                idx = int(part)
                while len(node) <= idx:
                    node.append({})
                node = node[idx]
                continue
            if part not in node or not isinstance(node[part], (dict, list)):
                node[part] = [] if nxt_is_index else {}
            node = node[part]
        last = path[-1]
        if isinstance(node, list):
            idx = int(last)
            while len(node) <= idx:
                node.append({})
            node[idx] = value
        else:
            node[last] = value
    return data


RUN_PATHS = ("output", "data_dir", "cache_dir")


def _absolute(value: Any, base: Path, existing: bool = False) -> Any:
    """``value`` (a path or a list of paths) relative to ``base``; with ``existing``, only where that exists (a
    plugin's own lookup, e.g. in the data dir, applies to the others)."""
    if isinstance(value, list):
        return [_absolute(v, base, existing) for v in value]
    if not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    if path.is_absolute() or (existing and not (base / path).exists()):
        return value
    return str(base / path)


def _plugin_paths(kind: str, section: Any, base: Path) -> None:
    """Make the FILE_PATH fields of one plugin section absolute; nested sections with a ``name`` (e.g. STILT's
    intermediate tasks) are task sections."""
    from kinject.api import KinjectError, registry

    if not isinstance(section, dict) or not isinstance(section.get("name"), str):
        return
    try:
        fields = registry(kind).get(section["name"]).Config.model_fields
    except (KinjectError, AttributeError):
        return  # an unknown or broken plugin: reported by validation later
    for name, value in list(section.items()):
        extra = fields[name].json_schema_extra if name in fields else None
        if isinstance(extra, dict) and extra.get("path"):
            section[name] = _absolute(value, base, existing=True)
        elif isinstance(value, list):
            for item in value:
                _plugin_paths("tasks", item, base)
        elif isinstance(value, dict):
            _plugin_paths("tasks", value, base)


def resolve_config_paths(data: dict, config_file: Path) -> dict:
    """Spec data read from ``config_file`` with its relative paths taken relative to the file's folder, so a config
    means the same from any folder: output, data_dir and cache_dir always; a plugin field marked FILE_PATH when the
    file or folder is there (else the plugin looks it up as usual: working directory, data dir)."""
    data = copy.deepcopy(data)
    base = Path(config_file).expanduser().absolute().parent
    for key in RUN_PATHS:
        if key in data:
            data[key] = _absolute(data[key], base)
    knowledge = data.get("knowledge")
    if isinstance(knowledge, dict) and knowledge.get("exclude_file"):
        knowledge["exclude_file"] = _absolute(knowledge["exclude_file"], base)
    _plugin_paths("tasks", data.get("task"), base)
    _plugin_paths("strategies", data.get("strategy"), base)
    for source in data.get("sources") or []:
        _plugin_paths("sources", source, base)
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a mapping that repeats a key is an error (YAML would keep the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor' merges are meant to repeat keys
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: left to the usual error
                continue
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} repeats (first on line {first}): a repeated key would silently "
                    "replace the first", key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml(path: Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) or {}  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}{line}: invalid YAML: {exc.problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}:1: a run spec must be a mapping, got {type(data).__name__}")
    return data


def load_spec_file(path: Path) -> dict:
    """A YAML run spec (:func:`load_yaml`) with its relative paths resolved (:func:`resolve_config_paths`)."""
    return resolve_config_paths(load_yaml(path), path)
