"""Triples -> dense integer ids, streamed: the one interning step behind KG data builds, partitioning and
``kinject kg stats``. Only the vocabularies grow (with entities and relations, not with rows)."""

from __future__ import annotations

from array import array
from typing import Iterable, Iterator

from kinject.api import Triple


class Vocab:
    """Entity and relation texts -> ids, in order of first appearance."""

    def __init__(self) -> None:
        self.entities: dict[str, int] = {}
        self.relations: dict[str, int] = {}


def intern_triples(triples: Iterable[Triple], vocab: Vocab | None = None, chunk: int = 1_000_000,
                   cap: int | None = None) -> Iterator[tuple[array, array, array, array]]:
    """Chunks of at most ``chunk`` rows: (head, relation, tail ids as int32 arrays, weights as float32).

    The vocabularies grow in ``vocab``; at most ``cap`` triples are read. A chunk's arrays are fresh
    objects, so a consumer may keep them.
    """
    vocab = vocab if vocab is not None else Vocab()
    entities, relations = vocab.entities, vocab.relations
    h, r, t, w = array("i"), array("i"), array("i"), array("f")
    n = 0
    for triple in triples if cap is None or cap > 0 else ():
        h.append(entities.setdefault(triple.head, len(entities)))
        t.append(entities.setdefault(triple.tail, len(entities)))
        r.append(relations.setdefault(triple.relation, len(relations)))
        w.append(triple.weight)
        n += 1
        if len(h) >= chunk:
            yield h, r, t, w
            h, r, t, w = array("i"), array("i"), array("i"), array("f")
        if cap is not None and n >= cap:  # stop before reading a row past the cap
            break
    if len(h):
        yield h, r, t, w
