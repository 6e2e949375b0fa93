"""The files ``--dry-run``'s estimate reads back (machine-speed.json, stage.json) are read like user input (#54): a
list, a string, 0, a FIFO, a symlink to /dev/zero, negative or NaN values -> one warning naming the file, the file
ignored (the speed measured again, the run left out), never a traceback, a hang or a ``~nan h``; a read-only cache is
fine for a dry run; and the "why it misses" line says the weightiest one or two reasons."""

from __future__ import annotations

import json
import logging
import math
import os

import pytest

DAMAGE = {"a list": "[1, 2]", "a string": '"fast"', "zero": "0", "cut short": '{"a": ', "negative": None,
          "nan": None, "fifo": None, "dev-zero": None}


def damage(path, how: str, good: dict) -> None:
    """Write ``path`` damaged ``how`` (``good``: the record it should have held)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how in ("negative", "nan"):
        value = -1956707848219.0 if how == "negative" else float("nan")
        path.write_text(json.dumps({k: (value if isinstance(v, float) else v) for k, v in good.items()}))
    else:
        path.write_text(DAMAGE[how])


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_machine_speed_file_is_measured_again(tmp_path, how, monkeypatch, caplog):
    from kinject.cli import estimate

    monkeypatch.setattr(estimate, "_measure", lambda shape, bf16, scoring: 5e9)
    path = tmp_path / estimate.SPEED_FILE
    if how in ("negative", "nan"):  # the entry the estimator asks for holds the bad value
        import torch

        key = f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32, hidden 384, inner 1536"
        path.write_text(json.dumps({key: {"flops_per_s": -5.0 if how == "negative" else float("nan")}}))
    else:
        damage(path, how, {})
    with caplog.at_level(logging.WARNING, logger="kinject"):
        speed = estimate.machine_speed(tmp_path, bf16=False)
    assert speed == 5e9
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "measuring this machine's speed again" in warnings[0], \
        warnings


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_stage_record_is_left_out(tmp_path, how, monkeypatch, caplog):
    from kinject.cli import estimate

    monkeypatch.setattr(estimate.Estimator, "speed", lambda self, shape=None, scoring=False: 1e10)
    good = {"seconds": 100.0, "flops": 1e12, "scoring_flops": 0.0, "fixed_s": 3.0}
    damage(tmp_path / "stages" / "finetune" / ("a" * 64) / "stage.json", how, good)
    with caplog.at_level(logging.WARNING, logger="kinject"):
        guess = estimate.Estimator(tmp_path, bf16=False)("finetune", {"flops": 1e12, "fixed_s": 3.0})
    assert math.isfinite(guess.seconds) and guess.seconds > 0 and "earlier" not in guess.how
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "stage.json" in warnings[0] and "left out" in warnings[0], warnings


def test_duration_never_prints_nan():
    from kinject.cli.run import duration

    assert duration(float("nan")) == duration(-3.0) == "? s" and duration(42) == "42 s"


def test_a_dry_run_needs_no_writable_cache(tmp_path, tiny_model, textcls_dir, monkeypatch, capsys):
    """(As root a read-only folder is still writable, so the cache's write check and the speed file's write are made to
    fail as a read-only disk makes them fail.)"""
    from kinject import files
    from kinject.files import FilesystemError

    from helpers import run_kinject

    def refuse(folder, what):
        raise FilesystemError(f"{what} {folder}: cannot write there (read-only file system)")

    monkeypatch.setattr(files, "check_writable", refuse)
    monkeypatch.setattr("kinject.api.atomic_write_text", lambda *a, **k: (_ for _ in ()).throw(OSError(30, "ro")))
    args = ("finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny", "--set",
            "choose=false", "--cache-dir", str(tmp_path / "cache"))
    assert run_kinject("run", *args, "--dry-run") == 0
    assert "estimated time: ~" in capsys.readouterr().out
    assert run_kinject("run", *args, "-o", str(tmp_path / "out")) == 2  # a real run still refuses it


def test_why_it_misses_names_the_weightiest_reasons_only():
    from kinject.cli.misses import record_differences, summarise

    old = {"config": {"task": {"name": "textcls", "data": "textcls:x", "options": {"a": 1, "b": 2}},
                      "model": {"name": "tiny"}, "training": {"epochs": 3, "lr": 1e-4}},
           "code": {"f": "1", "g": "2"}, "libraries": {"torch": "2.12"}}
    new = {"config": {"task": {"name": "capr", "data": "capr:medquad " + "x" * 200, "options": {"a": 3, "b": 4}},
                      "model": {"name": "minilm"}, "training": {"epochs": 2, "lr": 1e-5}},
           "code": {"f": "9", "g": "2"}, "libraries": {"torch": "2.13"}}
    why = summarise(record_differences(old, new))
    assert why.startswith("task.data: ") and "(and 3 more task setting(s))" in why, why
    assert "model.name: 'tiny' -> 'minilm'" in why and "training" not in why and "torch" not in why, why
    assert why.endswith("4 more difference(s)") and len(why) < 250, why


def test_an_interrupted_stage_says_whether_resume_has_a_checkpoint(tmp_path):
    from types import SimpleNamespace

    from kinject.cli.misses import explain_miss

    folder = tmp_path / "stages" / "finetune" / ("k" * 64)
    planned = SimpleNamespace(folder=folder, stage=SimpleNamespace(name="finetune"), record={}, code_modules={})
    (folder.parent / (folder.name + ".partial") / "work").mkdir(parents=True)
    assert "left no checkpoint" in explain_miss(planned, tmp_path)
    (folder.parent / (folder.name + ".partial") / "work" / "checkpoint-50").mkdir()
    assert explain_miss(planned, tmp_path) == "an interrupted run of it is kept: --resume continues from its step 50"
