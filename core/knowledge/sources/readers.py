"""Row readers for triples files (TSV / CSV / JSONL, optionally .gz) that stream and locate bad rows."""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kinject.api import DataError, Triple, iter_lines
from kinject.knowledge.sources.filters import BadRows

log = logging.getLogger("kinject")


def iter_text_lines(path: Path, bad: BadRows) -> Iterator[tuple[int, str]]:
    """(line number, text) for every non-empty line; invalid UTF-8 is a bad row."""
    for number, text in iter_lines(path, on_bad=bad):
        if text.strip():
            yield number, text


def read_text_map(path: Path, bad: BadRows) -> dict[str, str]:
    """An ``id<TAB>text`` file (KG-BERT entity2text / relation2text) as a dict."""
    mapping: dict[str, str] = {}
    for number, line in iter_text_lines(Path(path), bad):
        key, sep, text = line.partition("\t")
        if not sep or not key.strip() or not text.strip():
            bad("expected 'id<TAB>text'", path, number)
            continue
        mapping[key.strip()] = text.strip()
    return mapping


def detect_format(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".jsonl") or name.endswith(".json"):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    return "tsv"


@dataclass
class Columns:
    """Where the parts of a triple are: column indices or header names (JSONL: keys)."""

    head: int | str = 0
    relation: int | str | None = 1
    tail: int | str = 2
    weight: int | str | None = None
    relation_name: str | None = None  # a constant relation (link lists without a relation column)
    header: bool | None = None  # None: a header when any column is given by name


def _rows(path: Path, fmt: str, bad: BadRows) -> Iterator[tuple[int, list[str] | dict]]:
    lines = iter_text_lines(path, bad)
    if fmt == "jsonl":
        for number, line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                bad(f"invalid JSON ({exc.msg})", path, number)
                continue
            if not isinstance(row, (dict, list)):
                bad("each line must be a JSON object or array", path, number)
                continue
            yield number, row
    elif fmt == "csv":
        numbers: list[int] = []

        def feed():
            for number, line in lines:
                numbers.append(number)
                yield line

        for row in csv.reader(feed()):
            yield numbers[-1], row
    else:
        for number, line in lines:
            yield number, line.split("\t")


HEADER_WORDS = {"head", "relation", "tail", "subject", "predicate", "object", "source", "target", "rel", "h", "r",
                "t", "weight", "entity1", "entity2", "head_entity", "tail_entity", "score", "from", "to", "type"}


def looks_like_header(row) -> bool:
    """A first row whose cells are all column names (head/relation/tail, subject/predicate/object, ...)."""
    if not isinstance(row, list) or len(row) < 2:
        return False
    cells = [str(c).strip().lower().replace(" ", "_") for c in row if str(c).strip()]
    return len(cells) >= 2 and all(c in HEADER_WORDS for c in cells)


def iter_table_triples(path: Path, fmt: str, cols: Columns, bad: BadRows,
                       entity_text: dict[str, str] | None = None,
                       relation_text: dict[str, str] | None = None) -> Iterator[Triple]:
    """Triples from one file; each malformed row goes to ``bad`` (raises or counts)."""
    path = Path(path)
    named = [c for c in (cols.head, cols.relation, cols.tail, cols.weight) if isinstance(c, str)]
    header = cols.header if cols.header is not None else (bool(named) and fmt != "jsonl")
    index: dict[str, int] = {}
    fields = [cols.head, None if cols.relation_name else cols.relation, cols.tail, cols.weight]
    first = True
    need = 0
    for number, row in _rows(path, fmt, bad):
        if first and cols.header is None and not header and looks_like_header(row):
            first = False  # `head, relation, tail` (or subject/predicate/object...): names, not a triple
            log.info("%s: first row %s read as a header (set header: false to read it as a triple)", path, row)
            continue
        if first and header:
            first = False
            if not isinstance(row, list):
                raise DataError("a header row must be a list of column names", path, number)
            index = {name.strip(): i for i, name in enumerate(row)}
            missing = [c for c in named if c not in index]
            if missing:
                raise DataError(f"header has no column {missing[0]!r} (columns: {', '.join(index)})", path, number)
            fields = [index[c] if isinstance(c, str) else c for c in fields]
            need = max(c for c in fields if c is not None) + 1
            continue
        first = False
        if isinstance(row, dict):
            try:
                values = [None if k is None else row.get(k if isinstance(k, str) else str(k)) for k in fields]
            except AttributeError:
                values = [None] * 4
            missing = [name for name, k, v in zip(("head", "relation", "tail", "weight"), fields, values)
                       if k is not None and v is None and name != "weight"]
            if missing:
                bad(f"missing key {fields[('head', 'relation', 'tail').index(missing[0])]!r}", path, number)
                continue
            head, rel, tail, weight = (None if v is None else str(v) for v in values)
        else:
            if not need:
                need = max(c for c in fields if isinstance(c, int)) + 1
            if len(row) < need:
                bad(f"expected at least {need} columns, found {len(row)}", path, number)
                continue
            head = row[fields[0]]
            rel = row[fields[1]] if fields[1] is not None else None
            tail = row[fields[2]]
            weight = row[fields[3]] if fields[3] is not None else None
        head, tail = head.strip(), tail.strip()
        rel = cols.relation_name if cols.relation_name else (rel or "").strip()
        if not head or not tail or not rel:
            bad(f"empty {'head' if not head else 'tail' if not tail else 'relation'}", path, number)
            continue
        if entity_text is not None:
            h, t = entity_text.get(head), entity_text.get(tail)
            if h is None or t is None:
                bad(f"unknown entity id {head if h is None else tail!r} (no text mapping)", path, number)
                continue
            head, tail = h, t
        if relation_text is not None:
            r = relation_text.get(rel)
            if r is None:
                bad(f"unknown relation id {rel!r} (no text mapping)", path, number)
                continue
            rel = r
        w = 1.0
        if weight is not None and weight.strip() != "":
            try:
                w = float(weight)
            except ValueError:
                bad(f"weight {weight!r} is not a number", path, number)
                continue
        yield Triple(head, rel, tail, w)
