"""Helpers shared by the dataset converters: a deterministic sentence splitter, entity rendering
(BLURB-style dummies or markers) and atomic JSONL writing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Sequence

from kinject.tasks.catalogue import DatasetInfo, prepared_cache
from kinject.api import atomic_directory, atomic_file, atomic_write_text

_ABBREVIATIONS = {
    "e.g", "i.e", "vs", "al", "fig", "figs", "ref", "refs", "approx", "ca", "cf", "dr", "no", "nos", "resp", "sp",
    "spp", "st", "mr", "mrs", "ms", "inc", "ltd", "co", "jr", "sr", "vol", "eq", "etc", "viz", "ie", "eg", "var",
    "subsp", "min", "max", "av", "dept", "univ", "tab", "suppl", "et",
}
_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+(?=[A-Z0-9(\[\"'])")


def split_sentences(text: str, protected: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """(start, end) offsets of the sentences of ``text``.

    Rule-based and deterministic: a sentence ends at . ! or ? (plus closing quotes/brackets) followed by
    whitespace and an upper-case letter, digit or opening bracket, unless the word before is a known
    abbreviation or a single letter (an initial), or the boundary falls inside a ``protected`` span
    (an entity mention).
    """
    starts = [0]
    for match in _BOUNDARY.finditer(text):
        cut = match.start() + 1
        word = re.search(r"(\S+)$", text[: match.start()])
        token = word.group(1).lower().lstrip("([\"'") if word else ""
        if token in _ABBREVIATIONS or (len(token) == 1 and token.isalpha()):
            continue
        if any(s < cut < e for s, e in protected):
            continue
        starts.append(match.end())
    spans = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            spans.append((start, end))
    return spans


def render(sentence: str, spans: Sequence[Sequence], style: str = "dummy") -> str:
    """The sentence with its entity spans [(start, end, type), ...] replaced by ``@TYPE$`` (style
    ``dummy``, BLURB) or wrapped in ``[E1] .. [/E1]`` markers (style ``markers``). Overlapping spans
    become one dummy over their union, named by both types (``@DRUG-DRUG$``, as BLURB's DDI files)."""
    ordered = sorted((int(s), int(e), str(t), i) for i, (s, e, t) in enumerate(spans))
    groups: list[list] = []  # [start, end, [(index, type), ...]]
    for start, end, kind, index in ordered:
        if groups and start < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end)
            groups[-1][2].append((index, kind))
        else:
            groups.append([start, end, [(index, kind)]])
    out, pos = [], 0
    for start, end, members in groups:
        out.append(sentence[pos:start])
        members.sort()
        if style == "markers":
            tags = "".join(f"[E{i + 1}]" for i, _ in members)
            out.append(f"{tags} {sentence[start:end]} {tags.replace('[E', '[/E')}")
        else:
            out.append("@" + "-".join(kind for _, kind in members) + "$")
        pos = end
    out.append(sentence[pos:])
    return "".join(out)


def write_jsonl(path: Path, rows: Iterable[dict]) -> int:
    """Write rows atomically (temp file + rename): a crash never leaves a half-written split."""
    count = 0
    with atomic_file(Path(path)) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_splits(out: Path, splits: dict[str, list[dict]], manifest: dict) -> dict[str, int]:
    """Write ``<split>.jsonl`` for each split plus ``manifest.json`` (counts, source, options)."""
    out = Path(out)
    counts = {split: write_jsonl(out / f"{split}.jsonl", rows) for split, rows in splits.items()}
    atomic_write_text(out / "manifest.json", json.dumps({**manifest, "counts": counts}, indent=2) + "\n")
    return counts


def ensure_prepared(info: DatasetInfo, env, path: Path | None = None) -> Path:
    """The folder holding ``<split>.jsonl`` for the dataset ``info`` (converted by ``info.prepare``).

    Looked up in order: ``path`` (when given: it must hold the files), ``<data_dir>/<name>/prepared``
    (written by ``kinject data prepare NAME``), else the converter runs once from the original files
    into :func:`kinject.tasks.catalogue.prepared_cache` (an atomic folder: a crash leaves nothing behind).
    """
    from kinject.api import DataMissingError

    name = info.name
    if path is not None:
        path = Path(path)
        if not (path / "train.jsonl").exists() and not (path / "test.jsonl").exists():
            raise DataMissingError(f"task.path={path} holds no train.jsonl/test.jsonl "
                                   f"(write them with `kinject data prepare {name} --out {path}`)")
        return path
    shared = Path(env.data_dir) / info.folder / "prepared"
    if (shared / "manifest.json").exists():
        return shared
    cached = prepared_cache(info, env.cache_dir)
    if not (cached / "manifest.json").exists():
        with atomic_directory(cached, replace=cached.exists()) as tmp:  # replace: a pre-atomic leftover
            info.prepare(Path(env.data_dir), out=tmp)
    return cached
