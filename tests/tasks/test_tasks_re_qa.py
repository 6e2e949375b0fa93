"""Relation extraction (ChemProt, DDI) and QA (PubMedQA, BioASQ): converters, tasks, scoring, bad input,
and real-data checks of the counts (skipped without the data)."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kinject.errors import DataError
from kinject.interfaces import Environment
from kinject.registry import registry
from kinject.tasks import prepare_chemprot, prepare_ddi, prepare_pubmedqa
from kinject.tasks.prepare_util import render, split_sentences

TITLE = "Aspirin inhibits COX-1 in mice."
ABSTRACT = "We tested e.g. ibuprofen on COX-2 and PTGS2. Caffeine binds ADORA2A."


def write_chemprot(data_dir: Path, relations: list[str] | None = None) -> Path:
    folder = data_dir / "chemprot" / "biocreative6_original"
    folder.mkdir(parents=True)
    text = f"{TITLE}\n{ABSTRACT}"
    mentions = [("T1", "CHEMICAL", "Aspirin"), ("T2", "GENE-Y", "COX-1"), ("T3", "CHEMICAL", "ibuprofen"),
                ("T4", "GENE-Y", "COX-2"), ("T5", "GENE-N", "PTGS2"), ("T6", "CHEMICAL", "Caffeine"),
                ("T7", "GENE-Y", "ADORA2A")]
    entities = [f"1\t{t}\t{k}\t{text.index(s)}\t{text.index(s) + len(s)}\t{s}" for t, k, s in mentions]
    relations = relations if relations is not None else [
        "1\tCPR:4\tY \tINHIBITOR\tArg1:T1\tArg2:T2", "1\tCPR:2\tN \tDIRECT-REGULATOR\tArg1:T3\tArg2:T4",
        "1\tCPR:9\tY \tSUBSTRATE\tArg1:T6\tArg2:T7"]
    for split, stem in (("train", "chemprot_training"), ("dev", "chemprot_development"), ("test", "chemprot_test")):
        gs = "_gs" if split == "test" else ""
        for kind, lines in (("abstracts", [f"1\t{TITLE}\t{ABSTRACT}"]), ("entities", entities),
                            ("relations", relations)):
            with gzip.open(folder / f"{stem}_{kind}{gs}.tsv.gz", "wt", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")
    return data_dir


def test_sentence_splitter_and_rendering():
    text = "We saw e.g. X in Fig. 2. Then J. Smith left! (Next) one."
    sentences = [text[s:e] for s, e in split_sentences(text)]
    assert sentences == ["We saw e.g. X in Fig. 2.", "Then J. Smith left!", "(Next) one."]
    assert [text[s:e] for s, e in split_sentences(text, protected=[(20, 27)])][0] == "We saw e.g. X in Fig. 2. Then J. Smith left!"
    assert render("a b c d", [(2, 3, "CHEMICAL"), (6, 7, "GENE")]) == "a @CHEMICAL$ c @GENE$"
    assert render("take ab cd now", [(5, 10, "DRUG"), (8, 10, "DRUG")]) == "take @DRUG-DRUG$ now"
    assert render("a b c", [(4, 5, "X"), (0, 1, "Y")], "markers") == "[E2] a [/E2] b [E1] c [/E1]"


def test_chemprot_pairs_labels_and_task(tmp_path):
    data = write_chemprot(tmp_path / "data")
    rows = prepare_chemprot.build(data)["train"]
    got = {r["id"]: (r["label"], r["text"]) for r in rows}
    # sentence 1: T1 x T2; sentence 2: T3 x {T4, T5}; sentence 3: T6 x T7; never across sentences
    assert set(got) == {"1.T1.T2", "1.T3.T4", "1.T3.T5", "1.T6.T7"}
    assert got["1.T1.T2"] == ("CPR:4", "@CHEMICAL$ inhibits @GENE$ in mice.")
    assert got["1.T3.T4"][0] == "false"  # CPR:2 is not evaluated
    assert got["1.T3.T5"] == ("false", "We tested e.g. @CHEMICAL$ on COX-2 and @GENE$.")
    assert got["1.T6.T7"][0] == "CPR:9"
    env = Environment(data_dir=data, cache_dir=tmp_path / "cache")
    task = registry("tasks").get("chemprot")(entity_style="markers")
    task.check(env)
    assert (tmp_path / "cache" / "prepared" / "chemprot-v1" / "manifest.json").exists()
    ex = {e["id"]: e for e in task.examples("dev", env)}
    assert ex["1.T1.T2"]["text"] == "[E1] Aspirin [/E1] inhibits [E2] COX-1 [/E2] in mice."
    assert task.labels(env) == ["CPR:3", "CPR:4", "CPR:5", "CPR:6", "CPR:9", "false"]
    # micro F1 over the positive classes only: predicting 'false' right earns nothing
    examples = task.examples("test", env)
    labels = task.labels(env)
    onehot = np.array([[10.0 if l == e["label"] else 0.0 for l in labels] for e in examples])
    assert task.score("test", examples, [], onehot, env)["f1_micro"] == pytest.approx(1.0)
    all_false = np.array([[10.0 if l == "false" else 0.0 for l in labels] for _ in examples])
    assert task.score("test", examples, [], all_false, env)["f1_micro"] == 0.0


def test_chemprot_bad_rows_name_file_and_line(tmp_path):
    data = write_chemprot(tmp_path / "data", relations=["1\tCPR:4\tY \tINHIBITOR\tArg1:T1\tArg2:T2",
                                                        "1\tCPR:4\tArg1:T1"])
    with pytest.raises(DataError, match=r"chemprot_training_relations.tsv.gz:2: expected 6 columns, found 3"):
        prepare_chemprot.build(data)


def write_ddi(data_dir: Path) -> Path:
    def doc(doc_id: str, pair_type: str | None) -> str:
        attrs = f'ddi="true" type="{pair_type}"' if pair_type else 'ddi="false"'
        return (f'<?xml version="1.0"?><document id="{doc_id}"><sentence id="{doc_id}.s0" '
                f'text="Warfarin with aspirin raises risk."><entity id="{doc_id}.s0.e0" charOffset="0-7" '
                f'type="drug" text="Warfarin"/><entity id="{doc_id}.s0.e1" charOffset="14-20" type="drug" '
                f'text="aspirin"/><pair id="{doc_id}.s0.p0" e1="{doc_id}.s0.e0" e2="{doc_id}.s0.e1" {attrs}/>'
                '</sentence></document>')
    (data_dir / "ddi").mkdir(parents=True)
    with zipfile.ZipFile(data_dir / prepare_ddi.ORIGINAL, "w") as archive:
        archive.writestr("DDICorpus/Train/DrugBank/a.xml", doc("DDI-DrugBank.d116", "advise"))  # a BLURB dev doc
        archive.writestr("DDICorpus/Train/DrugBank/b.xml", doc("DDI-DrugBank.d1", "effect"))
        archive.writestr("DDICorpus/Train/MedLine/c.xml", doc("DDI-MedLine.d1", None))
        archive.writestr(prepare_ddi.TEST_FOLDER + "DrugBank/d.xml", doc("DDI-DrugBank.d900", "mechanism"))
        archive.writestr("DDICorpus/Test/Test for DrugNER task/DrugBank/e.xml", doc("DDI-DrugBank.d901", "int"))
    return data_dir


def test_ddi_splits_as_blurb(tmp_path):
    splits = prepare_ddi.build(write_ddi(tmp_path / "data"))
    assert [(r["id"], r["label"]) for r in splits["dev"]] == [("DDI-DrugBank.d116.s0.p0", "DDI-advise")]
    assert sorted(r["label"] for r in splits["train"]) == ["DDI-effect", "DDI-false"]
    assert [r["label"] for r in splits["test"]] == ["DDI-mechanism"]  # the DrugNER test folder is not used
    assert splits["test"][0]["text"] == "@DRUG$ with @DRUG$ raises risk."
    blurb = tmp_path / "dev.tsv"
    blurb.write_text("DDI-DrugBank.d116.s0.p0\t@DRUG$ with @DRUG$  raises risk. \tDDI-advise\n")
    assert prepare_ddi.agreement(splits["dev"], blurb) == {"reference": 1, "ours": 1, "shared_ids": 1,
                                                            "same_label": 1, "same_text": 1}


def test_pubmedqa_split_and_bad_label(tmp_path):
    folder = tmp_path / "pubmedqa"
    folder.mkdir()
    items = {str(i): {"QUESTION": f"q{i}?", "CONTEXTS": [f"c{i}a", f"c{i}b"], "final_decision": "yes no maybe".split()[i % 3]}
             for i in range(30)}
    (folder / "ori_pqal.json").write_text(json.dumps(items))
    (folder / "test_ground_truth.json").write_text(json.dumps({str(i): items[str(i)]["final_decision"] for i in range(10)}))
    a, b = prepare_pubmedqa.build(tmp_path, seed=0, dev_size=5), prepare_pubmedqa.build(tmp_path, seed=0, dev_size=5)
    assert a == b and [len(a[s]) for s in ("train", "dev", "test")] == [15, 5, 10]
    assert {r["id"] for r in a["test"]} == {str(i) for i in range(10)}
    assert not ({r["id"] for r in a["train"]} & {r["id"] for r in a["dev"]})
    assert a["dev"] != prepare_pubmedqa.build(tmp_path, seed=1, dev_size=5)["dev"]
    assert a["test"][0]["context"] == "c0a c0b"
    items["20"]["final_decision"] = "perhaps"
    (folder / "ori_pqal.json").write_text(json.dumps(items))
    with pytest.raises(DataError, match="unknown label 'perhaps'"):
        prepare_pubmedqa.build(tmp_path)


def test_bioasq_reader_errors(tmp_path):
    folder = tmp_path / "bioasq_yesno"
    folder.mkdir()
    for split in ("train", "dev", "test"):
        (folder / f"{split}.tsv").write_text("a\tIs it?\tIt is.\tyes\nb\tIs it not?\tNo.\tno\n")
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path)
    task = registry("tasks").get("bioasq")()
    ex = task.examples("train", env)
    assert ex[0]["text"] == "Is it?" and ex[0]["text_pair"] == "It is." and task.head(env).num_labels == 2
    (folder / "dev.tsv").write_text("a\tIs it?\tIt is.\tyes\nb\tIs it?\tmaybe\n")
    with pytest.raises(DataError, match=r"dev.tsv:2: expected 4 columns, found 3"):
        registry("tasks").get("bioasq")().examples("dev", env)
    (folder / "test.tsv").write_text("a\tIs it?\tIt is.\tperhaps\n")
    with pytest.raises(DataError, match=r"test.tsv:1: unknown label 'perhaps'"):
        registry("tasks").get("bioasq")().examples("test", env)


# -- real data (skipped when absent) ----------------------------------------------------------- #
@pytest.mark.data
def test_real_ddi_matches_blurb(data_dir):
    splits = prepare_ddi.build(data_dir)
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [25296, 2496, 5716]
    test = prepare_ddi.agreement(splits["test"], data_dir / "ddi" / "blurb_partial" / "test.tsv")
    assert test["shared_ids"] == test["same_label"] == test["same_text"] == 5716
    dev = prepare_ddi.agreement(splits["dev"], data_dir / "ddi" / "blurb_partial" / "dev.tsv")
    assert dev["shared_ids"] == dev["same_label"] == 2496 and dev["same_text"] >= 2470


@pytest.mark.data
@pytest.mark.slow
def test_real_chemprot_and_pubmedqa_counts(data_dir):
    splits = prepare_chemprot.build(data_dir)
    for split, blurb in (("train", 18035), ("dev", 11268), ("test", 15745)):
        assert abs(len(splits[split]) - blurb) / blurb < 0.04  # BLURB's counts; see docs/tasks.md
    assert sum(r["label"] != "false" for r in splits["train"]) > 0.99 * 4143
    qa = prepare_pubmedqa.build(data_dir)
    assert [len(qa[s]) for s in ("train", "dev", "test")] == [450, 50, 500]
