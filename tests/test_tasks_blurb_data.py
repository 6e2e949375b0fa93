"""`kinject data list|prepare|download`: catalogue status, option pass-through, atomic writes, checksums."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from helpers import run_kinject as kinject
from kinject.cli.main import main
from kinject.tasking.datasets import DatasetInfo, register_dataset


def test_list_shows_present_with_sizes_and_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    folder = tmp_path / "gad"
    folder.mkdir()
    for split, n in (("train", 3), ("dev", 1), ("test", 2)):
        rows = "".join(f"{i}\t@GENE$ and @DISEASE$\t{i % 2}\n" for i in range(n))
        (folder / f"{split}.tsv").write_text("index\tsentence\tlabel\n" + rows)
    assert kinject("data", "list", "--data-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    gad = next(line for line in out.splitlines() if line.startswith("│ gad"))
    assert "present" in gad and "train 3" in gad and "test 2" in gad
    ncbi = next(line for line in out.splitlines() if line.startswith("│ ncbi-disease"))
    assert "missing" in ncbi


def _prepare(data_dir: Path, out: Path, scale: str = "1", fail: bool = False) -> dict:
    rows = int(scale)
    (out / "train.jsonl").write_text("{}\n" * rows)
    if fail:
        raise ValueError("converter failed half-way")
    (out / "test.jsonl").write_text("{}\n")
    return {"train": rows}


register_dataset(DatasetInfo(name="toyprep", folder="toy", splits={"train": "prepared/train.jsonl",
                                                                  "test": "prepared/test.jsonl"},
                             prepare=_prepare))


def test_prepare_passes_options_and_writes_to_output(tmp_path, capsys):
    source, output = tmp_path / "src", tmp_path / "out"
    source.mkdir()
    assert kinject("data", "prepare", "toyprep", "--data-dir", str(source), "--output", str(output),
                   "--scale", "4") == 0
    assert (output / "toy" / "prepared" / "train.jsonl").read_text().count("\n") == 4
    assert not list((output / "toy").glob(".*"))  # no temp folder left behind
    assert kinject("data", "prepare", "toyprep", "--data-dir", str(source), "--output", str(output),
                   "--nope", "1") == 2
    assert "unknown option --nope" in capsys.readouterr().err


def test_prepare_failure_leaves_previous_output_untouched(tmp_path):
    output = tmp_path / "out"
    assert kinject("data", "prepare", "toyprep", "--output", str(output), "--data-dir", str(tmp_path)) == 0
    before = (output / "toy" / "prepared" / "train.jsonl").read_text()
    with pytest.raises(ValueError):
        main(["data", "prepare", "toyprep", "--output", str(output), "--data-dir", str(tmp_path), "--scale", "9",
              "--fail"])
    assert (output / "toy" / "prepared" / "train.jsonl").read_text() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_prepare_into_read_only_dir_says_use_output(tmp_path, capsys):
    tmp_path.chmod(0o555)
    try:
        assert kinject("data", "prepare", "toyprep", "--data-dir", str(tmp_path)) == 2
    finally:
        tmp_path.chmod(0o755)
    assert "--output" in capsys.readouterr().err


def test_download_verifies_sha256_and_writes_nothing_on_mismatch(tmp_path, capsys):
    payload = tmp_path / "payload.tsv"
    payload.write_text("pair_id\tsent1\tsent2\tscore\np1\ta\tb\t1\n")
    good = hashlib.sha256(payload.read_bytes()).hexdigest()
    splits = {"train": "payload.tsv"}
    register_dataset(DatasetInfo(name="toybad", folder="toybad", splits=splits, url=payload.as_uri(),
                                 sha256="0" * 64))
    register_dataset(DatasetInfo(name="toygood", folder="toygood", splits=splits,
                                 url=payload.parent.as_uri() + "/{file}", file_sha256={"payload.tsv": good}))
    out = tmp_path / "data"
    assert kinject("data", "download", "toybad", "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and len(err.strip().splitlines()) == 1
    assert not (out / "toybad").exists() and not [p for p in out.iterdir() if p.name.startswith(".")]
    assert kinject("data", "download", "toygood", "--output", str(out)) == 0
    assert (out / "toygood" / "payload.tsv").read_bytes() == payload.read_bytes()
    assert kinject("data", "download", "toygood", "--output", str(out)) == 2  # exists: needs --force
    assert kinject("data", "download", "toygood", "--output", str(out), "--force") == 0
