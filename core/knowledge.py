"""Knowledge on one footing: which facts every source holds out, and how much knowledge a stage consumed.

* **Facts** are compared by their words (case-folded ``\\w+`` tokens), so "Seizure" and "seizure," are one name.
  :func:`fact_key` turns a (head, relation, tail) triple into a 64-bit key and :func:`facts_digest` a set of keys into
  a short digest: two runs with the same digest saw the same facts.
* **The hold-out** (``RunSpec.knowledge.exclude``): the facts a task's dev/test items are built from
  (``Task.facts``), or the triples of a file, are removed from every knowledge source of every strategy before any
  stage reads it (:class:`HeldOutFacts`, applied by :class:`HeldOutSource`, which
  :meth:`kinject.refs.SourceRef.build` returns when the run holds facts out). A triple is removed when it links the
  two names of a held-out fact (either direction, any relation); a text when it names both.
* **The dose** (``dose.json`` in a stage's output, :func:`write_dose`): what a stage consumed - rows, facts with
  repeats, distinct facts, epochs of its rows, tokens - and the digest of the facts it covered. The engine adds the
  stages' doses to the run's metrics.json as ``dose`` (:func:`combine_doses`).
"""

from __future__ import annotations


import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

DOSE_FILE = "dose.json"  # a stage's dose (numbers and the covered facts' digest)
DOSE_FACTS = "dose-facts.npy"  # the sorted 64-bit keys of the facts it covered (for the run's union)
NAME_WORDS = 8  # a name is matched by its first 8 words (a long tail, e.g. a definition, by its opening)
_WORD = re.compile(r"\w+")


def words(text: str) -> tuple[str, ...]:
    """The case-folded word tokens of ``text`` (how facts and names are compared)."""
    return tuple(_WORD.findall(text.casefold()))


def _name(text: str) -> tuple[str, ...]:
    return words(text)[:NAME_WORDS]


def fact_key(head: str, relation: str, tail: str) -> int:
    """A 64-bit key of a (head, relation, tail) fact, equal for texts that differ only in case and punctuation."""
    text = "\x1f".join(" ".join(words(part)) for part in (head, relation, tail))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def fact_keys(triples: Iterable[tuple[str, str, str]]) -> np.ndarray:
    """Sorted distinct :func:`fact_key` of ``triples`` (uint64)."""
    return np.unique(np.fromiter((fact_key(*t) for t in triples), dtype=np.uint64))


def facts_digest(keys: np.ndarray | Iterable[int]) -> str:
    """A digest of a set of fact keys (16 hex digits; order and repeats do not matter)."""
    unique = np.unique(np.asarray(list(keys) if not isinstance(keys, np.ndarray) else keys, dtype=np.uint64))
    return hashlib.sha256(unique.astype("<u8").tobytes()).hexdigest()[:16]


# -- the hold-out ------------------------------------------------------------------------------------------- #
class HeldOutFacts:
    """A set of held-out facts as pairs of names: :meth:`blocks_triple` (the triple links two names of a held-out
    fact) and :meth:`blocks_text` (the text names both)."""

    def __init__(self, triples: Iterable[tuple[str, str, str]] = ()):
        self.pairs: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
        self.partners: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
        self.triples: list[tuple[str, str, str]] = []  # as given (the knowledge probe asks about them)
        keys = []
        for head, relation, tail in triples:
            a, b = _name(head), _name(tail)
            if not a or not b or a == b:
                continue
            self.triples.append((head, relation, tail))
            self.pairs.add((min(a, b), max(a, b)))
            self.partners.setdefault(a, set()).add(b)
            self.partners.setdefault(b, set()).add(a)
            keys.append(fact_key(head, relation, tail))
        self.keys = np.unique(np.asarray(keys, dtype=np.uint64))
        self.first_words = {name[0] for name in self.partners}
        self.longest = max((len(name) for name in self.partners), default=0)

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def digest(self) -> str:
        """What identifies the held-out set (its name pairs)."""
        text = "\n".join(sorted(" ".join(a) + "\x1f" + " ".join(b) for a, b in self.pairs))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def blocks_triple(self, head: str, tail: str) -> bool:
        a, b = _name(head), _name(tail)
        return (min(a, b), max(a, b)) in self.pairs

    def names_in(self, text: str) -> set[tuple[str, ...]]:
        """The held-out names that occur in ``text`` (as whole words)."""
        tokens = words(text)
        found = set()
        for i, token in enumerate(tokens):
            if token not in self.first_words:
                continue
            for n in range(1, min(self.longest, len(tokens) - i) + 1):
                if tokens[i:i + n] in self.partners:
                    found.add(tokens[i:i + n])
        return found

    def blocks_text(self, text: str) -> bool:
        if not self.pairs:
            return False
        found = self.names_in(text)
        return any(self.partners[name] & found for name in found)


def read_fact_file(path: Path) -> Iterator[tuple[str, str, str]]:
    """Triples of a held-out facts file: ``head<TAB>relation<TAB>tail`` a line (``head<TAB>tail`` also works;
    blank lines and ``#`` comments are skipped). A DataError names file:line for a line with one column."""
    from kinject.errors import DataError
    from kinject.io import iter_lines

    for number, line in iter_lines(Path(path)):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if len(cells) < 2 or not cells[0] or not cells[-1]:
            raise DataError("expected head<TAB>relation<TAB>tail (or head<TAB>tail)", path, number)
        yield cells[0], cells[1] if len(cells) > 2 else "", cells[-1]


class HeldOutSource:
    """A knowledge source with held-out facts removed from its triples and texts (every other attribute is the
    source's own). ``removed`` counts what the last pass dropped; ``kept`` what it passed on."""

    def __init__(self, source: Any, facts: HeldOutFacts):
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
        self.removed = self.kept = 0
        for text in self.source.iter_texts(env, *args, **kwargs):
            if self.facts.blocks_text(text):
                self.removed += 1
                continue
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


# -- the dose ----------------------------------------------------------------------------------------------- #
def write_dose(folder: Path, *, unit: str, covered: np.ndarray, seen: int, rows_seen: int, rows_total: int,
               available: int | None = None, tokens: int | None = None, **extra: Any) -> dict:
    """Write a stage's dose into ``folder`` (``dose.json`` and ``dose-facts.npy``) and return it.

    ``unit``: what a fact is ("triples", "texts", "facts in context"); ``covered``: the keys (:func:`fact_key`, or
    any 64-bit key of a text) of the distinct facts the stage consumed; ``seen``: facts consumed with repeats;
    ``rows_seen`` / ``rows_total``: training rows consumed / in one epoch (``epochs`` is their ratio);
    ``available``: distinct facts the stage could have consumed; ``tokens``: non-padding tokens consumed.
    """
    covered = np.unique(np.asarray(covered, dtype=np.uint64))
    dose = {"unit": unit, "seen": int(seen), "distinct": int(len(covered)),
            "available": int(available) if available is not None else None,
            "coverage": round(len(covered) / available, 6) if available else None,
            "rows_seen": int(rows_seen), "rows_total": int(rows_total),
            "epochs": round(rows_seen / rows_total, 6) if rows_total else 0.0,
            "tokens": int(tokens) if tokens is not None else None, "digest": facts_digest(covered), **extra}
    Path(folder).mkdir(parents=True, exist_ok=True)
    np.save(Path(folder) / DOSE_FACTS, covered, allow_pickle=False)
    (Path(folder) / DOSE_FILE).write_text(json.dumps(dose, indent=2, default=str))
    return dose


def combine_doses(stages: list[tuple[str, Path]]) -> dict | None:
    """The run's ``dose`` from the stages that wrote one (name, folder): totals (facts seen, rows, tokens), the
    distinct facts and digest of their union, the epochs of the largest stage (each stage's own under
    ``stages``). None when no stage consumed knowledge."""
    doses = []
    for name, folder in stages:
        path = Path(folder) / DOSE_FILE
        if path.is_file():
            dose = json.loads(path.read_text())
            facts = Path(folder) / DOSE_FACTS
            keys = np.load(facts, allow_pickle=False) if facts.is_file() else np.zeros(0, np.uint64)
            doses.append((name, dose, keys))
    if not doses:
        return None
    union = np.unique(np.concatenate([keys for _, _, keys in doses]))
    units = sorted({d["unit"] for _, d, _ in doses})
    available = [d.get("available") for _, d, _ in doses]
    total_available = sum(available) if all(a is not None for a in available) else None

    def total(field: str) -> int | None:
        values = [d.get(field) for _, d, _ in doses]
        return sum(values) if all(v is not None for v in values) else None

    rows_seen, rows_total = total("rows_seen"), total("rows_total")
    out = {"unit": units[0] if len(units) == 1 else "+".join(units), "seen": total("seen"), "distinct": int(len(union)),
           "available": total_available, "coverage": round(len(union) / total_available, 6)
           if total_available else None, "rows_seen": rows_seen, "rows_total": rows_total,
           "epochs": round(rows_seen / rows_total, 6) if rows_total else 0.0, "tokens": total("tokens"),
           "digest": facts_digest(union)}
    held = [d["held_out"] for _, d, _ in doses if d.get("held_out") is not None]
    if held:
        out["held_out"] = max(held)
    if len(doses) > 1:
        out["stages"] = {name: dose for name, dose, _ in doses}
    return out


def dose_line(dose: dict) -> str:
    """One line for the console: the dose of a run (over --repeats: the means)."""
    def count(value) -> str:
        return f"{value:,.0f}"

    parts = [f"{count(dose['distinct'])} distinct {dose.get('unit', 'facts')}"]
    if dose.get("available"):
        parts[0] += f" of {count(dose['available'])} ({dose['coverage']:.0%})"
    parts.append(f"{count(dose['seen'])} seen")
    parts.append(f"{dose['epochs']:.3g} epochs of its rows")
    if dose.get("tokens"):
        parts.append(f"{count(dose['tokens'])} tokens")
    if dose.get("held_out") is not None:
        parts.append(f"{count(dose['held_out'])} held out")
    digest = f" (digest {dose['digest']})" if dose.get("digest") else ""
    return "knowledge dose: " + ", ".join(parts) + digest
