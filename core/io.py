"""The kernel's line reader and what keys a data file: every data file is opened through :func:`open_text` (regular
files only, ``.gz`` read transparently, each read recorded for :func:`track_reads`, so a stage's key covers the files
its task read) and read line by line within :func:`line_cap`, texts cut to the run's :func:`text_cap`;
:func:`file_digest` is a data file's identity in keys. Errors name ``file:line``. The format readers built on it
(JSON lines, TSV, CSV) are the data layer's (:mod:`kinject.tasks`); atomic writes: :mod:`kinject.files`."""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

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

    from kinject.records import file_kind

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError("file not found", path) from None
    kind = file_kind(mode)
    if kind is not None:
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
