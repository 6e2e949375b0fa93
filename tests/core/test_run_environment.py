"""Runs that re-run (#40): run.json records what besides code, data and settings determines the numbers."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import run_kinject


@pytest.mark.slow
def test_run_json_records_the_numerics_environment(tmp_path, tiny_model, textcls_dir):
    out = tmp_path / "run"
    assert run_kinject("run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny",
                       "--set", "training.epochs=1", "--set", "choose=false", "--set", "training.bf16=false",
                       "--set", "hooks.knowledge-probe.enabled=false", "-o", str(out)) == 0
    env = json.loads((out / "run.json").read_text())["environment"]
    assert env["torch_threads"] == torch.get_num_threads() >= 1
    assert env["torch_interop_threads"] >= 1
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["bf16_autocast"] is False  # what the run used, not what the machine could
    assert isinstance(env["cpu_bf16_flags"], list)
    assert env["deterministic_algorithms"] is torch.are_deterministic_algorithms_enabled()
    assert set(env["cudnn"]) == {"deterministic", "benchmark"}
    assert env["torch_git"] == torch.version.git_version and len(env["torch_build"]) == 16
    for key in ("os", "cpu", "numpy", "device"):
        assert env[key], key
    versions = json.loads((out / "run.json").read_text())["versions"]
    assert versions["torch"] == torch.__version__ and versions["python"] and versions["transformers"]
    assert env["thread_pools"] and all(pool["internal_api"] for pool in env["thread_pools"])  # threadpoolctl: BLAS


def test_the_bf16_setting_is_what_the_run_used(monkeypatch):
    from kinject.machine import environment

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert environment(True)["bf16_autocast"] is True and environment(None)["bf16_autocast"] is False
    assert environment(False)["thread_variables"]["OMP_NUM_THREADS"] == "1"
