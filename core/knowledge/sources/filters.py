"""Streaming triple filters shared by every triples source (each filter is a config field).

Frequency filters (``min_relation_count``, ``top_relations``, ``drop_inverse``) need relation counts:
they make a counting pass over the source first and then a second, filtering pass; the file is never
held in memory (only the relation counter, which is small).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Iterator, Literal

from pydantic import Field, field_validator

from kinject.api import DataError, PluginConfig, Triple


class FilterFields(PluginConfig):
    """Filters applied while streaming triples (inherited by every triples source's Config)."""

    keep_relations: list[str] | None = Field(None, description="Keep only these relations (None: all).")
    min_relation_count: int = Field(0, ge=0, description="Keep relations with MORE than N triples "
                                    "(KIMERA kept sub-relations with >10000); needs a counting pass.")
    drop_inverse: bool = Field(False, description="Drop the less frequent of two mutually inverse relations "
                               "(has_X / X_of, X / inverse_X, plus inverse_pairs), as MoP's S20Rel.")
    inverse_pairs: list[list[str]] = Field(default_factory=list,
                                           description="Extra [relation, inverse] pairs for drop_inverse.")
    top_relations: int | None = Field(None, ge=1, description="Keep the N most frequent relations "
                                      "(after drop_inverse); needs a counting pass.")
    dedupe: bool = Field(False, description="Drop repeated (head, relation, tail) triples "
                         "(keeps a 64-bit hash per unique triple in memory).")
    max_node_tokens: int | None = Field(None, ge=1, description="Cap entity text at N whitespace tokens "
                                        "(KIMERA: 100; subword caps are in KGDataConfig).")
    max_relation_tokens: int | None = Field(None, ge=1, description="Cap relation text at N whitespace "
                                            "tokens (KIMERA: 10).")
    sample: float | None = Field(None, gt=0, le=1, description="Keep each triple with this probability.")
    max_triples: int | None = Field(None, ge=1, description="Stop after N triples (after other filters).")
    seed: int = Field(0, description="Seed for sample.")
    on_bad_rows: Literal["error", "skip"] = Field("error", description="Malformed row: 'error' (DataError "
                                                  "naming file:line) or 'skip' (counted, see bad_rows).")

    @field_validator("inverse_pairs")
    @classmethod
    def _pairs(cls, value: list[list[str]]) -> list[list[str]]:
        for pair in value:
            if len(pair) != 2:
                raise ValueError(f"each inverse pair needs exactly 2 relations, got {pair!r}")
        return value

    def filter_fields(self) -> dict:
        return {name: getattr(self, name) for name in FilterFields.model_fields}

    def needs_counts(self) -> bool:
        return bool(self.min_relation_count or self.top_relations or self.drop_inverse)


class BadRows:
    """Policy for malformed rows: raise a DataError naming file:line, or skip and count."""

    def __init__(self, mode: str = "error"):
        self.mode = mode
        self.count = 0
        self.first: str | None = None

    def __call__(self, reason: str, path, line: int | None) -> None:
        if self.mode == "error":
            raise DataError(reason, path, line)
        self.count += 1
        if self.first is None:
            self.first = f"{path}:{line}: {reason}"


def _norm(relation: str) -> str:
    return "_".join(relation.strip().lower().replace("-", " ").split())


def inverse_candidates(relation: str) -> set[str]:
    """Normalised names that denote the inverse of ``relation`` by naming convention."""
    r = _norm(relation)
    out = set()
    if r.startswith("has_"):
        out.add(r[4:] + "_of")
    if r.endswith("_of"):
        out.add("has_" + r[:-3])
    out.add(r[8:] if r.startswith("inverse_") else "inverse_" + r)
    return out


def select_relations(counts: Counter, f: FilterFields) -> set[str]:
    """Apply the relation-level filters to relation counts; returns the relations to keep."""
    kept = {r: c for r, c in counts.items() if (f.keep_relations is None or r in f.keep_relations)
            and c > f.min_relation_count}
    if f.drop_inverse:
        by_norm: dict[str, list[str]] = {}
        for r in kept:
            by_norm.setdefault(_norm(r), []).append(r)
        explicit = {}
        for a, b in f.inverse_pairs:
            explicit.setdefault(_norm(a), set()).add(_norm(b))
            explicit.setdefault(_norm(b), set()).add(_norm(a))
        # most frequent first: it survives, its inverses go
        for r in sorted(kept, key=lambda x: (-kept[x], x)):
            if r not in kept:
                continue
            for inv in inverse_candidates(r) | explicit.get(_norm(r), set()):
                for other in by_norm.get(inv, []):
                    if other != r and other in kept and kept[other] <= kept[r]:
                        del kept[other]
    if f.top_relations is not None:
        kept = dict(sorted(kept.items(), key=lambda kv: (-kv[1], kv[0]))[: f.top_relations])
    return set(kept)


def _cap(text: str, n: int | None) -> str:
    if n is None or text.count(" ") < n:
        return text
    words = text.split()
    return " ".join(words[:n]) if len(words) > n else text


def apply_filters(make_iter: Callable[[], Iterator[Triple]], f: FilterFields) -> Iterator[Triple]:
    """Stream ``make_iter()`` through the filters of ``f`` (a counting pass first when needed)."""
    keep: set[str] | None = None
    if f.needs_counts() or f.keep_relations is not None:
        if f.needs_counts():
            counts: Counter = Counter()
            for triple in make_iter():
                counts[triple.relation] += 1
            keep = select_relations(counts, f)
        else:
            keep = set(f.keep_relations or [])
    rng = random.Random(f.seed)
    seen: set[int] | None = set() if f.dedupe else None
    capping = f.max_node_tokens is not None or f.max_relation_tokens is not None
    emitted = 0
    for triple in make_iter():
        if keep is not None and triple.relation not in keep:
            continue
        if capping:
            triple = Triple(_cap(triple.head, f.max_node_tokens), _cap(triple.relation, f.max_relation_tokens),
                            _cap(triple.tail, f.max_node_tokens), triple.weight)
        if seen is not None:
            key = hash((triple.head, triple.relation, triple.tail))
            if key in seen:
                continue
            seen.add(key)
        if f.sample is not None and rng.random() >= f.sample:
            continue
        yield triple
        emitted += 1
        if f.max_triples is not None and emitted >= f.max_triples:
            return
