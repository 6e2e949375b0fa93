"""A triples source's files parsed once: the raw triples (before the streaming filters) kept as an Arrow file in the
cache, keyed by what the parse depends on (the source, its reading settings and its files' contents).

The first full pass over a source writes ``<cache>/triples/<digest>.arrow`` as it streams; every later pass (another
stage, the knowledge probe, a frequency filter's second pass, a later run) reads the columns back instead of parsing
the files again. The triples, their order and their weights are the same either way, so every filter downstream
draws the same sample. A pass that stops early (``max_triples``, a check for a first triple) or fails (a bad row)
publishes nothing. Bad rows skipped while parsing are kept in the file's metadata and counted again when it is read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable, Iterator

from kinject.api import Triple

log = logging.getLogger("kinject")

FORMAT = "1"
BATCH = 50_000  # triples per Arrow record batch
FOLDER = "triples"


def parsed_path(cache_dir: Path | None, digest: str) -> Path | None:
    """Where the parse of a source with ``digest`` is kept (None: no cache to keep it in)."""
    if cache_dir is None or str(cache_dir) in ("", "."):
        return None
    return Path(cache_dir) / FOLDER / f"{digest[:32]}.arrow"


def parse_digest(name: str, settings: dict, files_digest: str) -> str:
    """The digest a parse is kept under: the source's name, its reading settings (not its filters) and its files."""
    data = {"format": FORMAT, "source": name, "settings": settings, "files": files_digest}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def parsed_triples(path: Path | None, parse: Callable[[], Iterator[Triple]], bad) -> Iterator[Triple]:
    """The triples of ``parse()``, from the kept file at ``path`` when there is one (its skipped bad rows counted
    into ``bad``), else parsed and kept there as they stream."""
    if path is None:
        yield from parse()
        return
    if path.is_file():
        try:
            yield from _read(path, bad)
            return
        except _Damaged as exc:  # a cache: rebuilt
            log.warning("%s: unreadable (%s); parsing the source again", path, exc)
            path.unlink(missing_ok=True)
    yield from _write(path, parse(), bad)


class _Damaged(Exception):
    pass


SCHEMA_FIELDS = (("head", "string"), ("relation", "string"), ("tail", "string"), ("weight", "float64"))


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _read(path: Path, bad) -> Iterator[Triple]:
    import pyarrow as pa

    try:
        with open(_meta_path(path), "rb") as handle:
            meta = json.loads(handle.read(1 << 16))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"its {_meta_path(path).name} is not of format {FORMAT}")
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        if reader.schema.names != [name for name, _ in SCHEMA_FIELDS]:
            raise ValueError(f"columns {reader.schema.names}")
    except (OSError, pa.ArrowInvalid, ValueError) as exc:
        raise _Damaged(str(exc)) from None
    bad.count += int(meta.get("bad_rows", 0))
    bad.first = bad.first or meta.get("first_bad_row")
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        heads, relations, tails, weights = (batch.column(c).to_pylist() for c in range(4))
        for row in zip(heads, relations, tails, weights):
            yield Triple(*row)


def _write(path: Path, triples: Iterator[Triple], bad) -> Iterator[Triple]:
    import pyarrow as pa

    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA_FIELDS])
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sink = pa.OSFile(str(partial), "wb")
    except OSError:  # a read-only cache: parsed, not kept
        yield from triples
        return
    columns: list[list] = [[] for _ in SCHEMA_FIELDS]
    finished = False
    try:
        with pa.ipc.new_file(sink, schema) as writer:
            for triple in triples:
                for column, value in zip(columns, (triple.head, triple.relation, triple.tail, triple.weight)):
                    column.append(value)
                yield triple
                if len(columns[0]) >= BATCH:
                    _flush(writer, schema, columns)
            _flush(writer, schema, columns)
        finished = True
    finally:
        sink.close()
        try:
            if finished:  # the metadata first: a kept Arrow file always has it
                meta = _meta_path(path).with_name(partial.name + ".json")
                meta.write_text(json.dumps({"format": FORMAT, "bad_rows": bad.count, "first_bad_row": bad.first}))
                os.replace(meta, _meta_path(path))
                os.replace(partial, path)
        except OSError as exc:  # a full disk: the triples were given; only keeping them failed
            log.warning("%s: not kept (%s)", path, exc)
        finally:
            partial.unlink(missing_ok=True)


def _flush(writer, schema, columns: list[list]) -> None:
    """Write the collected rows as one record batch; empties ``columns``."""
    import pyarrow as pa

    if columns[0]:
        writer.write_batch(pa.record_batch([pa.array(c, t) for c, t in zip(columns, schema.types)], schema=schema))
    for column in columns:
        column.clear()
