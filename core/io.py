"""Readers for line-oriented data files that fail with ``file:line: what is wrong``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Callable, Iterator

from kinject.errors import DataError


def open_text(path: Path):
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_lines(path: Path, on_bad: Callable[[str, Path, int], None] | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text without newline). Invalid UTF-8 -> DataError naming file:line, or, when ``on_bad``
    is given, ``on_bad(message, path, line)`` and the line is passed over."""
    path = Path(path)
    try:
        handle = open_text(path)
    except FileNotFoundError:
        raise DataError("file not found", path) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if on_bad is None:
                    raise DataError(f"invalid UTF-8 (byte {exc.start})", path, number) from None
                on_bad(f"invalid UTF-8 (byte {exc.start})", path, number)
                continue
            yield number, text.rstrip("\r\n")


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    empty = True
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        empty = False
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON ({exc.msg})", path, number) from None
        if not isinstance(row, dict):
            raise DataError("each line must be a JSON object", path, number)
        yield number, row
    if empty:
        raise DataError("empty file", path)


def read_tsv(path: Path, columns: int | None = None, header: bool = False, delimiter: str = "\t",
             min_columns: int | None = None) -> Iterator[tuple[int, list[str]]]:
    """Rows split on ``delimiter``; checks the column count; ``header`` rows are yielded with number 1."""
    empty = True
    expected = columns
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        empty = False
        row = line.split(delimiter)
        if header and expected is None and number == 1:
            expected = len(row)
        if expected is not None and len(row) != expected:
            raise DataError(f"expected {expected} columns, found {len(row)}", path, number)
        if min_columns is not None and len(row) < min_columns:
            raise DataError(f"expected at least {min_columns} columns, found {len(row)}", path, number)
        yield number, row
    if empty:
        raise DataError("empty file", path)
