"""HPO (embedded), UMLS (RRF rows written here), corpus and teacher-model sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinject.errors import DataError, DataMissingError, KinjectError
from kinject.interfaces import Environment, Triple
from kinject.sources.corpus import CorpusSource
from kinject.sources.hpo import HpoSource, iter_terms, read_terms
from kinject.sources.model import ModelSource
from kinject.sources.umls import UmlsSource


@pytest.fixture
def env(tmp_path) -> Environment:
    return Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache", offline=True)


OBO = """format-version: 1.2

[Term]
id: HP:0000001
name: All

[Term]
id: HP:0000118
name: Phenotypic abnormality
def: "A phenotypic abnormality." [HPO:probinson]
synonym: "Organ abnormality" EXACT []
is_a: HP:0000001 ! All

[Term]
id: HP:0001250
name: Seizure
def: "A \\"seizure\\" is an event." []
synonym: "Seizures" EXACT []
synonym: "Epileptic seizure" RELATED []
is_a: HP:0000118 ! Phenotypic abnormality

[Term]
id: HP:0009999
name: Old term
is_obsolete: true

[Typedef]
id: part_of
name: part of
"""
HPOA = ("#description: test\ndatabase_id\tdisease_name\tqualifier\thpo_id\treference\tevidence\tonset\tfrequency\t"
        "sex\tmodifier\taspect\tbiocuration\n"
        "OMIM:1\tEpilepsy X\t\tHP:0001250\tPMID:1\tPCS\t\t\t\t\tP\tx\n"
        "OMIM:1\tEpilepsy X\t\tHP:0001250\tPMID:2\tPCS\t\t\t\t\tP\tx\n"
        "ORPHA:2\tSyndrome Y\tNOT\tHP:0001250\tPMID:1\tPCS\t\t\t\t\tP\tx\n"
        "DECIPHER:3\tDel Z\t\tHP:0001250\tPMID:1\tPCS\t\t\t\t\tP\tx\n"
        "ORPHA:4\tSyndrome W\t\tHP:0000118\tPMID:1\tPCS\t\t\t\t\tI\tx\n")
G2P = ("ncbi_gene_id\tgene_symbol\thpo_id\thpo_name\tfrequency\tdisease_id\n"
       "1\tSCN1A\tHP:0001250\tSeizure\t-\tOMIM:1\n1\tSCN1A\tHP:0001250\tSeizure\t-\tOMIM:5\n")


@pytest.fixture
def hpo_dir(tmp_path) -> Path:
    folder = tmp_path / "hpo"
    folder.mkdir()
    (folder / "hp.obo").write_text(OBO)
    (folder / "phenotype.hpoa").write_text(HPOA)
    (folder / "genes_to_phenotype.txt").write_text(G2P)
    return folder


def test_read_terms_fields(hpo_dir):
    terms = {t.id: t for t in read_terms(hpo_dir / "hp.obo")}
    assert set(terms) == {"HP:0000001", "HP:0000118", "HP:0001250"}
    seizure = terms["HP:0001250"]
    assert seizure.name == "Seizure" and seizure.parents == ("HP:0000118",)
    assert seizure.synonyms == ("Seizures", "Epileptic seizure") and seizure.definition == 'A "seizure" is an event.'
    assert len(list(iter_terms(hpo_dir / "hp.obo", include_obsolete=True))) == 4


def test_hpo_source_edges(hpo_dir, env):
    out = list(HpoSource(data_dir=str(hpo_dir)).iter_triples(env))
    assert out == [Triple("Phenotypic abnormality", "is a", "All"), Triple("Seizure", "is a", "Phenotypic abnormality"),
                   Triple("Epilepsy X", "has phenotype", "Seizure"), Triple("SCN1A", "associated with", "Seizure")]
    only = list(HpoSource(data_dir=str(hpo_dir), include=["disease"], databases=["DECIPHER"]).iter_triples(env))
    assert only == [Triple("Del Z", "has phenotype", "Seizure")]


def test_hpo_unknown_term_is_a_bad_row(hpo_dir, env):
    (hpo_dir / "genes_to_phenotype.txt").write_text(G2P + "2\tXYZ\tHP:7777777\tNope\t-\tOMIM:1\n")
    with pytest.raises(DataError, match=r"genes_to_phenotype.txt:4: unknown HPO id"):
        list(HpoSource(data_dir=str(hpo_dir)).iter_triples(env))


def test_embedded_hpo_terms_offline():
    terms = read_terms()
    assert len(terms) > 15000
    by_id = {t.id: t for t in terms}
    assert by_id["HP:0001250"].name == "Seizure" and "HP:0000118" in {p for t in terms for p in t.parents}
    assert HpoSource().input_files(None)[0].name == "hp.obo"


# -- UMLS ----------------------------------------------------------------------------------------- #
def conso(cui, lat, ts, stt, ispref, sab, text, sup="N"):
    # CUI|LAT|TS|LUI|STT|SUI|ISPREF|AUI|SAUI|SCUI|SDUI|SAB|TTY|CODE|STR|SRL|SUPPRESS|CVF|
    return "|".join([cui, lat, ts, "L1", stt, "S1", ispref, "A1", "", "", "", sab, "PT", "c", text, "0", sup, ""]) + "|"


def mrrel(cui1, rel, cui2, rela, sab, sup="N"):
    # CUI1|AUI1|STYPE1|REL|CUI2|AUI2|STYPE2|RELA|RUI|SRUI|SAB|SL|RG|DIR|SUPPRESS|CVF|
    return "|".join([cui1, "", "CUI", rel, cui2, "", "CUI", rela, "R1", "", sab, sab, "", "", sup, ""]) + "|"


@pytest.fixture
def meta(tmp_path) -> Path:
    folder = tmp_path / "2024AA" / "META"
    folder.mkdir(parents=True)
    (folder / "MRCONSO.RRF").write_text("\n".join([
        conso("C1", "ENG", "S", "VO", "N", "SNOMEDCT_US", "Flu (variant)"),
        conso("C1", "ENG", "P", "PF", "Y", "MSH", "Influenza"),
        conso("C1", "FRE", "P", "PF", "Y", "MSHFRE", "Grippe"),
        conso("C2", "ENG", "P", "PF", "Y", "SNOMEDCT_US", "Influenza virus"),
        conso("C3", "ENG", "P", "PF", "Y", "SNOMEDCT_US", "Lung structure"),
        conso("C4", "ENG", "P", "PF", "Y", "MSH", "Only in MeSH"),
    ]) + "\n")
    (folder / "MRREL.RRF").write_text("\n".join([
        mrrel("C2", "RO", "C1", "has_causative_agent", "SNOMEDCT_US"),
        mrrel("C1", "RO", "C2", "causative_agent_of", "SNOMEDCT_US"),
        mrrel("C3", "RO", "C1", "has_finding_site", "SNOMEDCT_US"),
        mrrel("C1", "PAR", "C3", "", "SNOMEDCT_US"),
        mrrel("C4", "RO", "C1", "has_x", "MSH"),
        mrrel("C3", "RO", "C1", "suppressed_rel", "SNOMEDCT_US", sup="O"),
    ]) + "\n")
    return folder


def test_umls_names_direction_and_vocabulary(meta, env):
    src = UmlsSource(path=str(meta.parent))
    assert src.names(env, src.bad_rows) == {"C1": "Influenza", "C2": "Influenza virus", "C3": "Lung structure"}
    out = list(src.iter_triples(env))
    assert Triple("Influenza", "has_causative_agent", "Influenza virus") in out  # REL is CUI2's relation to CUI1
    assert Triple("Lung structure", "PAR", "Influenza") in out
    assert len(out) == 4 and all(t.relation not in ("has_x", "suppressed_rel") for t in out)
    assert {t.relation for t in UmlsSource(path=str(meta), use_rela=False).iter_triples(env)} == {"RO", "PAR"}


def test_umls_filters_and_bad_rows(meta, env):
    kept = list(UmlsSource(path=str(meta), drop_inverse=True, relations=["has_causative_agent",
                                                                        "causative_agent_of"]).iter_triples(env))
    assert len(kept) == 1
    with open(meta / "MRREL.RRF", "a") as handle:
        handle.write("C1|A|CUI|RO\n")
    with pytest.raises(DataError, match=r"MRREL.RRF:7: expected 16"):
        list(UmlsSource(path=str(meta)).iter_triples(env))
    with pytest.raises(DataMissingError, match="MRCONSO.RRF"):
        UmlsSource(path=str(meta.parent.parent)).check(env)


# -- corpus and model --------------------------------------------------------------------------------- #
def test_corpus_files_filters_and_bad_rows(tmp_path, env):
    (tmp_path / "a.txt").write_text("first   document about genes\n\nshort\nfirst document about genes\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "a jsonl document about proteins"}) + "\n")
    src = CorpusSource(paths=[str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl")], min_chars=10)
    assert list(src.iter_texts(env)) == ["first document about genes", "a jsonl document about proteins"]
    (tmp_path / "c.jsonl").write_text("{broken\n")
    with pytest.raises(DataError, match=r"c.jsonl:1: invalid JSON"):
        list(CorpusSource(paths=[str(tmp_path / "c.jsonl")]).iter_texts(env))
    with pytest.raises(ValueError, match="unknown dataset"):
        CorpusSource(datasets=["nope"])


def test_in_domain_corpus_excludes_test_splits(data_dir):
    env = Environment(data_dir=data_dir, cache_dir=data_dir)
    texts = set(CorpusSource(datasets=["pubmedqa", "bioasq_yesno"]).iter_texts(env))
    test_pmids = json.loads((data_dir / "pubmedqa" / "test_ground_truth.json").read_text())
    items = json.loads((data_dir / "pubmedqa" / "ori_pqal.json").read_text())
    pmid = next(iter(test_pmids))
    assert " ".join(" ".join(items[pmid]["CONTEXTS"]).split()) not in texts
    train_pmid = next(p for p in items if p not in test_pmids)
    assert " ".join(items[train_pmid]["LONG_ANSWER"].split()) in texts
    test_bioasq = (data_dir / "bioasq_yesno" / "test.tsv").read_text().splitlines()[0].split("\t")[2]
    assert " ".join(test_bioasq.split()) not in texts


def test_model_source(tiny_model, env, cache_dir):
    env = Environment(data_dir=env.data_dir, cache_dir=cache_dir, offline=True)
    src = ModelSource(name=tiny_model)
    src.check(env)
    assert Path(src.model_path(env), "config.json").exists() and src.fingerprint(env) == src.fingerprint(env)
    with pytest.raises(KinjectError):
        ModelSource(name="./no/such/dir").check(env)
    with pytest.raises(DataMissingError, match="not in the local Hugging Face cache"):
        ModelSource(name="some-org/not-downloaded-model").check(env)
