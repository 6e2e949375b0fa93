"""Units that mean something (#40): a CoNLL file without -DOCSTART- markers makes each sentence a unit (not the whole
split one document), the data line says so, and dev selection names the unit and the count."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kinject.api import build_spec, prepare

WORDS = [("Familial", "O"), ("adenomatous", "B-Disease"), ("polyposis", "I-Disease"), (".", "O")]


def write_ner(folder: Path, sentences: int, per_document: int | None) -> Path:
    """train/devel/test.tsv with ``sentences`` sentences each; a -DOCSTART- line every ``per_document`` sentences
    (None: no markers)."""
    folder.mkdir(parents=True, exist_ok=True)
    blocks = []
    for i in range(sentences):
        if per_document and i % per_document == 0:
            blocks.append(f"-DOCSTART- {i // per_document}")  # numbered: ids may repeat in real files
        blocks.append("\n".join(f"{w}\t{t}" for w, t in WORDS))
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        (folder / name).write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return folder


def prepared(data: Path, cache: Path):
    return prepare(build_spec({"model": {"name": "tiny", "max_length": 16}, "strategy": {"name": "finetune"},
                               "task": {"name": "ncbi-disease"}, "data_dir": str(data), "cache_dir": str(cache),
                               "hooks": {"knowledge-probe": {"enabled": False}}}))


def test_a_file_without_document_markers_counts_sentences(tmp_path, tiny_model, caplog):
    write_ner(tmp_path / "data" / "ncbi_disease", 40, None)
    with caplog.at_level(logging.INFO, logger="kinject"):
        run = prepared(tmp_path / "data", tmp_path / "cache")
    dev = run.task.examples("dev", run.env)
    assert run.task.units(dev) == (40, "sentence")
    assert run.spec.training.selection == "best"
    assert run.defaults["training.selection"] == "best: checkpoints are ranked on the dev split's 40 sentences"
    assert "no -DOCSTART- document markers in train.tsv, devel.tsv, test.tsv" in run.task.describe_data(run.env)
    assert "units: sentences" in run.task.describe_data(run.env)


def test_a_file_with_document_markers_counts_documents(tmp_path, tiny_model):
    write_ner(tmp_path / "data" / "ncbi_disease", 40, 10)  # 4 documents of 10 sentences
    run = prepared(tmp_path / "data", tmp_path / "cache")
    dev = run.task.examples("dev", run.env)
    assert run.task.units(dev) == (4, "document")
    assert len({ex["group"] for ex in dev}) == 4
    assert "DOCSTART" not in run.task.describe_data(run.env)
    assert run.spec.training.selection == "last"  # 4 documents cannot rank checkpoints
    why = run.defaults["training.selection"]
    assert "4 documents" in why and "40 examples" in why and "fewer than 32 units" in why


@pytest.mark.parametrize("per_document", [None, 10])
def test_the_user_setting_wins_over_the_rule(tmp_path, tiny_model, per_document):
    write_ner(tmp_path / "data" / "ncbi_disease", 12, per_document)
    run = prepare(build_spec({"model": {"name": "tiny", "max_length": 16}, "strategy": {"name": "finetune"},
                              "task": {"name": "ncbi-disease"}, "data_dir": str(tmp_path / "data"),
                              "cache_dir": str(tmp_path / "cache"), "training": {"selection": "best"},
                              "hooks": {"knowledge-probe": {"enabled": False}}}))
    assert run.spec.training.selection == "best" and "training.selection" not in run.defaults
