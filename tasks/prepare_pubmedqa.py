"""PubMedQA (PQA-L) -> train/dev/test: test = the official 500 (test_ground_truth.json), train/dev = a
seeded 450/50 split of the other 500 labelled items (BLURB's sizes; upstream commits no split file)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from kinject.api import DataError, DataMissingError
from kinject.tasks.prepare_util import write_splits

LABELS = ("yes", "no", "maybe")
FOLDER = "pubmedqa"
DEFAULT_SEED = 0
DEV_SIZE = 50


def _load(path: Path) -> dict:
    if not path.exists():
        raise DataMissingError(f"PubMedQA file not found: {path} (github.com/pubmedqa/pubmedqa data/; "
                               "see pubmedqa/PROVENANCE.md)")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"invalid UTF-8 (byte {exc.start})", path) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON ({exc.msg})", path, exc.lineno) from None
    if not isinstance(data, dict) or not data:
        raise DataError("expected a non-empty JSON object keyed by PubMed id", path)
    return data


def build(data_dir: Path, seed: int = DEFAULT_SEED, dev_size: int = DEV_SIZE) -> dict[str, list[dict]]:
    """Rows {id, question, context (CONTEXTS joined), label} per split (reasoning-required setting)."""
    folder = Path(data_dir) / FOLDER
    items, truth = _load(folder / "ori_pqal.json"), _load(folder / "test_ground_truth.json")

    def row(pmid: str, label: str) -> dict:
        item = items[pmid]
        if label not in LABELS:
            raise DataError(f"item {pmid}: unknown label {label!r} (known: yes, no, maybe)", folder / "ori_pqal.json")
        return {"id": pmid, "question": item["QUESTION"], "context": " ".join(item["CONTEXTS"]), "label": label}

    missing = sorted(set(truth) - set(items))
    if missing:
        raise DataError(f"test id {missing[0]} is not in ori_pqal.json", folder / "test_ground_truth.json")
    pool = sorted(set(items) - set(truth))
    random.Random(seed).shuffle(pool)
    dev, train = pool[:dev_size], pool[dev_size:]
    return {"train": [row(p, items[p]["final_decision"]) for p in train],
            "dev": [row(p, items[p]["final_decision"]) for p in dev],
            "test": [row(p, truth[p]) for p in sorted(truth)]}


def prepare(data_dir: Path, out: Path | None = None, seed: int = DEFAULT_SEED, **_options) -> dict[str, int]:
    """Write ``{train,dev,test}.jsonl`` (+ manifest.json with the seed) to ``out``."""
    out = Path(out) if out else Path(data_dir) / FOLDER / "prepared"
    return write_splits(out, build(data_dir, seed), {"dataset": "pubmedqa", "seed": seed, "dev_size": DEV_SIZE,
                                                     "from": str(Path(data_dir) / FOLDER)})
