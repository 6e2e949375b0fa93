"""The records kinject writes for itself and reads back (run.json and metrics.json of a run used as an input, a
cached choice, a trainer checkpoint's state), read as user input is: a regular file only (a FIFO, a device or a
link to one is refused without waiting on it), at most :data:`RECORD_BYTES`, UTF-8 JSON, checked against the
schema of what kinject writes. A bad record is one line naming the file (a DataError): the caller ignores and
rebuilds a cache, and refuses an input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from kinject.errors import DataError, DataMissingError

#: the most bytes a record kinject writes for itself holds (its largest, a run.json, is well under a megabyte)
RECORD_BYTES = 64 * 2**20


def file_kind(mode: int) -> str | None:
    """What a path of ``os.stat`` mode ``mode`` is when it is not a regular file (None: it is one)."""
    import stat

    if stat.S_ISREG(mode):
        return None
    return "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
        "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def read_bytes(path: Path, limit: int = RECORD_BYTES) -> bytes:
    """The bytes of a file kinject wrote for itself: a regular file of at most ``limit`` bytes (opened without
    blocking, checked on the open handle, read no further than the limit). A DataError naming the file otherwise
    (a DataMissingError when there is none)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise DataMissingError("missing", path) from None
    except OSError as exc:
        raise DataError(f"cannot be read ({exc.strerror or type(exc).__name__})", path) from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(fd)
        kind = file_kind(status.st_mode)
        if kind is not None:
            raise DataError(f"{kind}, not a regular file as kinject writes it", path)
        raw = b"" if status.st_size > limit else handle.read(limit + 1)
    if status.st_size > limit or len(raw) > limit:
        raise DataError(f"{max(status.st_size, len(raw)):,} bytes, more than the {limit:,} such a record holds", path)
    return raw


def read_record(path: Path, schema: Any = dict, limit: int = RECORD_BYTES) -> Any:
    """The JSON record at ``path`` (:func:`read_bytes`, UTF-8 JSON), checked against ``schema``: a type, or a
    pydantic model (the JSON itself is returned, every field it does not name kept). One line naming the file (a
    DataError) when any of it fails."""
    raw = read_bytes(path, limit)
    if not raw.strip():
        raise DataError("empty (a write cut short)", path)
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text (byte {exc.start})", path) from None
    except ValueError as exc:
        raise DataError(f"not valid JSON: cut short or damaged ({exc})", path) from None
    problem = record_problem(value, schema)
    if problem:
        raise DataError(problem, path)
    return value


def record_problem(value: Any, schema: Any = dict) -> str | None:
    """Why the JSON ``value`` is not a ``schema`` (a type or a pydantic model), in one line; None when it is."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        if not isinstance(value, dict):
            return f"{_kind(type(value))} where kinject writes an object"
        try:
            schema.model_validate(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "(top)"
            shown = repr(error.get("input"))
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return f"{where}: {error['msg'].lower()} (found {shown}), not as kinject writes it"
        return None
    if not isinstance(value, schema) or isinstance(value, bool) and schema in (int, float):
        return f"{_kind(type(value))} where kinject writes {_kind(schema)}"
    return None


def _kind(kind: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", int: "a number",
            float: "a number", type(None): "null"}.get(kind, f"a {getattr(kind, '__name__', kind)}")


# -- run folders a run reads as an input ------------------------------------------------------------------------ #
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class HeldOutRecord(_Open):
    facts: Optional[StrictInt] = Field(None, ge=0)
    digest: Optional[StrictStr] = None
    splits: Optional[list[StrictStr]] = None
    file: Optional[StrictStr] = None


class KnowledgeRecord(_Open):
    exclude: Optional[list[StrictStr]] = None
    held_out: Optional[HeldOutRecord] = None


class SpecRecord(_Open):
    task: Optional[dict] = None
    sources: Optional[list[dict]] = None


class StageRecord(_Open):
    name: StrictStr
    config_type: Optional[StrictStr] = None


class RunRecord(_Open):
    """run.json, the fields a later run reads of it."""

    spec: Optional[SpecRecord] = None
    seed: Optional[StrictInt] = None
    knowledge: Optional[KnowledgeRecord] = None
    stages: Optional[list[StageRecord]] = None


class MetricsRecord(_Open):
    """metrics.json, the fields a later run reads of it."""

    dose: Optional[dict] = None


def read_run(folder: Path) -> tuple[dict, dict]:
    """(run.json, metrics.json) of a kinject run folder that a run reads as an input (a teacher, a model that is a
    run, a model ``kinject eval`` scores), each a :func:`read_record` (metrics.json: {} when the folder has none).
    A damaged one is one line naming the file."""
    folder = Path(folder)
    metrics = folder / "metrics.json"
    return (read_record(folder / "run.json", RunRecord),
            read_record(metrics, MetricsRecord) if os.path.lexists(metrics) else {})
