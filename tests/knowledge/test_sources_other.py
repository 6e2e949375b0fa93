"""HPO (embedded), UMLS (RRF rows written here), corpus and teacher-model sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinject.errors import DataError, DataMissingError, KinjectError
from kinject.interfaces import Environment, Triple
from kinject.knowledge.sources.corpus import CorpusSource
from kinject.knowledge.sources.hpo import HpoSource, iter_terms, read_terms
from kinject.knowledge.sources.model import ModelSource
from kinject.knowledge.sources.umls import UmlsSource


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
    src.check(env)
    assert list(src.iter_texts(env)) == ["first document about genes", "a jsonl document about proteins"]
    assert src.stats["duplicates"] == 1 and src.stats["too_short"] == 1 and src.stats["kept"] == 2
    (tmp_path / "c.jsonl").write_text("{broken\n")
    with pytest.raises(DataError, match=r"c.jsonl:1: invalid JSON"):
        CorpusSource(paths=[str(tmp_path / "c.jsonl")]).check(env)
    (tmp_path / "d.txt").write_bytes(b"a fine first line of text\nbad \xff\xfe bytes here\n")
    with pytest.raises(DataError, match=r"d.txt:2: invalid UTF-8"):
        CorpusSource(paths=[str(tmp_path / "d.txt")]).check(env)  # before any corpus is built
    (tmp_path / "e.txt").write_text("tiny\n\n")
    with pytest.raises(DataError, match="empty corpus"):
        CorpusSource(paths=[str(tmp_path / "e.txt")]).check(env)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        CorpusSource(tasks=["nope"])


def write_split(folder: Path, split: str, texts: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"{split}{i}", "text": text, "label": "ab"[i % 2]}) + "\n")


def test_corpus_reads_tasks_through_their_readers_and_no_test_text_reaches_it(tmp_path, env):
    test = ["The kinase inhibitor reduced tumour growth in mice.", "Lymphoma risk rose with the second dose.",
            "Naloxone reversed the opioid overdose quickly."]
    folder = tmp_path / "cls"
    write_split(folder, "train", [
        "Insulin signalling was impaired in diabetic rats.",  # kept
        "Background text first. The kinase inhibitor reduced tumour growth in mice. More text after it.",
        "lymphoma   RISK rose, with the second dose",  # the test text up to case, spacing and punctuation
        "Insulin signalling was impaired in diabetic rats."])  # a duplicate
    write_split(folder, "dev", ["Cardiomyocyte death followed the infarction."])
    write_split(folder, "test", test)
    other = tmp_path / "other"  # a second task whose test text also contains a sentence of a file text
    write_split(other, "train", ["Clonidine lowered the blood pressure of the patients."])
    write_split(other, "dev", ["Clonidine lowered the blood pressure again."])
    write_split(other, "test", ["Acetyltransferase activity was measured in the liver."])
    (tmp_path / "user.txt").write_text("A user text about hypertension treatment.\n"
                                       "Prefix. Naloxone reversed the opioid overdose quickly! Suffix here.\n"
                                       "Acetyltransferase activity was measured in the liver. Then more.\n")
    src = CorpusSource(paths=[str(tmp_path / "user.txt")], tasks=[{"name": "textcls", "path": str(folder)}],
                       exclude_tasks=[{"name": "textcls", "path": str(other)}])
    src.check(env)
    texts = list(src.iter_texts(env))
    assert texts == ["A user text about hypertension treatment.", "Insulin signalling was impaired in diabetic rats.",
                     "Cardiomyocyte death followed the infarction."]
    assert src.stats["held_out_overlap"] == 4 and src.stats["duplicates"] == 1
    assert src.stats["kept task:textcls/train"] == 1 and src.stats["kept task:textcls/dev"] == 1
    from kinject.knowledge.sources.corpus import signature

    corpus = b"\n".join(signature(t) for t in texts)
    for held_out in test + ["Acetyltransferase activity was measured in the liver."]:
        assert signature(held_out) not in corpus
    # the fingerprint follows the tasks' data files
    before = src.fingerprint(env)
    write_split(folder, "dev", ["Cardiomyocyte death followed the infarction.", "One more dev text here."])
    fresh = CorpusSource(src.config)
    fresh.check(env)
    assert fresh.fingerprint(env) != before


@pytest.mark.data
@pytest.mark.slow
def test_in_domain_corpus_excludes_test_splits(data_dir, tmp_path):
    import random

    from kinject.knowledge.sources.corpus import example_texts, sentence_signatures, signature
    from kinject.registry import registry

    env = Environment(data_dir=data_dir, cache_dir=tmp_path)
    names = ["pubmedqa", "bioasq", "hoc", "ncbi-disease"]
    src = CorpusSource(tasks=names)
    src.check(env)
    texts = list(src.iter_texts(env))
    assert src.stats["kept task:pubmedqa/train"] > 400 and src.stats["kept task:ncbi-disease/dev"] > 800
    corpus = b"\n".join(signature(t) for t in texts)
    sentences = []
    for name in names:  # every test text, read by a fresh instance of the task
        task = registry("tasks").get(name)()
        for example in task.examples("test", env):
            for text in example_texts(example):
                sentences += [s for s in sentence_signatures(text) if len(s) >= 40]
    for sentence in random.Random(0).sample(sentences, 400):
        assert sentence not in corpus


def test_model_source(tiny_model, env, cache_dir):
    env = Environment(data_dir=env.data_dir, cache_dir=cache_dir, offline=True)
    src = ModelSource(name=tiny_model)
    src.check(env)
    assert Path(src.model_path(env), "config.json").exists() and src.fingerprint(env) == src.fingerprint(env)
    with pytest.raises(KinjectError):
        ModelSource(name="./no/such/dir").check(env)
    with pytest.raises(DataMissingError, match="not in the local Hugging Face cache"):
        ModelSource(name="some-org/not-downloaded-model").check(env)
