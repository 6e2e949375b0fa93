"""Knowledge on one footing, the engine's side: how facts are keyed, and the hold-out it applies to every source.

* **Facts** are compared by their words (case-folded ``\\w+`` tokens), so "Seizure" and "seizure," are one name.
  :func:`fact_key` turns a (head, relation, tail) triple into a 64-bit key and :func:`facts_digest` a set of keys into
  a short digest: two runs with the same digest saw the same facts.
* **The hold-out** (``RunSpec.knowledge.exclude``): the facts a task's dev/test items are built from
  (``Task.facts``), or the triples of a file, are removed from every knowledge source of every strategy before any
  stage reads it: :class:`HeldOutSource`, which :meth:`kinject.refs.SourceRef.build` returns when the run holds facts
  out, applies the set the ``kinject_held_out_facts`` hook built (:class:`kinject.refs.HoldOutRef` keys it by digest).

How held-out facts are matched (names by their words; a text by its statements), which splits a run holds out when
``knowledge.exclude`` is unset, and the dose a stage consumed are the knowledge library's (the
``kinject_held_out_facts``, ``kinject_default_exclude`` and ``kinject_run_dose`` hooks; :mod:`kinject.hooks.specs`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Iterable, Iterator

import numpy as np

_WORD = re.compile(r"\w+")


def words(text: str) -> tuple[str, ...]:
    """The case-folded word tokens of ``text`` (how facts and names are compared)."""
    return tuple(_WORD.findall(text.casefold()))


def fact_key(head: str, relation: str, tail: str) -> int:
    """A 64-bit key of a (head, relation, tail) fact, equal for texts that differ only in case and punctuation."""
    text = "\x1f".join(" ".join(words(part)) for part in (head, relation, tail))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def facts_digest(keys: np.ndarray | Iterable[int]) -> str:
    """A digest of a set of fact keys (16 hex digits; order and repeats do not matter)."""
    unique = np.unique(np.asarray(list(keys) if not isinstance(keys, np.ndarray) else keys, dtype=np.uint64))
    return hashlib.sha256(unique.astype("<u8").tobytes()).hexdigest()[:16]


class HeldOutSource:
    """A knowledge source with held-out facts removed from its triples and texts (every other attribute is the
    source's own). ``removed`` counts what the last pass dropped; ``kept`` what it passed on."""

    def __init__(self, source: Any, facts: Any):
        self.source, self.facts = source, facts
        self.removed = 0
        self.kept = 0

    def __getattr__(self, name: str) -> Any:  # name, kind, config, bad_rows, stats, ... of the source
        return getattr(self.__dict__["source"], name)

    def fingerprint(self, env) -> str:
        return hashlib.sha256(f"{self.source.fingerprint(env)}:held-out:{self.facts.digest}".encode()).hexdigest()

    def iter_triples(self, env) -> Iterator[Any]:
        self.removed = self.kept = 0
        for triple in self.source.iter_triples(env):
            if self.facts.blocks_triple(triple.head, triple.tail):
                self.removed += 1
                continue
            self.kept += 1
            yield triple

    def iter_texts(self, env, *args: Any, **kwargs: Any) -> Iterator[str]:
        """The source's texts less the statements that state a held-out fact (``removed`` counts statements)."""
        self.removed = self.kept = 0
        for text in self.source.iter_texts(env, *args, **kwargs):
            text, dropped = self.facts.strip_text(text)
            self.removed += dropped
            if text.strip():
                self.kept += 1
                yield text


def held_out_count(source: Any) -> int | None:
    """How many triples or texts the hold-out removed in ``source``'s last pass (None: nothing is held out); looks
    through wrappers that keep the source they read as ``.source``."""
    for _ in range(4):
        if isinstance(source, HeldOutSource):
            return source.removed
        source = getattr(source, "source", None)
        if source is None:
            return None
    return None
