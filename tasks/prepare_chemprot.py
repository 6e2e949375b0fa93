"""ChemProt (BioCreative VI) -> BLURB-style sentence-level relation instances.

Every chemical x gene mention pair inside one sentence is an instance; its label is the gold CPR group
when that group is one of the five evaluated ones (CPR:3,4,5,6,9), else ``false`` (unlabelled pairs and
non-evaluated groups). Sentences come from :func:`kinject.tasks.prepare_util.split_sentences`.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from kinject.api import DataError, DataMissingError
from kinject.tasks.prepare_util import render, split_sentences, write_splits

EVALUATED = ("CPR:3", "CPR:4", "CPR:5", "CPR:6", "CPR:9")
LABELS = (*EVALUATED, "false")
ORIGINAL = "chemprot/biocreative6_original"


STEMS = {"train": "chemprot_training", "dev": "chemprot_development", "test": "chemprot_test"}


def _rows(path: Path, columns: int):
    if not path.exists():
        raise DataMissingError(f"ChemProt file not found: {path} (the BioCreative VI release; see "
                               "chemprot/PROVENANCE.md)")
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise DataError(f"invalid UTF-8 (byte {exc.start})", path, number) from None
            if not line.strip():
                continue
            row = line.split("\t")
            if len(row) != columns:
                raise DataError(f"expected {columns} columns, found {len(row)}", path, number)
            yield number, [x.strip() for x in row]


def _file(folder: Path, split: str, kind: str) -> Path:
    suffix = "_gs" if split == "test" and kind in ("abstracts", "entities", "relations") else ""
    name = f"{STEMS[split]}_{kind}{suffix}.tsv"
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.exists():
            return candidate
    return folder / f"{name}.gz"


def raw_files(data_dir: Path) -> list[Path]:
    """The release files :func:`prepare` reads (abstracts, entities, relations of each split)."""
    folder = Path(data_dir) / ORIGINAL
    return [_file(folder, split, kind) for split in STEMS for kind in ("abstracts", "entities", "relations")]


def build_split(folder: Path, split: str) -> list[dict]:
    """The instances of one split, in document / sentence / pair order."""
    abstracts: dict[str, str] = {}
    for _, (pmid, title, abstract) in _rows(_file(folder, split, "abstracts"), 3):
        abstracts[pmid] = f"{title}\n{abstract}"
    entities: dict[str, list[tuple[str, str, int, int]]] = {}
    path = _file(folder, split, "entities")
    for number, (pmid, tid, kind, start, end, text) in _rows(path, 6):
        if kind not in ("CHEMICAL", "GENE-Y", "GENE-N"):
            raise DataError(f"unknown entity type {kind!r}", path, number)
        if pmid not in abstracts or abstracts[pmid][int(start):int(end)] != text:
            raise DataError(f"entity {tid} does not match the abstract text at {start}-{end}", path, number)
        entities.setdefault(pmid, []).append((tid, kind, int(start), int(end)))
    gold: dict[tuple[str, str, str], str] = {}
    path = _file(folder, split, "relations")
    for number, (pmid, group, _evaluated, _fine, arg1, arg2) in _rows(path, 6):
        if not group.startswith("CPR:"):
            raise DataError(f"unknown relation group {group!r}", path, number)
        if group in EVALUATED:
            gold[(pmid, arg1.removeprefix("Arg1:"), arg2.removeprefix("Arg2:"))] = group
    out = []
    for pmid, text in abstracts.items():
        mentions = entities.get(pmid, [])
        for s_index, (s_start, s_end) in enumerate(split_sentences(text, [(m[2], m[3]) for m in mentions])):
            inside = [m for m in mentions if s_start <= m[2] and m[3] <= s_end]
            chemicals = [m for m in inside if m[1] == "CHEMICAL"]
            genes = [m for m in inside if m[1] != "CHEMICAL"]
            sentence = text[s_start:s_end]
            for chem in chemicals:
                for gene in genes:
                    spans = [(chem[2] - s_start, chem[3] - s_start, "CHEMICAL"),
                             (gene[2] - s_start, gene[3] - s_start, "GENE")]
                    out.append({"id": f"{pmid}.{chem[0]}.{gene[0]}", "text": render(sentence, spans),
                                "label": gold.get((pmid, chem[0], gene[0]), "false"), "sentence": sentence,
                                "spans": spans, "doc": pmid, "sent": s_index})
    return out


def build(data_dir: Path) -> dict[str, list[dict]]:
    folder = Path(data_dir) / ORIGINAL
    return {split: build_split(folder, split) for split in ("train", "dev", "test")}


def prepare(data_dir: Path, out: Path | None = None, **_options) -> dict[str, int]:
    """Write ``{train,dev,test}.jsonl`` (+ manifest.json) to ``out`` (default <data_dir>/chemprot/prepared)."""
    out = Path(out) if out else Path(data_dir) / "chemprot" / "prepared"
    splits = build(data_dir)
    return write_splits(out, splits, {"dataset": "chemprot", "from": str(Path(data_dir) / ORIGINAL),
                                      "labels": list(LABELS), "format": "kinject-relation-v1"})
