"""Small synthetic data sets shared by the benchmarks and the tests (tests/conftest.py, tests/helpers.py)."""

from __future__ import annotations

import random
from pathlib import Path

from kinject.testing import write_textcls  # noqa: F401  (the data a plugin package's tests use too)


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
