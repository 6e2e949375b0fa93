"""The `hpo` source's subgraph around listed terms (`around` + `hops`), as KIMERA's experiment retrains on the
HPO neighbourhood of the evaluated CAPR terms: which triples are kept, the fingerprint, and one-line errors
before any stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinject.errors import DataError, SpecError
from kinject.interfaces import Environment, Triple
from kinject.knowledge.sources.hpo import HpoSource
from kinject.spec import PluginRef
from kinject.spec_reading import validate_plugin_config

# a chain All <- B <- C <- D <- E, a disease on C and one on E, a gene on B, and an isolated term F
OBO = "format-version: 1.2\n" + "".join(
    f"\n[Term]\nid: HP:000000{i}\nname: {name}\n" + (f"is_a: HP:000000{i - 1} ! x\n" if 1 < i < 6 else "")
    for i, name in enumerate(["All", "Bee", "Cee", "Dee", "Eee", "Eff"], start=1))
HPOA = ("#description: test\ndatabase_id\tdisease_name\tqualifier\thpo_id\treference\tevidence\tonset\tfrequency\t"
        "sex\tmodifier\taspect\tbiocuration\n"
        "OMIM:1\tDisease One\t\tHP:0000003\tPMID:1\tPCS\t\t\t\t\tP\tx\n"
        "OMIM:2\tDisease Two\t\tHP:0000005\tPMID:1\tPCS\t\t\t\t\tP\tx\n")
G2P = "ncbi_gene_id\tgene_symbol\thpo_id\thpo_name\tfrequency\tdisease_id\n1\tGENE1\tHP:0000002\tBee\t-\tOMIM:1\n"


@pytest.fixture
def hpo(tmp_path) -> tuple[Path, Environment]:
    folder = tmp_path / "hpo"
    folder.mkdir()
    for name, text in (("hp.obo", OBO), ("phenotype.hpoa", HPOA), ("genes_to_phenotype.txt", G2P)):
        (folder / name).write_text(text)
    return folder, Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache")


def source(folder: Path, terms: str | None, **options) -> HpoSource:
    around = None
    if terms is not None:
        around = folder.parent / "terms.txt"
        around.write_text(terms)
    return HpoSource(data_dir=str(folder), around=str(around) if around else None, **options)


def test_around_keeps_the_triples_within_hops_of_the_listed_terms(hpo):
    folder, env = hpo
    everything = list(HpoSource(data_dir=str(folder)).iter_triples(env))
    assert len(everything) == 7
    one = list(source(folder, "# terms of the test split\nHP:0000003\n\n").iter_triples(env))
    assert one == [Triple("Cee", "is a", "Bee"), Triple("Dee", "is a", "Cee"),
                   Triple("Disease One", "has phenotype", "Cee")]
    two = set(source(folder, "HP:0000003\n", hops=2).iter_triples(env))
    assert two == {Triple("Bee", "is a", "All"), Triple("Cee", "is a", "Bee"), Triple("Dee", "is a", "Cee"),
                   Triple("Eee", "is a", "Dee"), Triple("Disease One", "has phenotype", "Cee"),
                   Triple("GENE1", "associated with", "Bee")}  # not Disease Two: 3 edges from Cee
    assert set(source(folder, "HP:0000003\n", hops=4).iter_triples(env)) == set(everything)
    assert set(source(folder, "HP:0000003\nHP:0000005\n").iter_triples(env)) == set(one) | {
        Triple("Eee", "is a", "Dee"), Triple("Disease Two", "has phenotype", "Eee")}
    capped = list(source(folder, "HP:0000003\n", hops=2, max_triples=2).iter_triples(env))  # the usual cap after
    assert capped == [Triple("Bee", "is a", "All"), Triple("Cee", "is a", "Bee")]
    without_genes = set(source(folder, "HP:0000003\n", hops=2, include=["isa", "disease"]).iter_triples(env))
    assert without_genes == two - {Triple("GENE1", "associated with", "Bee")}


def test_the_listed_terms_are_part_of_the_fingerprint(hpo):
    folder, env = hpo
    plain = HpoSource(data_dir=str(folder)).fingerprint(env)
    c = source(folder, "HP:0000003\n").fingerprint(env)
    assert c != plain and source(folder, "HP:0000003\n", hops=2).fingerprint(env) != c
    assert source(folder, "HP:0000004\n").fingerprint(env) != c  # same path, other content
    assert source(folder, "HP:0000003\n").fingerprint(env) == c


def test_bad_term_lists_fail_in_check_with_one_line_naming_around(hpo):
    folder, env = hpo
    missing = HpoSource(data_dir=str(folder), around=str(folder / "nope.txt"))
    with pytest.raises(SpecError, match="around: .*nope.txt does not exist"):
        missing.check(env)
    with pytest.raises(DataError, match=r"terms.txt:2: around: 'Seizure' is not an HPO term id"):
        source(folder, "HP:0000003\nSeizure\n").check(env)
    with pytest.raises(DataError, match="around: no HPO term id in the file"):
        source(folder, "# nothing\n\n").check(env)
    with pytest.raises(DataError, match="around: none of the 1 listed id.* is a term of .*hp.obo"):
        source(folder, "HP:9999999\n").check(env)
    with pytest.raises(DataError, match="around: no triple kept.*hops=1 of the 1 listed term"):
        source(folder, "HP:0000006\n").check(env)  # Eff has no edge
    with pytest.raises(DataError, match="around: no triple kept"):
        source(folder, "HP:0000004\n", include=["gene"]).check(env)
    source(folder, "HP:0000004\n").check(env)
    with pytest.raises(SpecError, match="sources.0: .*hops: applies only with around"):
        validate_plugin_config(HpoSource, PluginRef(name="hpo", hops=2), "sources.0")


def test_a_kimera_run_on_a_bad_subgraph_fails_before_any_stage(hpo, tmp_path, textcls_dir, tiny_model):
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    folder, _ = hpo
    (tmp_path / "terms.txt").write_text("HP:0000006\n")
    spec = {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "strategy": {"name": "kimera", "variant": "no-mask"},
            "sources": [{"name": "hpo", "data_dir": str(folder), "around": "terms.txt", "hops": 1}],
            "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)}
    with pytest.raises(DataError, match="around: no triple kept"):  # terms.txt found in the data dir
        prepare(build_spec(spec))
    assert not (tmp_path / "cache" / "stages").exists()
    (tmp_path / "terms.txt").write_text("HP:0000003\n")
    run = prepare(build_spec(spec))
    retrain = {s.name: s for s in run.stages}["kimera-retrain"]
    assert retrain.config.source.options["around"] == "terms.txt"
