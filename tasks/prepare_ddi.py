"""DDI 2013 (official XML zip) -> BLURB-style pair instances with both drugs replaced by ``@DRUG$``.

Splits as BLURB: dev = the 79 documents of the official Train folder listed in :data:`DEV_DOCUMENTS`
(the documents of BLURB's dev file), train = the rest of Train, test = "Test for DDI Extraction task".
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from xml.etree import ElementTree

from kinject.api import DataError, DataMissingError
from kinject.tasks.prepare_util import render, write_splits

LABELS = ("DDI-advise", "DDI-effect", "DDI-int", "DDI-mechanism", "DDI-false")
ORIGINAL = "ddi/DDICorpus-2013.zip"
TEST_FOLDER = "DDICorpus/Test/Test for DDI Extraction task/"
_DEV = {
    "DrugBank": "116 128 148 158 161 166 168 185 217 22 222 232 240 248 252 262 270 309 314 325 326 327 340 341 348 "
                "35 362 369 372 377 378 39 399 40 42 422 427 438 439 450 453 469 479 493 494 497 498 502 507 511 "
                "516 52 529 548 55 552 563 57 67 7 70 74 8",
    "MedLine": "104 110 116 119 125 128 131 134 21 23 42 55 67 68 79 86",
}
DEV_DOCUMENTS = frozenset(f"DDI-{src}.d{n}" for src, numbers in _DEV.items() for n in numbers.split())


def _offsets(value: str, path: str, sentence_id: str) -> list[tuple[int, int]]:
    """``charOffset`` ("3-9" or "3-5;12-14", end inclusive) -> [(start, end exclusive), ...]."""
    try:
        parts = [tuple(int(x) for x in piece.split("-")) for piece in value.split(";")]
        return [(s, e + 1) for s, e in parts]
    except ValueError:
        raise DataError(f"sentence {sentence_id}: bad charOffset {value!r}", path) from None


def document_instances(xml: bytes, path: str) -> tuple[str, list[dict]]:
    """(document id, instances) of one XML document."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise DataError(f"invalid XML ({exc})", path, exc.position[0]) from None
    out = []
    for sentence in root.iter("sentence"):
        sid, text = sentence.get("id"), sentence.get("text", "")
        entities = {e.get("id"): _offsets(e.get("charOffset", ""), path, sid) for e in sentence.iter("entity")}
        for pair in sentence.iter("pair"):
            e1, e2 = pair.get("e1"), pair.get("e2")
            if e1 not in entities or e2 not in entities:
                raise DataError(f"pair {pair.get('id')} names an unknown entity", path)
            kind = pair.get("type")
            label = f"DDI-{kind.lower()}" if pair.get("ddi") == "true" and kind else "DDI-false"
            # a discontinuous mention is replaced from its first to its last character
            spans = [(entities[e][0][0], entities[e][-1][1], "DRUG") for e in (e1, e2)]
            out.append({"id": pair.get("id"), "text": render(text, spans), "label": label, "sentence": text,
                        "spans": spans, "doc": root.get("id")})
    return root.get("id"), out


def build(data_dir: Path) -> dict[str, list[dict]]:
    path = Path(data_dir) / ORIGINAL
    if not path.exists():
        raise DataMissingError(f"DDI corpus not found: {path} (DDICorpus-2013.zip from "
                               "github.com/isegura/DDICorpus; see ddi/PROVENANCE.md)")
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    with zipfile.ZipFile(path) as archive:
        for name in sorted(archive.namelist()):
            if not name.endswith(".xml"):
                continue
            if name.startswith("DDICorpus/Train/"):
                doc, rows = document_instances(archive.read(name), f"{path}!{name}")
                splits["dev" if doc in DEV_DOCUMENTS else "train"].extend(rows)
            elif name.startswith(TEST_FOLDER):
                splits["test"].extend(document_instances(archive.read(name), f"{path}!{name}")[1])
    return splits


def raw_files(data_dir: Path) -> list[Path]:
    """The release file :func:`prepare` reads."""
    return [Path(data_dir) / ORIGINAL]


def prepare(data_dir: Path, out: Path | None = None, **_options) -> dict[str, int]:
    """Write ``{train,dev,test}.jsonl`` (+ manifest.json) to ``out`` (default <data_dir>/ddi/prepared)."""
    out = Path(out) if out else Path(data_dir) / "ddi" / "prepared"
    return write_splits(out, build(data_dir), {"dataset": "ddi", "from": str(Path(data_dir) / ORIGINAL),
                                               "labels": list(LABELS), "format": "kinject-relation-v1"})


def agreement(rows: list[dict], blurb_tsv: Path) -> dict[str, float]:
    """Compare instances with a BLURB TSV (pair id, dummified sentence, label): shared ids, same labels,
    same text (whitespace-normalised)."""
    ref = {}
    with open(blurb_tsv, encoding="utf-8") as handle:
        for line in handle:
            pid, text, label = line.rstrip("\n").split("\t")
            ref[pid] = (" ".join(text.split()), label)
    mine = {r["id"]: (" ".join(r["text"].split()), r["label"]) for r in rows}
    shared = set(ref) & set(mine)
    return {"reference": len(ref), "ours": len(mine), "shared_ids": len(shared),
            "same_label": sum(ref[k][1] == mine[k][1] for k in shared),
            "same_text": sum(ref[k][0] == mine[k][0] for k in shared)}
