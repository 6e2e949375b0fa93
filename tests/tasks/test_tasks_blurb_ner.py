"""BLURB NER: tag schemes, sub-token alignment and windows, CoNLL errors through the CLI, real split sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import run_kinject as kinject
from kinject.interfaces import Environment
from kinject.tasks.token import decode, encode, spans, TokenClassificationTask

NER_DATA = {"ncbi-disease": ("ncbi_disease", (5424, 923, 940), 5134), "bc5chem": ("bc5cdr_chem", (4560, 4581, 4797), 5203),
            "bc5disease": ("bc5cdr_disease", (4560, 4581, 4797), 4182), "bc2gm": ("bc2gm", (12574, 2519, 5038), 15197),
            "jnlpba": ("jnlpba", (16807, 1739, 3856), 46750)}


def test_schemes_round_trip_and_io_merges_adjacent_entities():
    tags = ["B-X", "I-X", "O", "I-X", "B-X", "B-Y"]
    assert spans(tags) == [(0, 2, "X"), (3, 4, "X"), (4, 5, "X"), (5, 6, "Y")]
    bio = encode(tags, "BIO")
    assert bio == ["B-X", "I-X", "O", "B-X", "B-X", "B-Y"]
    assert encode(tags, "BIOUL") == ["B-X", "L-X", "O", "U-X", "U-X", "U-Y"]
    assert decode(encode(tags, "BIOUL"), "BIOUL") == bio
    assert decode(encode(tags, "BIO"), "BIO") == bio
    assert decode(encode(tags, "IO"), "IO") == ["B-X", "I-X", "O", "B-X", "I-X", "B-Y"]  # IO cannot split X X


def test_decode_malformed_predictions_by_conlleval_rules():
    # seqeval's chunking: an L-/I- that cannot continue an open entity of its type opens one; L closes
    assert decode(["L-X", "I-X", "U-Y", "I-Y", "L-Y", "O", "I-X"], "BIOUL") == [
        "B-X", "B-X", "B-Y", "B-Y", "I-Y", "O", "B-X"]
    assert decode(["I-X", "B-X", "I-Y", "O"], "BIO") == ["B-X", "B-X", "B-Y", "O"]
    assert decode(["I-X", "X", "B-"], "BIO") == ["B-X", "O", "O"]  # tags outside the scheme are O


def test_windows_cover_every_word():
    assert TokenClassificationTask.windows([3, 3, 3], 6) == [(0, 2), (2, 3)]
    assert TokenClassificationTask.windows([10, 1], 4) == [(0, 1), (1, 2)]
    assert TokenClassificationTask.windows([], 4) == [(0, 0)]


def write_conll(folder: Path, sentences: list[list[tuple[str, str]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n"
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


SENTENCES = [[("Familial", "O"), ("adenomatous", "B-Disease"), ("polyposis", "I-Disease"), ("is", "O"),
              ("a", "O"), ("cancer", "B-Disease"), ("syndrome", "O"), (".", "O")],
             [("No", "O"), ("disease", "O"), ("here", "O"), (".", "O")]] * 3


@pytest.mark.parametrize("scheme", ["BIO", "IO", "BIOUL"])
def test_first_subtoken_labels_and_windows_map_back_to_every_word(tmp_path, tiny_model, scheme):
    from kinject.api import load_tokenizer
    from kinject.registry import registry

    write_conll(tmp_path / "data" / "ncbi_disease", SENTENCES)
    env = Environment(tmp_path / "data", tmp_path / "cache")
    task = registry("tasks").get("ncbi-disease")(scheme=scheme)
    task.check(env)
    tokenizer = load_tokenizer(tiny_model)
    examples = task.examples("test", env)
    features = task.featurize(tokenizer, examples, 16, env)  # char-level tokenizer: forces several windows
    assert len(features) > len(examples)
    for feat in features:
        labelled = [i for i, x in enumerate(feat["labels"]) if x != -100]
        assert labelled == [p for p in feat["word_positions"] if p >= 0]
        assert len(feat["input_ids"]) <= 16
    covered = {(f["example_index"], f["word_start"] + w) for f in features for w, p in enumerate(f["word_positions"])
               if p >= 0}
    assert covered == {(i, w) for i, ex in enumerate(examples) for w in range(len(ex["words"]))}
    # "perfect" logits built from the training labels decode back to the gold entities
    width = max(len(f["input_ids"]) for f in features)
    logits = np.full((len(features), width, len(task.labels(env))), -100.0)
    for i, feat in enumerate(features):
        for pos, label in enumerate(feat["labels"]):
            logits[i, pos, max(label, 0)] = 1.0
    metrics = task.score("test", examples, features, logits, env)
    assert metrics["entity_f1"] == 1.0
    # a model that predicts O everywhere finds nothing
    assert task.score("test", examples, features, np.zeros_like(logits), env)["entity_f1"] == 0.0


BAD = {
    "columns": ("word\tB-Disease\textra\n", ":1", "column"),
    "tag": ("word\tO\nother\tX-Disease\n", ":2", "unknown tag"),
    "type": ("word\tB-Gene\n", ":1", "unknown entity type"),
    "empty": ("\n\n", ":", "empty file"),
    "utf8": (b"ok\tO\n\xff\xfe\tO\n", ":2", "invalid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_conll_is_one_line_error_with_file_and_line(tmp_path, capsys, cache_dir, case):
    content, where, what = BAD[case]
    folder = write_conll(tmp_path / "bad" / "ncbi_disease", SENTENCES)
    path = folder / "train.tsv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "run"
    code = kinject("run", "finetune", "--task", "ncbi-disease", "--model", "tiny", "--data-dir",
                   str(tmp_path / "bad"), "-o", str(out))
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and what in err and f"{path}{where}" in err.replace("\n", "")
    assert not out.exists()


def test_missing_dataset_says_where_and_how(tmp_path, capsys, cache_dir):
    code = kinject("run", "finetune", "--task", "bc2gm", "--model", "tiny", "--data-dir", str(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and str(tmp_path / "bc2gm" / "train.tsv") in err and "kinject data download bc2gm" in err


@pytest.mark.slow
def test_tiny_end_to_end_on_a_fixture(tmp_path, tiny_model):
    write_conll(tmp_path / "data" / "ncbi_disease", SENTENCES)
    out = tmp_path / "run"
    assert kinject("run", "finetune", "--task", "ncbi-disease", "--model", "tiny", "--data-dir",
                   str(tmp_path / "data"), "--set", "training.epochs=1", "--set", "model.max_length=24",
                   "-o", str(out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["test"]) == {"entity_f1", "entity_precision", "entity_recall"}
    assert 0.0 <= metrics["test"]["entity_f1"] <= 1.0


@pytest.mark.data
@pytest.mark.parametrize("name", sorted(NER_DATA))
def test_real_split_sizes_match_provenance(data_dir, name):
    from kinject.registry import registry

    folder, sizes, mentions = NER_DATA[name]
    task = registry("tasks").get(name)()
    if not (data_dir / folder).is_dir():
        pytest.skip(f"{folder} not in {data_dir}")
    assert task.info.count(data_dir / folder) == dict(zip(("train", "dev", "test"), sizes))
    env = Environment(data_dir, data_dir)
    train = task.examples("train", env)
    assert sum(t.startswith("B-") for ex in train for t in ex["tags"]) == mentions
    assert len(task.examples("dev", Environment(data_dir, data_dir, limit=7))) == 7
