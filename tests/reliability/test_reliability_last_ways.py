"""Reliability, the last ways to lose a run (issue #42): an interrupt honoured whatever the process is doing (a
Ctrl-C that strikes inside a log write), numeric settings bounded by what can run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import one_line_error

pytestmark = pytest.mark.reliability

TRIPWIRE = """
import os, signal, sys

class Terminal:
    '''stderr whose first write of the line MARK sends this process Ctrl-C: the signal strikes inside the logging
    handler that writes the line (tqdm's, whose emit catches any exception).'''

    def __init__(self, stream):
        self.stream, self.sent = stream, False

    def write(self, text):
        if not self.sent and os.environ["MARK"] in text:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)

sys.stderr = Terminal(sys.stderr)
from kinject.cli.app import main
main(sys.argv[1:])
"""


def test_a_ctrl_c_inside_a_log_write_stops_the_run(tmp_path, textcls_dir, tiny_model):
    args = ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "training.max_steps=30", "--set", "training.batch_size=4", "--set",
            "hooks.knowledge-probe.enabled=false", "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-c", TRIPWIRE, *args], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "MARK": "stage finetune", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith("interrupted by Ctrl-C")
    assert not (tmp_path / "out").exists()  # nothing half-written


@pytest.mark.parametrize("setting", ["knowledge.epochs=inf", "knowledge.epochs=1e9", "training.epochs=.inf",
                                     "training.epochs=nan", "training.max_steps=1000000000000", "training.min_steps=10000000000"])
def test_a_setting_no_run_can_reach_is_one_line_before_any_stage(tmp_path, textcls_dir, capsys, setting):
    cache = tmp_path / "cache"
    line = one_line_error(capsys, ["run", "kimera", "--task", "textcls", "--model", "tiny", "--set",
                                   f"task.path={textcls_dir}", "--set", setting, "--cache-dir", str(cache),
                                   "-o", str(tmp_path / "out")])
    assert line.startswith(f"error: {setting.split('=')[0]}:"), line
    assert not (cache / "stages").exists() and not (tmp_path / "out").exists()
