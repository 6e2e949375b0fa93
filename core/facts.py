"""Knowledge on one footing: how facts are keyed, how held-out facts are matched, and the hold-out the engine
applies to every source of every strategy.

* **Facts** are compared by their words (case-folded ``\\w+`` tokens), so "Seizure" and "seizure," are one name.
  :func:`fact_key` turns a (head, relation, tail) triple into a 64-bit key and :func:`facts_digest` a set of keys into
  a short digest: two runs with the same digest saw the same facts.
* **Held-out facts** (:class:`HeldOutFacts`) are pairs of names. A name is compared by its first :data:`NAME_WORDS`
  words. A triple is held out when it links the two names of a held-out fact (either direction, any relation); a
  text loses each statement (sentence) that names both.
* **The hold-out** (``RunSpec.knowledge.exclude``): the facts a task's dev/test items are built from
  (``Task.facts``), or the triples of a file, are removed from every knowledge source before any stage reads it:
  :class:`HeldOutSource`, which :meth:`kinject.refs.SourceRef.build` returns when the run holds facts out
  (:class:`kinject.refs.HoldOutRef` keys the set by its digest, which changes with the facts and with how they are
  matched).
"""

from __future__ import annotations

import functools
import hashlib
import re
from array import array
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from kinject.errors import DataError
from kinject.io import file_digest, iter_lines

#: The default hold-out: the splits whose facts a run holds out when ``knowledge.exclude`` is unset (the comparison
#: is one of generalisation; ``[]`` is memorisation). A memorisation run's inputs are counted against it.
DEFAULT_EXCLUDE = ("dev", "test")
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


# -- the held-out facts ------------------------------------------------------------------------------------------ #
SMALL_KEY_SET = 1 << 18  # up to this many keys a held-out set keeps a Python set (fast), above a sorted array
NAME_WORDS = 8  # a name is matched by its first 8 words (a long tail, e.g. a definition, by its opening)
_STATEMENT = re.compile(r"(?<=[.!?;])\s+")  # where a text's statements part (the text filter drops statements)


def _name(text: str) -> tuple[str, ...]:
    return words(text)[:NAME_WORDS]


# -- the name pairs ------------------------------------------------------------------------------------------- #
def _key(text: str) -> int:
    """A 64-bit key of a name or a name pair (its words joined)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _pair_key(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    first, second = min(a, b), max(a, b)
    return _key(" ".join(first) + "\x1f" + " ".join(second))


class KeySet:
    """Distinct 64-bit keys: a Python set while small (fast lookups), a sorted uint64 array (8 bytes a key) above
    :data:`SMALL_KEY_SET` keys."""

    def __init__(self, keys: array):
        self.sorted = np.unique(np.frombuffer(keys, dtype=np.uint64)) if len(keys) else np.zeros(0, dtype=np.uint64)
        self.small = set(self.sorted.tolist()) if len(self.sorted) <= SMALL_KEY_SET else None

    def __len__(self) -> int:
        return len(self.sorted)

    def __contains__(self, key: int) -> bool:
        if self.small is not None:
            return key in self.small
        i = int(np.searchsorted(self.sorted, np.uint64(key)))
        return i < len(self.sorted) and int(self.sorted[i]) == key


class HeldOutFacts:
    """A set of held-out facts as pairs of names: :meth:`blocks_triple` (the triple links two names of a held-out
    fact) and :meth:`blocks_text` (the text names both).

    Stored compactly whatever its size: 64-bit keys of the name pairs, the names and the names' first words
    (8 bytes each), built from ``triples`` and ``files`` (:func:`read_fact_file`) read as a stream - a file of millions
    of facts costs tens of MB, not its size in Python objects. :meth:`iter_triples` re-reads what was given.
    """

    def __init__(self, triples: Iterable[tuple[str, str, str]] = (), files: Iterable[str | Path] = ()):
        self.triples: list[tuple[str, str, str]] = []  # the in-memory ones, as given (files are re-read)
        self.files = tuple(Path(f) for f in files)
        pairs, names, firsts, keys = array("Q"), array("Q"), array("Q"), array("Q")
        self.longest = 0
        given = iter(triples)
        for source, rows in ((True, given), *((False, read_fact_file(f)) for f in self.files)):
            for head, relation, tail in rows:
                a, b = _name(head), _name(tail)
                if not a or not b or a == b:
                    continue
                if source:
                    self.triples.append((head, relation, tail))
                pairs.append(_pair_key(a, b))
                for name in (a, b):
                    names.append(_key(" ".join(name)))
                    firsts.append(_key(name[0]))
                    self.longest = max(self.longest, len(name))
                keys.append(fact_key(head, relation, tail))
        self._pairs, self._names, self._firsts = KeySet(pairs), KeySet(names), KeySet(firsts)
        self.keys = KeySet(keys).sorted
        self._names_of: dict[int, tuple] | None = None

    def __len__(self) -> int:
        return len(self._pairs)

    @property
    def pairs(self) -> set[int]:
        """The keys of the held-out name pairs (what :meth:`pair_of` and :meth:`pair_in` return)."""
        return set(self._pairs.sorted.tolist())

    @property
    def digest(self) -> str:
        """What identifies the held-out set (its name pairs)."""
        return facts_digest(self._pairs.sorted)

    def iter_triples(self) -> Iterator[tuple[str, str, str]]:
        """The held-out triples as given: the in-memory ones, then each file's, re-read."""
        yield from self.triples
        for path in self.files:
            yield from read_fact_file(path)

    def pair_of(self, head: str, tail: str) -> int | None:
        """The key of the held-out name pair a triple (head, tail) links, else None."""
        a, b = _name(head), _name(tail)
        if not a or not b or a == b:
            return None
        key = _pair_key(a, b)
        return key if key in self._pairs else None

    def pair_names(self, key: int) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """The two names (word tuples, in order) of the held-out pair ``key``, from the triples as given."""
        if self._names_of is None:
            self._names_of = {}
            for head, _, tail in self.iter_triples():
                a, b = _name(head), _name(tail)
                if a and b and a != b:
                    self._names_of[_pair_key(a, b)] = (min(a, b), max(a, b))
        return self._names_of.get(key)

    def blocks_triple(self, head: str, tail: str) -> bool:
        return self.pair_of(head, tail) is not None

    def names_in(self, text: str) -> set[tuple[str, ...]]:
        """The held-out names that occur in ``text`` (whole words, the longest name first where names overlap: "focal
        seizure" names the focal seizure, not also the seizure)."""
        tokens = words(text)
        found, i = set(), 0
        while i < len(tokens):
            step = 1
            if _key(tokens[i]) in self._firsts:
                for n in range(min(self.longest, len(tokens) - i), 0, -1):
                    if _key(" ".join(tokens[i:i + n])) in self._names:
                        found.add(tokens[i:i + n])
                        step = n
                        break
            i += step
        return found

    def pair_in(self, text: str) -> int | None:
        """The key of a held-out name pair ``text`` names both names of, else None."""
        if not len(self._pairs):
            return None
        found = sorted(self.names_in(text))
        for i, name in enumerate(found):
            for other in found[i + 1:]:
                key = _pair_key(name, other)
                if key in self._pairs:
                    return key
        return None

    def blocks_text(self, text: str) -> bool:
        return self.pair_in(text) is not None

    def strip_text(self, text: str) -> tuple[str, int]:
        """``text`` less its statements (sentences, split after . ! ? ;) that name both names of a held-out fact,
        and how many it dropped: the text filter removes what the graph filter removes, one statement per fact."""
        if not len(self._pairs) or not self.blocks_text(text):
            return text, 0
        kept = [s for s in _STATEMENT.split(text) if s and not self.blocks_text(s)]
        return " ".join(kept), len(_STATEMENT.split(text)) - len(kept)


def read_fact_file(path: Path) -> Iterator[tuple[str, str, str]]:
    """Triples of a held-out facts file: ``head<TAB>relation<TAB>tail`` a line (``head<TAB>tail`` also works;
    blank lines and ``#`` comments are skipped). A DataError names file:line for a line with one column."""
    for number, line in iter_lines(Path(path)):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if len(cells) < 2 or not cells[0] or not cells[-1]:
            raise DataError("expected head<TAB>relation<TAB>tail (or head<TAB>tail)", path, number)
        yield cells[0], cells[1] if len(cells) > 2 else "", cells[-1]


def held_out_facts(triples: list, files: tuple = ()) -> "HeldOutFacts":
    """The held-out facts of ``triples`` ((head, relation, tail)) and fact ``files``, built once per process for the
    same triples and file contents: the seeds of --repeats, grid cells and sweep trials share one read of a large
    exclude file."""
    return _held_out(tuple(tuple(t) for t in triples), tuple((str(f), file_digest(f)) for f in files))


@functools.lru_cache(maxsize=4)
def _held_out(triples: tuple, files: tuple) -> "HeldOutFacts":
    return HeldOutFacts(triples, files=[path for path, _ in files])


# -- every source, held out ---------------------------------------------------------------------------------------- #
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
