"""`kinject data list|prepare|download`: catalogue status, option pass-through, atomic writes, checksums."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from helpers import run_kinject as kinject
from kinject.cli.app import main
from kinject.tasks.catalogue import DatasetInfo


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


def register_dataset(info: DatasetInfo) -> None:
    """A dataset reaches the catalogue as a registered task's ``info``, as a third party's would."""
    from kinject.api import registry
    from kinject.tasks.textcls import TextClassificationTask

    registry("tasks").register(f"task-of-{info.name}", type(f"Task_{info.name}", (TextClassificationTask,),
                                                            {"info": info, "__doc__": "A toy task."}))


register_dataset(DatasetInfo(name="toyprep", folder="toy", splits={"train": "prepared/train.jsonl",
                                                                  "test": "prepared/test.jsonl"},
                             prepare=_prepare))


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"│ {name} "))


@pytest.mark.slow
def test_list_shows_raw_releases_and_prepared_relation_sets(tmp_path, capsys, monkeypatch):
    from kinject.tasks.catalogue import dataset, prepared_cache
    from kinject.tasks import prepare_chemprot

    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("KINJECT_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data"
    for path in prepare_chemprot.raw_files(data):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    assert kinject("data", "list", "--data-dir", str(data)) == 0
    out = capsys.readouterr().out
    assert "raw present, prepared on first use" in _row(out, "chemprot")
    assert "missing" in _row(out, "ddi") and "DDICorpus-2013.zip" in _row(out, "ddi")
    cached = prepared_cache(dataset("chemprot"), tmp_path / "cache")  # what the first run writes
    cached.mkdir(parents=True)
    for split, n in (("train", 3), ("dev", 1), ("test", 2)):
        (cached / f"{split}.jsonl").write_text("{}\n" * n)
    (cached / "manifest.json").write_text("{}")
    assert kinject("data", "list", "--data-dir", str(data)) == 0
    row = _row(capsys.readouterr().out, "chemprot")
    assert "prepared" in row and "raw present" not in row and "train 3" in row and "test 2" in row
    shared = data / "ddi" / "prepared"  # `kinject data prepare ddi` output in the data dir
    shared.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (shared / f"{split}.jsonl").write_text("{}\n{}\n")
    assert kinject("data", "list", "--data-dir", str(data)) == 0
    row = _row(capsys.readouterr().out, "ddi")
    assert "prepared" in row and "train 2" in row


def test_list_shows_a_task_plugin_that_fails_to_import(tmp_path, capsys, monkeypatch):
    from helpers import installed

    with installed(monkeypatch, tmp_path / "site", "kinject-broken-task", """
            [kinject.tasks]
            brokentask = broken_task_module:Task
            """, {"broken_task_module": 'raise ImportError("needs a missing thing")\n'}, "tasks"):
        monkeypatch.setenv("COLUMNS", "400")
        assert kinject("data", "list", "--data-dir", str(tmp_path)) == 0
    row = _row(capsys.readouterr().out, "task brokentask")
    assert "broken" in row and "needs a missing thing" in row and "kinject-broken-task" in row
