"""A third-party package, pip-installed, adds a strategy and a hook plugin without touching the core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "third_party_plugin"


@pytest.mark.slow
def test_pip_installed_plugin_is_listed_and_runs(tmp_path, textcls_dir, tiny_model):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(PLUGIN)], check=True, capture_output=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
               COLUMNS="300", ECHO_TRACKER_FILE=str(tmp_path / "events.jsonl"))
    kinject = [sys.executable, "-m", "kinject"]
    listed = subprocess.run([*kinject, "list", "strategies"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if " echo " in line)
    assert "kinject-echo" in row and "0.3.0" in row and "ok" in row

    out = tmp_path / "run"
    ran = subprocess.run([*kinject, "run", "echo", "--task", "textcls", "--model", "tiny", "--set",
                          f"task.path={textcls_dir}", "--set", "strategy.note=from-test", "--set",
                          "training.epochs=1", "-o", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    info = json.loads((out / "run.json").read_text())
    assert info["spec"]["strategy"] == {"name": "echo", "note": "from-test"}
    finetune_dir = Path(next(s["dir"] for s in info["stages"] if s["name"] == "finetune"))
    assert (finetune_dir / "note.txt").read_text() == "from-test"
    assert "test" in json.loads((out / "metrics.json").read_text())
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["run_start", "stage_end", "stage_end", "run_end"]
    assert events[0]["strategy"] == "echo"
