"""A knowledge graph from files: TSV / CSV / JSONL triples, KG-BERT folders, weighted link lists."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field

from kinject.api import DataMissingError, Environment, KnowledgeSource, Triple, files_fingerprint
from kinject.knowledge.sources.filters import BadRows, FilterFields, apply_filters
from kinject.knowledge.sources.readers import Columns, detect_format, iter_table_triples, read_text_map
from kinject.api import FILE_PATH

TRIPLE_SUFFIXES = (".tsv", ".csv", ".jsonl", ".txt", ".tsv.gz", ".csv.gz", ".jsonl.gz", ".txt.gz")
HSDN_HEADER = ("symptom_name", "disease_name", "tfidf_score")
PARSE_BYTES_PER_S = 16e6  # parsing triples files (the HPO's 64 MB: 2.7 CPU-s idle, ~4 s here; docs/benchmarks.md)
KEPT_BYTES_PER_S = 40e6  # reading a kept parse back (its 41 MB: 0.6 CPU-s idle, ~1 s here)


class TriplesSourceBase(KnowledgeSource):
    """Common machinery: raw triples -> filters; bad-row counting; fingerprints."""

    kind = "triples"

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.bad_rows = BadRows(self.config.on_bad_rows)

    def input_files(self, env: Environment) -> list[Path]:
        raise NotImplementedError

    def raw_triples(self, env: Environment, bad: BadRows) -> Iterator[Triple]:
        raise NotImplementedError

    def fingerprint(self, env: Environment) -> str:
        data = {"source": self.name, "config": self.config.model_dump(mode="json"),
                "files": files_fingerprint(self.input_files(env))}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def _pass(self, env: Environment) -> Iterator[Triple]:
        from kinject.knowledge.sources.parsed import parsed_path, parsed_triples

        self.bad_rows = BadRows(self.config.on_bad_rows)  # the last (filtering) pass is what is reported
        bad = self.bad_rows
        return parsed_triples(parsed_path(env.cache_dir, self.parse_digest(env)), lambda: self.raw_triples(env, bad),
                              bad)

    def parse_digest(self, env: Environment) -> str:
        """What parsing the source's files depends on: its class and parsing code, its settings but the streaming
        filters (a bad row's policy stays in), its files' contents. The parse is kept in the cache under it."""
        from kinject.knowledge.sources.parsed import parse_digest

        reading = set(type(self.config).model_fields) - set(FilterFields.model_fields) | {"on_bad_rows"}
        settings = {k: v for k, v in self.config.model_dump(mode="json").items() if k in reading}
        return parse_digest(_parser_code(type(self)), settings, files_fingerprint(self.input_files(env)))

    def read_seconds(self, env: Environment) -> float:
        """About how long one pass over the source takes here: its kept parse read back, else its files parsed."""
        from kinject.knowledge.sources.parsed import parsed_path

        kept = parsed_path(env.cache_dir, self.parse_digest(env))
        if kept is not None and kept.is_file():
            return kept.stat().st_size / KEPT_BYTES_PER_S
        return sum(p.stat().st_size for p in self.input_files(env) if p.is_file()) / PARSE_BYTES_PER_S

    def iter_triples(self, env: Environment) -> Iterator[Triple]:
        """Stream the filtered triples (twice over the files when a frequency filter is set)."""
        return apply_filters(lambda: self._pass(env), self.config)


class TriplesSource(TriplesSourceBase):
    """Triples from TSV/CSV/JSONL files or a folder (KG-BERT layout, HSDN link list), streamed."""

    class Config(FilterFields):
        path: str = Field(..., description="A triples file, or a folder (KG-BERT layout: train/dev/test.tsv + "
                          "entity2text.txt + relation2text.txt; else every .tsv/.csv/.jsonl in it).",
                          json_schema_extra=FILE_PATH)
        format: Literal["auto", "tsv", "csv", "jsonl"] = Field("auto", description="File format (auto: suffix).")
        layout: Literal["auto", "plain", "kgbert", "hsdn"] = Field(
            "auto", description="plain: head, relation, tail[, weight] columns; kgbert: ids mapped through "
            "entity2text/relation2text; hsdn: symptoms-DO.tsv as (disease, has symptom, symptom, tfidf).")
        splits: list[str] = Field(["train", "dev", "test"], description="Split files read in a KG-BERT folder.")
        head: int | str | None = Field(None, description="Head column: index, header name or JSONL key "
                                       "(default 0 / 'head').")
        relation: int | str | None = Field(None, description="Relation column (default 1 / 'relation').")
        tail: int | str | None = Field(None, description="Tail column (default 2 / 'tail').")
        weight: int | str | None = Field(None, description="Weight column (default: none, or a 4th TSV/CSV "
                                         "column / 'weight' key when present).")
        relation_name: str | None = Field(None, description="One relation for every row (link lists).")
        header: bool | None = Field(None, description="First row is a header (None: when columns are named, or when "
                                    "the first row's cells are all column names such as head, relation, tail or "
                                    "subject, predicate, object; false: always a triple).")
        entity_text: str | None = Field(None, description="id<TAB>text file mapping entity ids to names.",
                                         json_schema_extra=FILE_PATH)
        relation_text: str | None = Field(None, description="id<TAB>text file mapping relation ids to phrases.",
                                           json_schema_extra=FILE_PATH)

    # -- layout ------------------------------------------------------------------------------------
    def _root(self, env: Environment) -> Path:
        path = Path(self.config.path).expanduser()
        if not path.is_absolute() and not path.exists() and (env.data_dir / path).exists():
            path = env.data_dir / path
        return path

    def layout(self, env: Environment) -> tuple[str, list[Path]]:
        root = self._root(env)
        if not root.exists():
            raise DataMissingError(f"triples source: {root} does not exist (set path= a triples file or folder)")
        if root.is_dir():
            kgbert = [root / f"{s}.tsv" for s in self.config.splits if (root / f"{s}.tsv").exists()]
            if self.config.layout in ("auto", "kgbert") and kgbert and (root / "entity2text.txt").exists():
                return "kgbert", kgbert
            files = sorted(p for p in root.iterdir() if p.is_file() and p.name.lower().endswith(TRIPLE_SUFFIXES)
                           and "2text" not in p.name and p.name not in ("entities.txt", "relations.txt"))
            if not files:
                raise DataMissingError(f"triples source: no .tsv/.csv/.jsonl file in {root}")
        else:
            files = [root]
        layout = self.config.layout
        if layout == "auto":
            layout = "hsdn" if self._looks_hsdn(files[0]) else "plain"
        return layout, files

    @staticmethod
    def _looks_hsdn(path: Path) -> bool:
        from kinject.tasks import first_line

        try:
            first = first_line(path).split("\t")
        except OSError:
            return False
        return all(name in [c.strip() for c in first] for name in HSDN_HEADER)

    def _columns(self, layout: str, fmt: str) -> Columns:
        c = self.config
        if layout == "hsdn":
            base = Columns("disease_name", None, "symptom_name", "tfidf_score", "has symptom", True)
        elif fmt == "jsonl":
            base = Columns("head", "relation", "tail", None)
        else:
            base = Columns(0, 1, 2, None)
        return Columns(head=c.head if c.head is not None else base.head,
                       relation=c.relation if c.relation is not None else base.relation,
                       tail=c.tail if c.tail is not None else base.tail,
                       weight=c.weight if c.weight is not None else base.weight,
                       relation_name=c.relation_name or base.relation_name,
                       header=c.header if c.header is not None else base.header)

    def input_files(self, env: Environment) -> list[Path]:
        layout, files = self.layout(env)
        extra = [Path(p) for p in (self.config.entity_text, self.config.relation_text) if p]
        if layout == "kgbert":
            root = files[0].parent
            extra += [p for p in (root / "entity2text.txt", root / "relation2text.txt") if p.exists()]
        return files + extra

    def check(self, env: Environment) -> None:
        for path in self.input_files(env):
            if not path.exists():
                raise DataMissingError("file not found", path)

    def raw_triples(self, env: Environment, bad: BadRows) -> Iterator[Triple]:
        layout, files = self.layout(env)
        ent_path, rel_path = self.config.entity_text, self.config.relation_text
        if layout == "kgbert":
            root = files[0].parent
            ent_path = ent_path or str(root / "entity2text.txt")
            if rel_path is None and (root / "relation2text.txt").exists():
                rel_path = str(root / "relation2text.txt")
        ent = read_text_map(Path(ent_path), bad) if ent_path else None
        rel = read_text_map(Path(rel_path), bad) if rel_path else None
        for path in files:
            fmt = self.config.format if self.config.format != "auto" else detect_format(path)
            cols = self._columns(layout, fmt)
            if layout == "plain" and fmt != "jsonl" and self.config.weight is None:
                cols.weight = _fourth_column_if_numeric(path)
            yield from iter_table_triples(path, fmt, cols, bad, ent, rel)


_PARSERS: dict[type, str] = {}


def _parser_code(cls: type) -> str:
    """A digest of the code that parses a source class's files (its definition and what it names), once per process."""
    if cls not in _PARSERS:
        from kinject.fingerprint import code_fingerprint

        code, _ = code_fingerprint(cls.raw_triples, (cls,))
        _PARSERS[cls] = hashlib.sha256(json.dumps([f"{cls.__module__}.{cls.__qualname__}", code],
                                                  sort_keys=True).encode()).hexdigest()
    return _PARSERS[cls]


def _fourth_column_if_numeric(path: Path) -> int | None:
    """Plain TSV/CSV: a 4th column is the weight when the first data row has one that parses."""
    from kinject.api import bounded_lines, open_text

    try:
        with open_text(path) as handle:
            for _, raw in bounded_lines(handle, path):
                row = raw.decode("utf-8", "replace").rstrip("\r\n")
                if row.strip():
                    cells = row.split("\t") if "\t" in row else row.split(",")
                    if len(cells) < 4:
                        return None
                    float(cells[3])
                    return 3
    except (OSError, ValueError):
        return None
    return None

