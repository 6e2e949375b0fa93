"""Reliability: every file kinject writes for itself and reads back is read like user input (issue #54). One damage
list is fed to each such file; a cache (the choice, a finished stage's record, a checkpoint, a grid cell's status)
is then one warning naming the file and rebuilt or passed over, an input (a run folder used as a teacher or a
model, a run folder to evaluate or publish) is refused in one line naming the file. Nothing hangs (a FIFO), nothing
reads without bound (a link to /dev/zero, a huge file). Direct calls on prepared files: no training but one."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from conftest import write_textcls
from helpers import fake_kinject_run, one_line_error
from helpers import run_kinject as kinject
from reliability_helpers import Killed, killed_after_checkpoint

pytestmark = pytest.mark.reliability


# -- the damage list ----------------------------------------------------------------------------------------- #
def _bytes(content: bytes) -> Callable[[Path, bytes], None]:
    return lambda path, good: path.write_bytes(content)


def _fifo(path: Path, good: bytes) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path, good: bytes) -> None:
    path.symlink_to("/dev/zero")


def _huge(path: Path, good: bytes) -> None:
    from kinject.records import RECORD_BYTES

    with open(path, "wb") as handle:  # sparse: no disk used
        handle.truncate(RECORD_BYTES + 1)


DAMAGE = {
    "truncated": lambda path, good: path.write_bytes(good[: len(good) // 2]),
    "a list": _bytes(b"[1, 2]"),
    "a string": _bytes(b'"text"'),
    "0": _bytes(b"0"),
    "empty": _bytes(b""),
    "a FIFO": _fifo,
    "a link to /dev/zero": _dev_zero,
    "over the size bound": _huge,
    "NaN and negative numbers": None,  # each kind's own: its numbers NaN or negative
}


@dataclass
class Kind:
    """A file kinject writes for itself: ``make(tmp)`` writes the good situation and returns the file;
    ``read(tmp)`` makes kinject read it and returns what it made of it; ``rebuilt(result, tmp)`` checks a cache was
    passed over and made again (None: an input, refused); ``numbers``: the file's numbers NaN or negative."""

    make: Callable[[Path], Path]
    read: Callable[[Path], object]
    rebuilt: Callable[[object, Path], None] | None
    numbers: Callable[[Path], None]


def within(seconds: float, call: Callable[[], object]):
    """``call()``'s result (or exception), failing when it takes longer than ``seconds`` (a read that hangs)."""
    box: dict = {}

    def target():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still reading after {seconds} s (a read that waits or never ends)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def json_numbers(record: Callable[[Path], dict]) -> Callable[[Path], None]:
    """A damage writing ``record(path)`` (a good record with NaN or negative numbers) as JSON (NaN allowed)."""
    return lambda path: path.write_text(json.dumps(record(path)))


# -- 1. the choice's cached record (a cache) ------------------------------------------------------------------ #
@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_textcls(tmp_path_factory.mktemp("data") / "textcls")


class FakeFolds:
    """Stands for the fold runs: counts them, chooses the last alternative."""

    def __init__(self):
        self.calls = 0

    def __call__(self, base, combos, folds, metric, better, default, probe, announce, record_file):
        self.calls += 1
        return {"chosen": combos[-1], "tie": False, "fold_runs": len(combos) * folds, "seconds": 1.5,
                "scores": [{"settings": c, metric: 0.5 + i / 10} for i, c in enumerate(combos)]}


def choose_in(tmp: Path, data_dir: Path, folds: FakeFolds):
    from kinject.api import build_spec
    from kinject.choice import choose

    spec = build_spec({"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(data_dir)},
                       "choose": True, "cache_dir": str(tmp / "cache"),
                       "hooks": {"knowledge-probe": {"enabled": False}}})
    return choose(spec, lambda line: None)


def choice_kind(data_dir: Path, monkeypatch) -> Kind:
    folds = FakeFolds()
    monkeypatch.setattr("kinject.choice._cross_validate", folds)

    def make(tmp: Path) -> Path:
        _, record = choose_in(tmp, data_dir, folds)
        assert folds.calls == 1 and "cached" not in record
        assert choose_in(tmp, data_dir, folds)[1]["cached"] and folds.calls == 1  # the good record is reused
        return next((tmp / "cache" / "choices").glob("*.json"))

    def rebuilt(result, tmp: Path) -> None:
        spec, record = result
        assert folds.calls == 2 and "cached" not in record  # chosen again, not taken from the damaged file
        assert spec.training.head_learning_rate == 0.01
        path = next((tmp / "cache" / "choices").glob("*.json"))
        assert path.is_file() and not path.is_symlink() and json.loads(path.read_text())["chosen"] == record["chosen"]

    def numbers(path: Path) -> None:
        good = json.loads(path.read_text())
        path.write_text(json.dumps({**good, "seconds": float("nan"), "fold_runs": -10}))

    return Kind(make, lambda tmp: choose_in(tmp, data_dir, folds), rebuilt, numbers)


# -- 2. a finished stage's stage.json (a cache) --------------------------------------------------------------- #
def stage_kind() -> Kind:
    def make(tmp: Path) -> Path:
        from kinject.cache import file_records
        from kinject.stage_runner import _intact

        folder = tmp / "stages" / "finetune" / "abc"
        (folder / "model").mkdir(parents=True)
        (folder / "model" / "weights.bin").write_bytes(b"weights")
        (folder / "stage.json").write_text(json.dumps({"stage": "finetune", "seconds": 1.0,
                                                       "files": file_records(folder)}))
        assert _intact(folder, "finetune", discard_damaged=True)  # the good one is a cache hit
        return folder / "stage.json"

    def read(tmp: Path):
        from kinject.stage_runner import _intact

        return _intact(tmp / "stages" / "finetune" / "abc", "finetune", discard_damaged=True)

    def rebuilt(result, tmp: Path) -> None:
        assert result is False and not (tmp / "stages" / "finetune" / "abc").exists()  # discarded: computed again

    def record(path: Path) -> dict:
        good = json.loads(path.read_text())
        return {**good, "files": {"model/weights.bin": {"size": -7, "mtime_ns": float("nan"), "sha256": "x"}}}

    return Kind(make, read, rebuilt, json_numbers(record))


# -- 3. a trainer checkpoint's files (a cache: resume falls back to the checkpoint before) ---------------------- #
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, data, tiny_model) -> Path:
    """A real Trainer checkpoint of the tiny model (the one stage this module trains)."""
    tmp = tmp_path_factory.mktemp("checkpoint")
    with killed_after_checkpoint("finetune", after_epoch=0.0) as killed, pytest.raises(Killed):
        kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
                "--set", "training.max_steps=4", "--set", "training.save_steps=2", "--set", "training.batch_size=8",
                "--cache-dir", str(tmp / "cache"), "-o", str(tmp / "out"))
    found = next((tmp / "cache").glob(f"stages/finetune/*.partial/work/checkpoint-{killed.steps[0]}"))
    assert {"trainer_state.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"} <= \
        {p.name for p in found.iterdir()}
    return found


def checkpoint_kind(source: Path, name: str) -> Kind:
    def make(tmp: Path) -> Path:
        from kinject.training import last_checkpoint

        work = tmp / "stages" / "finetune" / "abc.partial" / "work"
        for step in (2, 4):
            shutil.copytree(source, work / f"checkpoint-{step}")
            state = json.loads((source / "trainer_state.json").read_text())
            (work / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({**state, "global_step": step}))
        assert last_checkpoint(work).endswith("checkpoint-4")  # the good one resumes
        return work / "checkpoint-4" / name

    def read(tmp: Path):
        from kinject.training import last_checkpoint

        return last_checkpoint(tmp / "stages" / "finetune" / "abc.partial" / "work")

    def rebuilt(result, tmp: Path) -> None:
        assert str(result).endswith("checkpoint-2")  # the one before; the damaged one is gone (rewritten)
        assert not (tmp / "stages" / "finetune" / "abc.partial" / "work" / "checkpoint-4").exists()

    def numbers(path: Path) -> None:
        if path.suffix == ".json":
            path.write_text(json.dumps({**json.loads(path.read_text()), "global_step": float("nan")}))
        else:
            import torch

            torch.save([float("nan"), -1], path)  # a tensor file, but not the state the Trainer wrote

    return Kind(make, read, rebuilt, numbers)


# -- 4. run folders a run reads as an input (refused) --------------------------------------------------------- #
@pytest.fixture(scope="module")
def prepared(data, tmp_path_factory, tiny_model):
    from kinject.api import build_spec, prepare

    return prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(data)},
                               "cache_dir": str(tmp_path_factory.mktemp("cache")), "choose": False}))


def run_folder_kind(name: str, read: Callable[[Path], object], tiny_model: str, data_dir: Path) -> Kind:
    def make(tmp: Path) -> Path:
        folder = fake_kinject_run(tmp / "teacher", tiny_model, [], task={"name": "textcls", "path": str(data_dir)},
                                  dose=False)
        read(folder)  # the good folder is read
        return folder / name

    def record(path: Path) -> dict:
        good = json.loads(path.read_text())
        if name == "metrics.json":
            return {**good, "dose": float("nan")}
        return {**good, "seed": float("nan"), "knowledge": {**good["knowledge"], "held_out": {"facts": -3}}}

    return Kind(make, lambda tmp: read(tmp / "teacher"), None, json_numbers(record))


def teacher(run):
    from kinject.knowledge import model_input

    return lambda folder: model_input(run, str(folder), "strategy.teacher")


def model_that_is_a_run(run):
    from kinject.knowledge import model_input

    return lambda folder: model_input(run, str(folder / "model"), "model.name")


def evaluated(folder: Path):
    from kinject.training import run_evaluate_config

    return run_evaluate_config(folder / "model", "the config")


def published(folder: Path):
    from kinject.plugins.hub.card import run_files

    return run_files(folder)


# -- 5. a grid cell's status record (a cache of where the cell stands) ----------------------------------------- #
def status_kind() -> Kind:
    def make(tmp: Path) -> Path:
        from kinject.experiments.grid_state import read_status

        path = tmp / "_grid" / "status" / "textcls" / "finetune" / "seed-42.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"cell": "textcls/finetune/seed-42", "state": "done", "seconds": 3.0}))
        assert read_status(SimpleNamespace(status_file=path))["state"] == "done"
        return path

    def read(tmp: Path):
        from kinject.experiments.grid_state import read_status

        return read_status(SimpleNamespace(status_file=tmp / "_grid" / "status" / "textcls" / "finetune" /
                                           "seed-42.json"))

    def rebuilt(result, tmp: Path) -> None:
        assert result == {}  # passed over: the cell's run folder says whether it is done

    return Kind(make, read, rebuilt, lambda path: None)


@pytest.fixture
def kinds(request, data, tiny_model, monkeypatch, prepared):
    def build(name: str) -> Kind:
        if name == "choice record":
            return choice_kind(data, monkeypatch)
        if name == "stage.json":
            return stage_kind()
        if name.startswith("checkpoint "):
            return checkpoint_kind(request.getfixturevalue("checkpoint"), name.split(" ", 1)[1])
        if name == "grid cell status":
            return status_kind()
        file = "metrics.json" if "metrics.json" in name else "run.json"
        read = {"teacher": teacher(prepared), "model": model_that_is_a_run(prepared), "eval": evaluated,
                "push": published}[name.split(" ")[0]]
        return run_folder_kind(file, read, tiny_model, data)

    return build


KINDS = ["choice record", "stage.json", "checkpoint trainer_state.json", "checkpoint optimizer.pt",
         "checkpoint scheduler.pt", "checkpoint rng_state.pth", "checkpoint model.safetensors",
         "teacher run.json", "teacher metrics.json", "model run.json", "model metrics.json", "eval run.json",
         "push run.json", "push metrics.json", "grid cell status"]
SKIPPED = {("grid cell status", "NaN and negative numbers"): "its numbers are shown, never computed with"}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("kind_name", KINDS)
def test_every_file_kinject_reads_back_takes_the_damage_list(tmp_path, kinds, kind_name, damage, caplog):
    if (kind_name, damage) in SKIPPED:
        pytest.skip(SKIPPED[(kind_name, damage)])
    kind = kinds(kind_name)
    path = kind.make(tmp_path)
    good = path.read_bytes()
    path.unlink()
    if DAMAGE[damage] is None:
        path.write_bytes(good)
        kind.numbers(path)
    else:
        DAMAGE[damage](path, good)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kinject"):
        if kind.rebuilt is None:  # an input: refused in one line naming the file
            from kinject.api import KinjectError

            with pytest.raises(KinjectError) as refused:
                within(60, lambda: kind.read(tmp_path))
            line = str(refused.value)
            assert "\n" not in line and str(path) in line, line
        else:  # a cache: one warning naming the file, then rebuilt or passed over
            kind.rebuilt(within(60, lambda: kind.read(tmp_path)), tmp_path)
            said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(said) == 1 and "\n" not in said[0], said
            assert str(path) in said[0] or (path.name in said[0] and str(path.parent) in said[0]), said


# -- what the choice never applies ------------------------------------------------------------------------------ #
@pytest.mark.parametrize("chosen", [{"training.max_steps": 1}, {"training.head_learning_rate": 0.5},
                                    {"training.head_learning_rate": 0.01, "training.max_steps": 1}])
def test_a_crafted_choice_is_never_applied(tmp_path, data, tiny_model, monkeypatch, caplog, chosen):
    kind = choice_kind(data, monkeypatch)
    path = kind.make(tmp_path)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "chosen": chosen}))
    with caplog.at_level(logging.WARNING, logger="kinject"):
        spec, again = kind.read(tmp_path)
    assert f"the cached choice {path}: chosen" in caplog.text and "none of the alternatives" in caplog.text
    assert spec.training.max_steps == -1 and spec.training.head_learning_rate == 0.01 and "cached" not in again


def test_a_damaged_teacher_run_is_one_line_and_exit_2(tmp_path, data, tiny_model, capsys):
    folder = fake_kinject_run(tmp_path / "teacher", tiny_model, [], task={"name": "textcls", "path": str(data)},
                              dose=False)
    (folder / "run.json").write_text("[1, 2]")
    line = one_line_error(capsys, ["run", "doktra", "--task", "textcls", "--model", "tiny", "--set",
                                   f"task.path={data}", "--set", f"strategy.teacher={folder}", "--dry-run",
                                   "--cache-dir", str(tmp_path / "cache")])
    assert line.startswith("error: strategy.teacher: a damaged kinject run: ") and str(folder / "run.json") in line
