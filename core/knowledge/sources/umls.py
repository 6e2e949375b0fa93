"""A licensed UMLS Metathesaurus release: MRCONSO.RRF (English preferred names) and MRREL.RRF (relations).

Both files are streamed. MRCONSO is read twice (the concepts of the chosen vocabularies, then their
preferred English names), so memory holds only the names of those concepts, never the files.
RRF rows are ``|``-separated with a trailing ``|``. In MRREL, REL/RELA is the relationship of the SECOND
concept to the first, so a row (CUI1, REL, CUI2, RELA) becomes the triple (name(CUI2), RELA, name(CUI1)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from pydantic import Field

from kinject.api import DataMissingError, Environment, Triple
from kinject.knowledge.sources.filters import BadRows, FilterFields
from kinject.knowledge.sources.readers import iter_text_lines
from kinject.knowledge.sources.triples import TriplesSourceBase
from kinject.api import FILE_PATH

# column positions (UMLS Reference Manual, "Concept Names and Sources (File = MRCONSO.RRF)" / MRREL.RRF)
CONSO = {"CUI": 0, "LAT": 1, "TS": 2, "STT": 4, "ISPREF": 6, "SAB": 11, "STR": 14, "SUPPRESS": 16}
CONSO_COLUMNS = 18
REL = {"CUI1": 0, "REL": 3, "CUI2": 4, "RELA": 7, "SAB": 10, "SUPPRESS": 14}
REL_COLUMNS = 16


def _rrf(path: Path, bad: BadRows, columns: int) -> Iterator[tuple[int, list[str]]]:
    for number, line in iter_text_lines(path, bad):
        row = line.split("|")
        if row and row[-1] == "":
            row.pop()
        if len(row) < columns:
            bad(f"expected {columns} '|'-separated fields, found {len(row)}", path, number)
            continue
        yield number, row


class UmlsSource(TriplesSourceBase):
    """UMLS Metathesaurus relations (MRREL) named by English preferred names (MRCONSO), by vocabulary."""

    class Config(FilterFields):
        path: str = Field(..., description="Folder holding MRCONSO.RRF and MRREL.RRF (a release's META/ folder).",
                          json_schema_extra=FILE_PATH)
        sabs: list[str] = Field(["SNOMEDCT_US"], description="Source vocabularies kept (MRREL.SAB; concepts "
                                "need an atom from one of them). Empty list: all.")
        relations: list[str] | None = Field(None, description="Keep only these RELA (or REL when RELA is empty).")
        use_rela: bool = Field(True, description="Name relations by RELA (e.g. has_finding_site), falling back "
                               "to REL (PAR, CHD, RO, ...); False: always REL.")
        language: str = Field("ENG", description="MRCONSO.LAT of the names used.")
        include_suppressed: bool = Field(False, description="Keep suppressible rows (SUPPRESS O, E, Y).")

    def _file(self, name: str, env: Environment) -> Path:
        root = Path(self.config.path).expanduser()
        for candidate in (root / name, root / "META" / name, root / f"{name}.gz"):
            if candidate.exists():
                return candidate
        raise DataMissingError(f"UMLS: no {name} in {root} (point path= at a Metathesaurus release's META "
                               "folder; UMLS needs a licence from https://uts.nlm.nih.gov)")

    def input_files(self, env: Environment) -> list[Path]:
        return [self._file("MRCONSO.RRF", env), self._file("MRREL.RRF", env)]

    def check(self, env: Environment) -> None:
        self.input_files(env)

    def _ok(self, row: list[str], sab_col: int, sup_col: int) -> bool:
        sabs = self.config.sabs
        return (not sabs or row[sab_col] in sabs) and (self.config.include_suppressed
                                                       or row[sup_col] not in ("O", "E", "Y"))

    def names(self, env: Environment, bad: BadRows) -> dict[str, str]:
        """CUI -> preferred name in ``language`` for concepts with an atom in ``sabs``."""
        conso = self._file("MRCONSO.RRF", env)
        wanted = None
        if self.config.sabs:
            wanted = {row[CONSO["CUI"]] for _, row in _rrf(conso, bad, CONSO_COLUMNS)
                      if self._ok(row, CONSO["SAB"], CONSO["SUPPRESS"])}
        names: dict[str, tuple[int, str]] = {}
        for _, row in _rrf(conso, bad, CONSO_COLUMNS):
            cui = row[CONSO["CUI"]]
            if row[CONSO["LAT"]] != self.config.language or (wanted is not None and cui not in wanted):
                continue
            # rank: UMLS preferred (TS=P, STT=PF, ISPREF=Y) first, then any preferred-in-source atom
            rank = (row[CONSO["TS"]] != "P") + (row[CONSO["STT"]] != "PF") + (row[CONSO["ISPREF"]] != "Y")
            if cui not in names or rank < names[cui][0]:
                names[cui] = (rank, row[CONSO["STR"]])
        return {cui: name for cui, (_, name) in names.items()}

    def raw_triples(self, env: Environment, bad: BadRows) -> Iterator[Triple]:
        names = self.names(env, bad)
        self.unnamed = 0
        keep = set(self.config.relations) if self.config.relations is not None else None
        for _, row in _rrf(self._file("MRREL.RRF", env), bad, REL_COLUMNS):
            if not self._ok(row, REL["SAB"], REL["SUPPRESS"]):
                continue
            relation = (row[REL["RELA"]] if self.config.use_rela else "") or row[REL["REL"]]
            if keep is not None and relation not in keep:
                continue
            first, second = names.get(row[REL["CUI1"]]), names.get(row[REL["CUI2"]])
            if first is None or second is None:
                self.unnamed += 1  # a concept without a name in the chosen language / vocabularies
                continue
            yield Triple(second, relation, first)
