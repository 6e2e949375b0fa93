"""Reliability: the user's files are never destroyed, the cache cannot be changed from outside, faults of the
disk are one line naming the path, overlong inputs are cut when read, debris of dead processes is removed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_kinject as kinject
from reliability_helpers import Killed, killed_after_checkpoint, stage_dirs, stage_records

pytestmark = pytest.mark.reliability


def args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.epochs=1", "--set", "training.batch_size=8", "-o", str(out), *extra]


def one_line_error(capsys, arguments: list[str]) -> str:
    capsys.readouterr()
    assert kinject(*arguments) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "Traceback" not in err[0], err
    return err[0]


# -- the user's files ----------------------------------------------------------------------------------- #
def test_output_onto_a_folder_that_is_not_a_run_is_refused_and_left_alone(tmp_path, textcls_dir, tiny_model, capsys):
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "chapter1.tex").write_text("precious")
    error = one_line_error(capsys, args(textcls_dir, mine))
    assert str(mine) in error and "not a kinject run folder" in error and "chapter1.tex" in error
    assert (mine / "chapter1.tex").read_text() == "precious" and len(list(mine.iterdir())) == 1
    (tmp_path / "a-file").write_text("x")
    assert "is not a folder" in one_line_error(capsys, args(textcls_dir, tmp_path / "a-file"))


def test_output_that_is_or_holds_the_working_folder_or_the_cache_is_refused(tmp_path, textcls_dir, tiny_model,
                                                                            capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert "is the current folder" in one_line_error(capsys, args(textcls_dir, Path(".")))
    assert "is the current folder" in one_line_error(capsys, args(textcls_dir, tmp_path))
    cache = tmp_path / "elsewhere" / "cache"
    error = one_line_error(capsys, [*args(textcls_dir, tmp_path / "elsewhere"), "--cache-dir", str(cache)])
    assert "holds the stage cache" in error
    assert list(work.iterdir()) == []


def test_a_run_replaces_an_earlier_run_and_a_failed_one_leaves_it_in_place(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "run"
    assert kinject(*args(textcls_dir, out)) == 0
    first = json.loads((out / "run.json").read_text())
    assert (out / ".kinject-run").exists()
    assert kinject(*args(textcls_dir, out, "--seed", "7")) == 0  # an earlier run is replaced
    assert json.loads((out / "run.json").read_text())["seed"] == 7
    assert kinject(*args(textcls_dir, out)) == 0
    before = (out / "run.json").read_text()
    assert [s["key"] for s in json.loads(before)["stages"]] == [s["key"] for s in first["stages"]]
    with killed_after_checkpoint("finetune", after_epoch=0.0), pytest.raises(Killed):  # dies mid-way
        kinject(*args(textcls_dir, out, "--set", "training.learning_rate=1e-3", "--set", "training.save_steps=2"))
    assert (out / "run.json").read_text() == before and (out / "model" / "model.safetensors").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.")]  # nothing half-written beside it


def test_relative_paths_in_a_config_file_are_relative_to_its_folder(tmp_path, textcls_dir, tiny_model, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(textcls_dir, project / "data")
    config = project / "run.yaml"
    config.write_text("task: {name: textcls, path: data}\noutput: runs/first\ntraining: {epochs: 1, batch_size: 8}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert kinject("run", "finetune", "--model", "tiny", "--config", str(config)) == 0
    assert (project / "runs" / "first" / "run.json").exists() and list(elsewhere.iterdir()) == []
    spec = json.loads((project / "runs" / "first" / "run.json").read_text())["spec"]
    assert spec["task"]["path"] == str(project / "data")


# -- the cache cannot be changed from outside -------------------------------------------------------------- #
def test_editing_a_run_directory_never_changes_the_cache(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "run"
    assert kinject(*args(textcls_dir, out)) == 0
    exported = out / "predictions" / "test.jsonl"
    cached = stage_dirs(out)["evaluate"] / "predictions" / "test.jsonl"
    assert exported.stat().st_ino != cached.stat().st_ino
    original = cached.read_text()
    with open(exported, "a") as handle:  # edited in place
        handle.write('{"id": "forged", "gold": "bio", "pred": "bio"}\n')
    assert cached.read_text() == original
    again = tmp_path / "again"
    assert kinject(*args(textcls_dir, again)) == 0
    assert stage_records(again)["evaluate"]["cached"] and (again / "predictions" / "test.jsonl").read_text() == original


def test_a_damaged_cached_stage_is_computed_again_with_a_warning(tmp_path, textcls_dir, tiny_model, caplog):
    out = tmp_path / "run"
    assert kinject(*args(textcls_dir, out)) == 0
    folder = stage_dirs(out)["evaluate"]
    target = folder / "predictions" / "test.jsonl"
    original = target.read_text()
    target.write_text(original.replace('"gold"', '"GOLD"', 1))  # same size: only its digest tells
    again = tmp_path / "again"
    assert kinject(*args(textcls_dir, again)) == 0
    assert not stage_records(again)["evaluate"]["cached"] and stage_records(again)["finetune"]["cached"]
    assert "was changed since it was computed" in caplog.text and "test.jsonl" in caplog.text
    assert target.read_text() == original and (again / "predictions" / "test.jsonl").read_text() == original
    third = tmp_path / "third"
    assert kinject(*args(textcls_dir, third)) == 0 and stage_records(third)["evaluate"]["cached"]


# -- faults of the disk --------------------------------------------------------------------------------------- #
def test_a_cache_or_output_path_that_cannot_be_created_is_one_line(tmp_path, textcls_dir, tiny_model, capsys):
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    error = one_line_error(capsys, [*args(textcls_dir, tmp_path / "run"), "--cache-dir", str(blocker / "cache")])
    assert str(blocker) in error and "stage cache" in error
    error = one_line_error(capsys, args(textcls_dir, blocker / "run"))
    assert str(blocker) in error
    assert not (tmp_path / "run").exists()


def test_a_write_refused_inside_a_stage_is_one_line_and_leaves_no_partial(tmp_path, textcls_dir, tiny_model, capsys,
                                                                           monkeypatch):
    import errno

    import transformers.modeling_utils

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "cache" / "model.safetensors"))

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    cache = tmp_path / "cache"
    error = one_line_error(capsys, [*args(textcls_dir, tmp_path / "run"), "--cache-dir", str(cache)])
    assert "no space left on device" in error
    assert not list(cache.glob("stages/*/*.partial")) and not (tmp_path / "run").exists()


def _unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _in_namespace(tmp_path: Path, mount: str, arguments: list[str]) -> subprocess.CompletedProcess:
    """kinject ARGUMENTS in a mount namespace where ``mount`` (a shell snippet using $M) prepared $M."""
    point = tmp_path / "mnt"
    point.mkdir()
    script = (f"M={point}; {mount} && exec {sys.executable} -c "
              "'import sys; from kinject.cli.app import main; main(sys.argv[1:])' \"$@\"")
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *arguments],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.skipif(not _unshare(), reason="no user+mount namespaces here (unshare) to mount a small filesystem")
def test_a_full_disk_is_one_line_naming_it_and_the_partial_is_removed(tmp_path, textcls_dir, tiny_model):
    point = tmp_path / "mnt"
    result = _in_namespace(tmp_path, "mount -t tmpfs -o size=12m tmpfs $M",
                           [*args(textcls_dir, tmp_path / "run", "--model", "minilm", "--set", "training.max_steps=1",
                                  "--limit", "8"), "--cache-dir", str(point / "cache")])
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert "no space left on device" in lines[-1] and str(point) in lines[-1] and "Traceback" not in result.stderr


@pytest.mark.skipif(not _unshare(), reason="no user+mount namespaces here (unshare) to mount a read-only filesystem")
def test_a_read_only_cache_or_output_is_one_line_before_any_stage(tmp_path, textcls_dir, tiny_model):
    point = tmp_path / "mnt"
    readonly = "mount -t tmpfs tmpfs $M && mkdir $M/cache && mount -o remount,ro $M"
    result = _in_namespace(tmp_path, readonly, [*args(textcls_dir, tmp_path / "run"), "--cache-dir",
                                                str(point / "cache")])
    assert result.returncode == 2 and "read-only file system" in result.stderr and "stage cache" in result.stderr
    assert "Traceback" not in result.stderr and "run start" not in result.stderr
    shutil.rmtree(point)
    result = _in_namespace(tmp_path, readonly, [*args(textcls_dir, point / "run"), "--cache-dir",
                                                str(tmp_path / "cache")])
    assert result.returncode == 2 and "read-only file system" in result.stderr and "output folder" in result.stderr
    assert "Traceback" not in result.stderr and not list((tmp_path / "cache").glob("stages/*"))


def test_pickled_weights_the_safe_loader_refuses_are_one_line(tmp_path, textcls_dir, tiny_model, capsys):
    import torch

    model = tmp_path / "pickled"
    shutil.copytree(tiny_model, model)
    (model / "model.safetensors").unlink()
    torch.save({"weights": torch.zeros(2), "hook": subprocess.Popen}, model / "pytorch_model.bin")
    error = one_line_error(capsys, [*args(textcls_dir, tmp_path / "run"), "--model", str(model)])
    assert "pytorch_model.bin" in error and "safe loader" in error and "safetensors" in error


# -- overlong inputs and debris --------------------------------------------------------------------------------- #
MEASURED = ("import resource, sys\nfrom kinject.cli.app import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
            "    print('peak-rss-kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


def peak_rss_mb(arguments: list[str]) -> tuple[int, float, str]:
    result = subprocess.run([sys.executable, "-c", MEASURED, *arguments], capture_output=True, text=True,
                            timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    kb = next(int(line.split()[1]) for line in result.stderr.splitlines() if line.startswith("peak-rss-kb"))
    return result.returncode, kb / 1024, result.stderr


@pytest.mark.slow
def test_an_overlong_line_is_cut_when_read_and_memory_stays_flat(tmp_path, textcls_dir, tiny_model):
    from conftest import write_textcls

    long = write_textcls(tmp_path / "long")
    # a 6 MB line: under the 8 MiB cap per line (a longer one is refused: test_reliability_hardening), 375x the text cap
    line = json.dumps({"text": "gene " * 1_200_000, "label": "bio"})
    with open(long / "train.jsonl", "a") as handle:
        handle.write(line + "\n")
    code, normal, _ = peak_rss_mb(args(textcls_dir, tmp_path / "normal"))
    assert code == 0
    code, overlong, err = peak_rss_mb(args(long, tmp_path / "overlong"))
    assert code == 0, err[-2000:]
    assert "1 text(s) longer than 16384 characters cut" in err
    print(f"peak RSS: normal {normal:.0f} MB, with a 6 MB line {overlong:.0f} MB")
    assert overlong - normal < 300  # read and tokenised whole, it took over 1 GB (185x the line)


def test_debris_of_dead_processes_is_removed_and_a_cut_off_replace_is_undone(tmp_path, textcls_dir, tiny_model):
    from kinject.files import HOST

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / f".old-run.tmp-{HOST}-{dead}-0123abcd").mkdir()  # a run that died while writing
    (runs / f".old-run.tmp-{HOST}-{dead}-0123abcd" / "model.safetensors").write_bytes(b"x" * 100)
    (runs / f".kept.old-{HOST}-{dead}-89abcdef").mkdir()  # a replace cut between its two renames
    (runs / f".kept.old-{HOST}-{dead}-89abcdef" / "run.json").write_text("{}")
    alive = runs / f".busy.tmp-{HOST}-{os.getpid()}-00000000"  # a live process's: left alone
    alive.mkdir()
    assert kinject(*args(textcls_dir, runs / "new")) == 0
    assert sorted(p.name for p in runs.iterdir()) == sorted(["new", "kept", alive.name])
    assert (runs / "kept" / "run.json").exists()
