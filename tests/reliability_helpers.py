"""Helpers of the reliability suite: interrupting a stage right after a checkpoint, launching kinject in other
processes, comparing stage outputs bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

SLOWED = """
import os, sys, time
from kinject.hooks import plugin_manager, hookimpl

class Slow:
    @hookimpl
    def kinject_metrics_logged(self, stage, metrics, step):
        time.sleep(float(os.environ.get("KINJECT_TEST_STEP_DELAY", "0.2")))
        gate = os.environ.get("KINJECT_TEST_GATE")  # see spawn(gate=...)
        if gate and (step or 0) >= int(os.environ["KINJECT_TEST_GATE_STEP"]) and not os.path.exists(gate):
            open(gate + ".held", "w").close()
            deadline = time.monotonic() + 1800
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)

plugin_manager().register(Slow(), name="slow")
from kinject.cli.app import main
main(sys.argv[1:])
"""


class Killed(BaseException):
    """Stands for ``kill -9`` right after a checkpoint is on disk: nothing below it catches or cleans up."""


@contextmanager
def killed_after_checkpoint(stage: str, torn: bool = False, after_epoch: float = 1.0):
    """The Trainer of ``stage`` stops the way a killed process does (:class:`Killed`) at its first checkpoint past
    ``after_epoch`` epochs (a later epoch is where a resumed sampler can go wrong); with ``torn``, while that
    checkpoint is being written (model and optimizer saved, the trainer state not yet). The step is in
    ``.steps``."""
    from transformers import Trainer

    original_save, original_rng = Trainer._save_checkpoint, Trainer._save_rng_state
    box = type("Box", (), {"steps": []})()

    def hit(trainer) -> bool:
        mine = f"{os.sep}stages{os.sep}{stage}{os.sep}" in str(trainer.args.output_dir)
        if mine and trainer.state.epoch > after_epoch and not box.steps:
            box.steps.append(trainer.state.global_step)
            return True
        return False

    def save(self, model, trial):
        original_save(self, model, trial)
        if hit(self):
            raise Killed(self.state.global_step)

    def rng(self, output_dir):
        original_rng(self, output_dir)
        if hit(self):
            raise Killed(self.state.global_step)

    if torn:
        Trainer._save_rng_state = rng
    else:
        Trainer._save_checkpoint = save
    try:
        yield box
    finally:
        Trainer._save_checkpoint, Trainer._save_rng_state = original_save, original_rng


def stage_dirs(run_dir: Path) -> dict[str, Path]:
    return {s["name"]: Path(s["dir"]) for s in json.loads((Path(run_dir) / "run.json").read_text())["stages"]}


def stage_records(run_dir: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads((Path(run_dir) / "run.json").read_text())["stages"]}


def tensors(folder: Path) -> dict[str, "object"]:
    """Every tensor of every safetensors file under ``folder``, keyed by file and name."""
    from safetensors.torch import load_file

    out = {}
    for path in sorted(Path(folder).rglob("*.safetensors")):
        for name, tensor in load_file(path).items():
            out[f"{path.relative_to(folder)}:{name}"] = tensor
    return out


def identical(a: Path, b: Path) -> list[str]:
    """Names of tensors that differ (bit for bit) between two stage folders ([] when identical; a missing file
    counts as a difference)."""
    import torch

    x, y = tensors(a), tensors(b)
    assert x, f"no safetensors under {a}"
    return [k for k in sorted(set(x) | set(y)) if k not in x or k not in y or not torch.equal(x[k], y[k])]


def spawn(args: list[str], env: dict | None = None, slowed: bool = False, log: Path | None = None,
          gate: Path | None = None, gate_step: int = 5) -> subprocess.Popen:
    """``kinject ARGS`` in a new process (its own session, so a test can kill its whole group); with ``log``, its
    output goes to that file (read it while the process runs), else to a pipe :func:`finish` reads. ``slowed``:
    every logged training step sleeps ``KINJECT_TEST_STEP_DELAY`` s; with ``gate``, training also holds at its first
    log from step ``gate_step`` on (it creates ``<gate>.held``: :func:`held`) until the file ``gate`` exists (the test
    creates it). A process that must still be training when another arrives is held there, not raced against a
    clock; the run needs ``training.logging_steps=1``."""
    code = SLOWED if slowed or gate else "import sys\nfrom kinject.cli.app import main\nmain(sys.argv[1:])"
    environment = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    if gate is not None:
        environment.update(KINJECT_TEST_GATE=str(gate), KINJECT_TEST_GATE_STEP=str(gate_step))
    output = open(log, "w") if log is not None else subprocess.PIPE
    process = subprocess.Popen([sys.executable, "-c", code, *args], env=environment, stdout=output,
                               stderr=subprocess.STDOUT if log is not None else subprocess.PIPE, text=True,
                               start_new_session=True)
    process.log = log
    return process


def held(gate: Path) -> bool:
    """Whether the process spawned with ``gate`` holds mid-training, waiting for the file."""
    return Path(f"{gate}.held").exists()


def checkpoint_written(cache: Path, stage: str = "finetune") -> bool:
    """Whether a computation of ``stage`` in ``cache`` has a complete Trainer checkpoint (its trainer_state.json,
    which the Trainer writes last, reads back)."""
    for state in Path(cache).glob(f"stages/{stage}/*.partial/work/checkpoint-*/trainer_state.json"):
        try:
            json.loads(state.read_text())
            return True
        except (OSError, ValueError):
            continue
    return False


def finish(processes: list[subprocess.Popen], timeout: float = 1200) -> list[tuple[int, str]]:
    """(exit code, its output: stderr, or the log file) of each process once it ends."""
    out = []
    for process in processes:
        _, err = process.communicate(timeout=timeout)
        out.append((process.returncode, Path(process.log).read_text() if process.log else err))
    return out
