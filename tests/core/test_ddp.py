"""A run launches unchanged under torchrun: DDP with 2 CPU processes (gloo) on the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import PROBE_STAGES, free_port


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path, textcls_dir, tiny_model, cache_dir):
    out = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1", KINJECT_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port(),
           "-m", "kinject", "run", "finetune", "--task", "textcls", "--model", "tiny", "--set",
           f"task.path={textcls_dir}", "--set", "training.epochs=2", "--set", "training.batch_size=8", "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    train = metrics["train"]
    assert train["world_size"] == 2
    # 48 examples, 8 per process x 2 processes = 16 per step -> 3 steps per epoch, 2 epochs
    assert train["global_step"] == 6
    assert set(metrics["test"]) == {"accuracy", "f1_macro"}
    # (evaluate_model checks that predictions gathered over both processes match the examples one to one)
    info = json.loads((out / "run.json").read_text())
    assert [s["name"] for s in info["stages"]] == ["finetune", "evaluate", *PROBE_STAGES]
    assert (out / "model" / "model.safetensors").exists()
