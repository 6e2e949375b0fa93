"""Reliability: interrupts that tell the truth (issue #54). Ctrl-C while a stage trains saves a checkpoint at the end
of the step, says so, and ``--resume`` continues from it (saying where) to the same weights as a run never stopped;
where nothing can be saved, the line says what is lost."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from helpers import wait_until
from reliability_helpers import finish, held, identical, spawn, stage_dirs

pytestmark = pytest.mark.reliability


def finetune_args(data: Path, cache: Path, out: Path) -> list[str]:  # save_steps 500: no checkpoint of its own
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.max_steps=24", "--set", "training.batch_size=8", "--set", "training.warmup_ratio=0",
            "--set", "training.logging_steps=1", "--cache-dir", str(cache), "-o", str(out)]


@pytest.mark.slow
def test_ctrl_c_while_training_saves_a_checkpoint_that_resume_continues_from(tmp_path, textcls_dir, tiny_model):
    cache, gate, log = tmp_path / "cache", tmp_path / "gate", tmp_path / "cut.log"
    clean = tmp_path / "clean"  # in a process of its own, as the interrupted one (one compute thread)
    (code, said), = finish([spawn(finetune_args(textcls_dir, tmp_path / "clean-cache", clean))])
    assert code == 0, said[-3000:]
    process = spawn(finetune_args(textcls_dir, cache, tmp_path / "cut"), gate=gate, gate_step=5, log=log,
                    env={"KINJECT_TEST_STEP_DELAY": "0"})
    wait_until(lambda: held(gate), "training to hold at step 5", process=process)
    process.send_signal(signal.SIGINT)  # while it trains: the step ends, a checkpoint is saved, then it stops
    gate.touch()
    (code, said), = finish([process])
    last = said.strip().splitlines()[-1]
    assert code == 130 and "Traceback" not in said, said[-3000:]
    assert last.startswith("interrupted by Ctrl-C (SIGINT) during stage finetune: checkpoint saved at step 6: "
                           "--resume continues from it"), last
    assert "saving a checkpoint at step 6 first" in said
    assert [p.name for p in cache.glob("stages/finetune/*.partial/work/checkpoint-*")] == ["checkpoint-6"]
    assert not (tmp_path / "cut").exists()  # nothing half-written
    resumed = tmp_path / "resumed"
    (code, said), = finish([spawn([*finetune_args(textcls_dir, cache, resumed), "--resume"])])
    assert code == 0 and "resuming stage finetune from its checkpoint at step 6" in said, said[-3000:]
    stats = json.loads((stage_dirs(resumed)["finetune"] / "train.json").read_text())
    assert stats["resumed_from_step"] == 6 and stats["global_step"] == 24
    assert identical(stage_dirs(clean)["finetune"], stage_dirs(resumed)["finetune"]) == []


def test_resume_without_a_checkpoint_says_the_stage_starts_over(tmp_path, caplog):
    from kinject.training import last_checkpoint

    work = tmp_path / "stages" / "finetune" / "abc.partial" / "work"
    work.mkdir(parents=True)
    with caplog.at_level("INFO", logger="kinject"):
        assert last_checkpoint(work) is None
    assert "no checkpoint: starting stage finetune over" in caplog.text


def interrupted_in(stage: str, work: Path, started: float, **kwargs):
    """An Interrupted as it is raised while ``stage`` (work folder ``work``) computes."""
    from kinject.api import Interrupted
    from kinject.stage_runner import RUNNING

    RUNNING.append((stage, work, started))
    try:
        return Interrupted(2, **kwargs)
    finally:
        RUNNING.pop()


def test_an_interrupt_where_no_checkpoint_exists_says_what_is_lost(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    line = interrupted_in("kimera-score", work, time.time() - 42).message()
    assert line.startswith("interrupted by Ctrl-C (SIGINT) during stage kimera-score: stage kimera-score had saved "
                           "no checkpoint, so its work (4"), line
    assert "is lost and it starts over" in line and "checkpoints are kept" not in line
    (work / "checkpoint-8").mkdir()
    (work / "checkpoint-8" / "trainer_state.json").write_text(json.dumps({"global_step": 8}))
    (work / "checkpoint-12").mkdir()  # one cut short while being written: not a checkpoint to resume from
    line = interrupted_in("finetune", work, time.time()).message()
    assert "its checkpoint at step 8 is kept: --resume continues from it" in line, line
    line = interrupted_in("finetune", work, time.time(), saved_step=12).message()
    assert line.endswith("checkpoint saved at step 12: --resume continues from it (run the same command with "
                         "--resume)"), line
    from kinject.api import Interrupted

    assert "finished stages are kept" in Interrupted(15).message() and Interrupted(15).exit_code == 143


def test_a_second_interrupt_while_a_checkpoint_is_pending_stops_at_once():
    import os

    from kinject.api import Interrupted

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    Interrupted.install()
    try:
        Interrupted.defer(True)
        os.kill(os.getpid(), signal.SIGINT)  # taken: the training loop saves first
        assert Interrupted.deferred() == signal.SIGINT
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # (a signal is delivered between bytecodes; never reached)
    finally:
        Interrupted.defer(False)
        with pytest.raises(Interrupted):
            Interrupted.raise_pending()  # the first one, no longer deferred, is raised at the next check
        for signum, handler in previous.items():
            signal.signal(signum, handler)
