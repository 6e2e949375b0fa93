"""JSONL task readers: a null or non-string text/label is a DataError naming file:line, never accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinject.errors import DataError
from kinject.interfaces import Environment
from kinject.tasks import text_field
from kinject.registry import registry
from kinject.tasks.retrieval import read_queries


def write_rows(folder: Path, rows: list[dict], bad: dict | None = None) -> Path:
    """train/dev/test.jsonl holding ``rows``; dev gets ``bad`` as its third line."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        lines = [json.dumps(r) for r in rows]
        if split == "dev" and bad is not None:
            lines.insert(2, json.dumps(bad))
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_text_field_accepts_strings_and_integers_only():
    assert text_field({"a": "x"}, "a", "f", 1) == "x" and text_field({"a": 3}, "a", "f", 1) == "3"
    for value, what in ((None, "must be a string, got null"), (True, "must be a string, got true"),
                        ([1], "must be a string, got \\[1\\]"),
                        ("  ", "is empty")):
        with pytest.raises(DataError, match=f"f:7: field 'a' {what}"):
            text_field({"a": value}, "a", "f", 7)
    with pytest.raises(DataError, match="f:2: missing field 'b'"):
        text_field({}, "b", "f", 2)


@pytest.mark.parametrize("bad,message", [
    ({"text": None, "label": "x"}, "field 'text' must be a string, got null"),
    ({"text": 12.5, "label": "x"}, "field 'text' must be a string, got 12.5"),
    ({"text": "fine", "label": None}, "field 'label' must be a string, got null"),
    ({"label": "x"}, "missing field 'text'"),
])
def test_textcls_rejects_null_or_non_string_fields(tmp_path, bad, message):
    folder = write_rows(tmp_path / "t", [{"text": "a b", "label": "x"}, {"text": "c d", "label": 1}], bad)
    task = registry("tasks").get("textcls")(path=str(folder))
    env = Environment(tmp_path, tmp_path)
    assert [ex["label"] for ex in task.examples("train", env)] == ["x", "1"]  # JSON integers are fine
    with pytest.raises(DataError) as err:
        task.examples("dev", env)
    assert str(err.value) == f"{folder / 'dev.jsonl'}:3: {message}"


def test_textcls_multi_label_needs_strings(tmp_path):
    folder = write_rows(tmp_path / "m", [{"text": "a", "label": ["x", "y"]}, {"text": "b", "label": "x,z"}],
                        {"text": "c", "label": [None]})
    task = registry("tasks").get("textcls")(path=str(folder), multi_label=True)
    env = Environment(tmp_path, tmp_path)
    assert [ex["label"] for ex in task.examples("train", env)] == [["x", "y"], ["x", "z"]]
    with pytest.raises(DataError, match=r"dev.jsonl:3: field 'label' must be a list of strings"):
        task.examples("dev", env)


@pytest.mark.parametrize("query,candidate,message", [
    (None, "t", "field 'query' must be a string, got null"),
    ("q", None, "candidate 0: 'text' must be a non-empty string, got None"),
    ("q", 5, "candidate 0: 'text' must be a non-empty string, got 5"),
])
def test_capr_jsonl_rejects_null_text(tmp_path, query, candidate, message):
    path = tmp_path / "q.jsonl"
    row = {"qid": "a", "query": query, "candidates": [{"pid": "x", "text": candidate, "relevant": True}]}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as err:
        read_queries(path)
    assert str(err.value) == f"{path}:1: {message}"


def test_relation_prepared_jsonl_rejects_null_sentence(tmp_path):
    good = {"id": "1", "label": "false", "sentence": "A binds B.", "spans": [[0, 1, "CHEMICAL"], [8, 9, "GENE"]]}
    folder = write_rows(tmp_path / "prepared", [good], {**good, "sentence": None})
    task = registry("tasks").get("chemprot")(path=str(folder))
    env = Environment(tmp_path, tmp_path)
    assert task.examples("train", env)[0]["text"] == "@CHEMICAL$ binds @GENE$."
    with pytest.raises(DataError, match=r"dev.jsonl:2: field 'sentence' must be a string, got null"):
        task.examples("dev", env)
