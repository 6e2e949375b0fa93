"""Reliability, hardening: every file kinject reads is bounded and checked, every lock loss and interruption ends
cleanly. One test per case of issue #36 (settings checked before work, weights verified where they are read,
reading bounded by a cap, a lease taken from a stalled holder, duplicate grid cells, interrupts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import two_line_splits

from helpers import one_line_error, wait_until
from helpers import run_kinject as kinject
from reliability_helpers import (Killed, checkpoint_written, finish, held, identical, killed_after_checkpoint, spawn,
                                 stage_dirs, stage_records)

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]


def finetune_args(data: Path, *extra: str) -> list[str]:
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.epochs=3", "--set", "training.batch_size=8", "--set", "training.save_steps=4",
            "--set", "training.warmup_ratio=0", "--set", "hooks.knowledge-probe.enabled=false", *extra]


def truncate(path: Path, keep: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(keep)


# -- 1. settings checked against the model before any stage --------------------------------------------------- #
@pytest.mark.parametrize("setting, words", [("model.max_length=4096", "beyond the 512 positions"),
                                            ("model.layers=9", "has 2 layers")])
def test_a_setting_the_model_cannot_take_is_one_line_before_any_stage(tmp_path, textcls_dir, tiny_model, capsys,
                                                                     setting, words):
    cache = tmp_path / "cache"
    line = one_line_error(capsys, [*finetune_args(textcls_dir, "--set", setting), "--cache-dir", str(cache),
                                   "-o", str(tmp_path / "out")])
    assert words in line and setting.split("=")[0] in line
    assert not list(cache.glob("stages/*/*.partial")) and not (tmp_path / "out").exists()


def test_an_unknown_hub_id_offline_says_so_before_any_stage(tmp_path, textcls_dir, capsys):
    line = one_line_error(capsys, ["run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}",
                                   "--model", "nobody/no-such-model", "--cache-dir", str(tmp_path / "cache")])
    assert "HF_HUB_OFFLINE" in line and "local model folder" in line
    assert not (tmp_path / "cache" / "stages").exists()


# -- 2. weights verified wherever they are read ------------------------------------------------------------- #
def test_resume_falls_back_from_a_truncated_newest_checkpoint(tmp_path, textcls_dir, tiny_model, caplog):
    args = finetune_args(textcls_dir)
    clean, resumed, cache = tmp_path / "clean", tmp_path / "resumed", tmp_path / "cache"
    assert kinject(*args, "--cache-dir", str(tmp_path / "clean-cache"), "-o", str(clean)) == 0
    with killed_after_checkpoint("finetune", torn=True) as killed, pytest.raises(Killed):
        kinject(*args, "--cache-dir", str(cache), "-o", str(tmp_path / "cut"))
    newest = next(cache.glob(f"stages/finetune/*.partial/work/checkpoint-{killed.steps[0]}"))
    (newest / "trainer_state.json").write_text(json.dumps({"global_step": killed.steps[0]}))  # looks complete...
    weights = newest / "model.safetensors"
    truncate(weights, weights.stat().st_size // 2)  # ...but its weights were cut short (a power loss, no fsync)
    assert kinject(*args, "--cache-dir", str(cache), "--resume", "-o", str(resumed)) == 0
    assert "is incomplete" in caplog.text and "model.safetensors" in caplog.text
    assert identical(stage_dirs(clean)["finetune"], stage_dirs(resumed)["finetune"]) == []


def test_eval_of_a_truncated_model_is_one_line(tmp_path, textcls_dir, tiny_model, capsys):
    out = tmp_path / "run"
    assert kinject(*finetune_args(textcls_dir, "--set", "training.epochs=1"), "-o", str(out)) == 0
    weights = out / "model" / "model.safetensors"
    truncate(weights, 1000)
    line = one_line_error(capsys, ["eval", str(out / "model"), "--task", "textcls", "--set",
                                   f"task.path={textcls_dir}"])
    assert str(weights) in line and "damaged weights" in line


def test_push_refuses_an_incomplete_or_damaged_run(tmp_path, textcls_dir, tiny_model, capsys):
    out = tmp_path / "run"
    assert kinject(*finetune_args(textcls_dir, "--set", "training.epochs=1"), "-o", str(out)) == 0
    push = ["push", str(out), "--repo-id", "you/x", "--dry-run"]
    capsys.readouterr()
    assert kinject(*push) == 0 and "checked: every model file matches" in capsys.readouterr().out
    config = out / "model" / "config.json"
    config.write_text(config.read_text().replace("{", "{\"edited\": 1, ", 1))  # differs from its stage's digest
    assert "differs from what the stage that produced it recorded" in one_line_error(capsys, push)
    truncate(out / "model" / "model.safetensors", 100)  # a 100-byte model
    assert "damaged weights" in one_line_error(capsys, push)
    (out / "metrics.json").unlink()
    assert "incomplete run (no metrics.json" in one_line_error(capsys, push)


# -- 3. reading bounded by a cap, not by the file --------------------------------------------------------------- #
def _run_child(args: list[str], timeout: float = 120) -> tuple[int, str, float]:
    """(exit code, stderr, peak RSS in MB) of kinject in a child process (its own peak: a grandchild's wait4)."""
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "sys.stderr.write(p.stderr); "
             "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(p.returncode)")
    done = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "kinject", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return done.returncode, done.stderr, int(done.stdout.strip() or 0) / 1024


def test_a_device_or_a_fifo_as_data_is_one_line_and_never_blocks(tmp_path, tiny_model):
    zero = two_line_splits(tmp_path / "zero")
    (zero / "train.jsonl").symlink_to("/dev/zero")
    fifo = two_line_splits(tmp_path / "fifo")
    os.mkfifo(fifo / "train.jsonl")
    for folder, kind in ((zero, "a device"), (fifo, "a FIFO")):
        code, err, _ = _run_child(["run", "finetune", "--task", "textcls", "--model", "tiny", "--set",
                                   f"task.path={folder}", "--cache-dir", str(tmp_path / "cache")], timeout=60)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and f"{kind}, not a regular file" in lines[0], err[-2000:]


def test_a_huge_line_stops_at_the_cap_with_memory_bounded_by_it(tmp_path, tiny_model):
    big = two_line_splits(tmp_path / "big")
    with open(big / "train.jsonl", "wb") as handle:  # 300 MB on one line
        handle.write(b'{"text": "')
        for _ in range(300):
            handle.write(b"a" * 2**20)
        handle.write(b'", "label": "x"}\n')
    cache = str(tmp_path / "cache")  # a run that fails on its data, for the memory of everything but the reading
    code, _, normal = _run_child(["run", "finetune", "--task", "textcls", "--model", "tiny", "--set",
                                  f"task.path={tmp_path / 'none'}", "--cache-dir", cache])
    assert code == 2 and normal > 0
    code, err, peak = _run_child(["run", "finetune", "--task", "textcls", "--model", "tiny", "--set",
                                  f"task.path={big}", "--cache-dir", cache])
    assert code == 2 and f"{big / 'train.jsonl'}:1: a line longer than" in err, err[-2000:]
    assert peak < normal + 100, (peak, normal)  # a whole-line read would add the 300 MB line and more


# -- 4. a lease taken from a stalled holder ---------------------------------------------------------------------- #
@pytest.mark.slow
def test_a_holder_stalled_past_its_lease_and_the_process_that_took_over_both_end_cleanly(tmp_path, textcls_dir,
                                                                                         tiny_model):
    cache = tmp_path / "cache"
    env = {"KINJECT_LOCK": "lease", "KINJECT_LOCK_LEASE": "3"}
    args = finetune_args(textcls_dir, "--cache-dir", str(cache), "--set", "training.logging_steps=1")
    holder_log, waiter_log = tmp_path / "holder.log", tmp_path / "waiter.log"
    holder_gate, waiter_gate = tmp_path / "holder-gate", tmp_path / "waiter-gate"  # each holds after checkpoint-4
    holder = spawn([*args, "-o", str(tmp_path / "holder")], log=holder_log, gate=holder_gate,
                   env={**env, "KINJECT_TEST_STEP_DELAY": "0"})
    wait_until(lambda: held(holder_gate), "the holder's first checkpoint", process=holder)
    os.killpg(holder.pid, signal.SIGSTOP)  # Ctrl-Z, a suspended VM: the heartbeat stops too
    waiter = spawn([*args, "-o", str(tmp_path / "waiter")], log=waiter_log, gate=waiter_gate,
                   env={**env, "KINJECT_TEST_STEP_DELAY": "0"})
    wait_until(lambda: "free after" in waiter_log.read_text(), "the waiter to take the expired lease over",
               process=waiter)
    wait_until(lambda: held(waiter_gate), "the waiter to be computing the stage", process=waiter)
    holder_gate.touch()
    os.killpg(holder.pid, signal.SIGCONT)  # the holder wakes up in the middle of the waiter's computation
    wait_until(lambda: "lease expired" in holder_log.read_text(), "the holder to notice", process=holder)
    waiter_gate.touch()
    results = finish([holder, waiter])
    for code, output in results:
        assert code == 0 and "Traceback" not in output, output[-3000:]
    assert "lease expired" in results[0][1]  # the holder noticed, published nothing, used the waiter's result
    assert stage_records(tmp_path / "holder")["finetune"]["cached"]
    assert not stage_records(tmp_path / "waiter")["finetune"]["cached"]
    assert not list(cache.glob("stages/*/*.partial"))
    assert identical(stage_dirs(tmp_path / "holder")["finetune"], stage_dirs(tmp_path / "waiter")["finetune"]) == []


# -- 5. duplicate grid cells ------------------------------------------------------------------------------------ #
@pytest.mark.parametrize("text, words", [
    ("seeds: [1]\ntasks: [hpo-isa, hpo-isa]\nstrategies: [finetune]\n", "'hpo-isa' is listed twice"),
    ("seeds: [1]\ntasks: [hpo-isa]\nstrategies: [finetune, finetune]\n", "'finetune' is listed twice"),
    ("seeds: [1]\ntasks: [hpo-isa]\nstrategies:\n  finetune: {}\n  finetune: {settings: {training.epochs: 2}}\n",
     "g.yaml:5: invalid YAML: key 'finetune' repeats (first on line 4)")])
def test_a_task_or_strategy_given_twice_is_one_line(tmp_path, capsys, text, words):
    grid = tmp_path / "g.yaml"
    grid.write_text(text)
    assert words in one_line_error(capsys, ["grid", str(grid), "--dry-run"])


# -- 6. interrupts ---------------------------------------------------------------------------------------------- #
@pytest.mark.parametrize("signum, code, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupted_run_says_so_in_one_line(tmp_path, textcls_dir, tiny_model, signum, code, name):
    log = tmp_path / "run.log"
    process = spawn([*finetune_args(textcls_dir, "--set", "training.epochs=40"), "--cache-dir",
                     str(tmp_path / "cache"), "-o", str(tmp_path / "out")], slowed=True, log=log,
                    env={"KINJECT_TEST_STEP_DELAY": "0.3"})
    wait_until(lambda: checkpoint_written(tmp_path / "cache"), "training to be under way", process=process)
    os.kill(process.pid, signum)
    (returncode, output), = finish([process])
    assert returncode == code and "Traceback" not in output, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by {name}") and "during stage finetune" in last and "--resume" in last
    assert not (tmp_path / "out").exists()  # nothing half-written


@pytest.mark.slow
def test_an_interrupted_grid_says_so_in_one_line_and_reruns(tmp_path, textcls_dir, tiny_model):
    grid = ROOT / "benchmarks" / "grids" / "tiny.yaml"
    args = [sys.executable, "-m", "kinject", "grid", str(grid), "--set", f"task.path={textcls_dir}", "--set",
            "training.max_steps=600", "--executor", "local", "--workers", "2", "-o", str(tmp_path / "g")]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    cache = Path(os.environ["KINJECT_CACHE_DIR"])  # the cells' (the session's, set by tiny_model's cache_dir fixture)

    def training() -> bool:  # a cell says it runs and a stage is being computed
        running = any('"running"' in p.read_text() for p in (tmp_path / "g").rglob("status/*/*/seed-*.json"))
        return running and bool(list(cache.glob("stages/finetune/*.partial/work")))

    wait_until(training, "a worker to be training its cell", process=process)
    os.killpg(process.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the whole process group
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "interrupted by Ctrl-C" in output.strip().splitlines()[-1]
    assert "run the same grid command again" in output
    # the workers stopped with the grid (submitit's job ignores SIGTERM: they used to train their cells to the end)
    assert not list((tmp_path / "g").rglob("metrics.json"))
