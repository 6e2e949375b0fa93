"""The texts of the MLM controls (``strategy.mlm_corpus``), which train on other text at the same steps so a run on
the in-domain corpus can be told from minilm merely relearning masked-token prediction:

* ``general``: out-of-domain text built offline from the running Python - the paragraphs of the docstrings of its
  standard library (modules, classes, functions; parsed with :mod:`ast`, never imported; test suites, ``idlelib``
  and installed packages left out) and of its language reference (``pydoc_data.topics``, what ``help("if")``
  prints), whitespace-normalised, doctest lines dropped, paragraphs under ``min_chars`` or under 75% letters and
  spaces (code, tables, grammar) dropped, deduplicated, in file order. Python 3.11.7: 12,190 texts, 1.66M
  characters, 266k words (425k minilm tokens); no biomedical terms (its "cells" are grid and table cells).
  ``kinject vocab general-corpus -o FILE`` writes the same texts.
* ``shuffled``: the corpus's train texts with the words of each text shuffled (seeded per text): the domain's
  vocabulary and word frequencies without its sentences.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterator, Literal

from kinject.api import StageConfig, StageContext, is_main_process

CONTROL_TEXTS = "texts.txt"  # what a control stage writes: a text a line (the pack stage's texts file)
#: folders of the standard library whose docstrings are not the library's documentation
SKIPPED_PARTS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"})


def _paragraphs(text: str, min_chars: int) -> Iterator[str]:
    """The prose paragraphs of a docstring or reference page, each on one line."""
    import re

    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if not line.lstrip().startswith((">>>", "..."))]
        paragraph = " ".join(" ".join(lines).split())
        if len(paragraph) < min_chars:
            continue
        if sum(c.isalpha() or c == " " for c in paragraph) >= 0.75 * len(paragraph):
            yield paragraph


def python_docs_texts(min_chars: int = 40) -> Iterator[str]:
    """Paragraphs of the running Python's standard library docstrings and language reference (see the module
    docstring), deduplicated, in a fixed order (sorted file paths, then the reference's topics)."""
    import ast
    import sysconfig
    from pathlib import Path

    from pydoc_data.topics import topics

    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()

    def fresh(texts: Iterator[str]) -> Iterator[str]:
        for text in texts:
            if text not in seen:
                seen.add(text)
                yield text

    files = sorted(p for p in root.rglob("*.py") if not SKIPPED_PARTS & set(p.relative_to(root).parts))
    for path in files:
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node)
                if docstring:
                    yield from fresh(_paragraphs(docstring, min_chars))
    for name in sorted(topics):
        yield from fresh(_paragraphs(topics[name], min_chars))


def shuffled_texts(texts: Iterator[str], seed: int) -> Iterator[str]:
    """Each text with its (whitespace-separated) words in a random order, seeded by ``seed`` and the text's index."""
    import numpy as np

    for index, text in enumerate(texts):
        words = text.split()
        order = np.random.default_rng([seed, index]).permutation(len(words))
        yield " ".join(words[i] for i in order)


def write_texts(texts: Iterator[str], path) -> dict:
    """Write ``texts`` a line each to ``path``; returns their count, characters, words and SHA-256."""
    digest = hashlib.sha256()
    count = chars = words = 0
    with open(path, "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(text + "\n")
            digest.update(text.encode() + b"\n")
            count, chars, words = count + 1, chars + len(text), words + len(text.split())
    return {"texts": count, "chars": chars, "words": words, "sha256": digest.hexdigest()}


class ControlTextsConfig(StageConfig):
    """The texts of an MLM control (``texts.txt``, a text a line; ``control.json``): ``general`` - paragraphs of the
    docstrings and language reference of the standard library of Python ``python`` (the running one); ``shuffled``
    - the ``train.arrow`` texts of ``corpus_stage`` with each text's words shuffled (seeded by ``seed``)."""

    kind: Literal["general", "shuffled"]
    corpus_stage: str | None = None
    python: str | None = None
    min_chars: int = 40
    seed: int = 0


def control_body(cfg: ControlTextsConfig, ctx: StageContext) -> None:
    import platform

    from kinject.api import DataError
    from kinject.knowledge import read_texts

    if not is_main_process():
        return
    if cfg.kind == "general":
        if cfg.python != platform.python_version():
            raise DataError(f"the general control corpus is keyed for Python {cfg.python} but this is "
                            f"{platform.python_version()}: re-plan the run")
        texts = python_docs_texts(cfg.min_chars)
        provenance = (f"docstrings and language reference (pydoc_data.topics) of the Python {cfg.python} standard "
                      "library")
    else:
        texts = shuffled_texts(read_texts(ctx.inputs[cfg.corpus_stage] / "train.arrow"), cfg.seed)
        provenance = f"the train texts of {cfg.corpus_stage}, words shuffled within each text (seed {cfg.seed})"
    stats = {"kind": cfg.kind, "provenance": provenance, **write_texts(texts, ctx.out / CONTROL_TEXTS)}
    if not stats["texts"]:
        raise DataError(f"the {cfg.kind} control corpus is empty")
    (ctx.out / "control.json").write_text(json.dumps(stats, indent=2))
