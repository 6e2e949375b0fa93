"""Small synthetic data sets shared by the benchmarks and the tests (tests/conftest.py, tests/helpers.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path


def write_textcls(folder: Path, n_train: int = 48, n_eval: int = 16, seed: int = 0) -> Path:
    """A small, learnable two-class JSONL dataset (train/dev/test.jsonl with ``text`` and ``label``)."""
    rng = random.Random(seed)
    bio = ["gene expression increased in tumor cells", "the drug dose reduced symptoms",
           "protein level rose after treatment", "patients with the disease had risk"]
    other = ["the weather was cold today", "we went to the market", "a cat sat on the mat",
             "trains run late on sunday"]
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for i in range(n):
                label = "bio" if i % 2 == 0 else "other"
                text = rng.choice(bio if label == "bio" else other)
                handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return folder


def write_kg(path: Path, clusters: int = 3, size: int = 8, rows: int = 40, seed: int = 0) -> Path:
    """``clusters`` groups of ``size`` entities, ``rows`` triples inside each, one bridge triple between two."""
    rng = random.Random(seed)
    words = "gene protein cell drug dose disease cancer tumor level risk".split()
    with open(path, "w", encoding="utf-8") as handle:
        for g in range(clusters):
            names = [f"{words[(g * 3 + i) % len(words)]} {g}{i}" for i in range(size)]
            for _ in range(rows):
                a, b = rng.sample(names, 2)
                handle.write(f"{a}\t{rng.choice(['causes', 'treats', 'is a'])}\t{b}\n")
        handle.write(f"{words[0]} 00\tcauses\t{words[3]} 10\n")
    return path


def two_line_splits(folder: Path, train: str | None = None) -> Path:
    """dev/test.jsonl of two examples each, and train.jsonl holding ``train`` (absent when None): a data set whose
    train file a test or benchmark writes itself (empty, huge, a FIFO)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        (folder / f"{split}.jsonl").write_text('{"text": "a b", "label": "x"}\n{"text": "c d", "label": "y"}\n')
    if train is not None:
        (folder / "train.jsonl").write_text(train)
    return folder
