"""Smoke test of the benchmark scripts (run as ``python -m benchmarks.NAME``) on the tiny model, on the CPU, a few steps."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SETUPS = ("finetune kinject", "finetune bare", "finetune bare + clip", "plain HF Trainer",
          "kimera retrain kinject", "kimera retrain bare", "mop adapter kinject", "mop adapter bare",
          "doktra distill kinject", "doktra distill bare", "mlm kinject", "mlm bare")


@pytest.mark.slow
def test_bench_mfu_tiny_cpu(tmp_path):
    out = tmp_path / "mfu.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "KINJECT_PROGRESS": "0", "PYTHONPATH": str(ROOT)}  # run from tmp_path: the package from the root
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_mfu", "--device", "cpu",
                           "--model", "tiny", "--batch", "8", "--length", "32", "--steps", "2", "--warmup", "1",
                           "--rounds", "1", "--peak-size", "256", "--peak-block-s", "0.02", "--json", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| 8 |")]
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")[1:-1]] for line in lines}
    assert set(SETUPS) <= set(rows), sorted(rows)
    for name, cells in rows.items():
        mfu, mfu_fp32 = float(cells[6]), float(cells[7])  # against the peak of the run's precision, and fp32's
        for value in (mfu, mfu_fp32):
            assert math.isfinite(value) and value > 0, (name, cells)  # (its size depends on the machine's load)
        assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[4].replace(",", "")) > 0  # CPU, wall, tok/s
    data = json.loads(out.read_text())
    assert {r["setup"] for r in data["rows"]} == set(rows) and data["label"]  # the machine class beside the figures
    assert all(0 < r["mfu"] and 0 < r["mfu_fp32"] for r in data["rows"])  # (sizes depend on the load)
    assert all(r["vs_plain"] is not None for r in data["rows"] if r["setup"].startswith(("finetune", "plain")))


@pytest.mark.slow
def test_bench_peak_checks_the_avx2_emulation(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_peak", "--size", "256", "--bf16-size", "256",
                           "--rounds", "1", "--json", str(tmp_path / "peak.json")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    rows = json.loads((tmp_path / "peak.json").read_text())["rows"]
    assert {(r["isa"], r["threads"]) for r in rows} == {(i, t) for i in ("native", "avx2") for t in (1, 2)}
    capped = [r for r in rows if r["isa"] == "avx2"]
    assert all(r["capability"] == "AVX2" for r in capped) and all(r["fp32_cpu_gflops"] > 0 for r in rows)
    assert proc.returncode in (0, 1) and ("emulation" in proc.stdout)  # 1: the cap did not slow this machine


@pytest.mark.slow
def test_bench_peft_tiny_cpu(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_peft", "--models", "tiny",
                           "--batch", "2", "--length", "16", "--steps", "1", "--warmup", "1", "--rounds", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {cells[1]: cells for cells in ([c.strip() for c in line.split("|")[1:-1]]
                                          for line in proc.stdout.splitlines() if line.startswith("| tiny |"))}
    assert set(rows) == {"full", "lora", "ia3"}
    trainable = {method: int(cells[2].split()[0].replace(",", "")) for method, cells in rows.items()}
    assert trainable["ia3"] < trainable["lora"] < trainable["full"]  # peft trains a small share, the head included
    assert rows["full"][4] == "1.00x" and all(float(cells[3]) > 0 for cells in rows.values())


@pytest.mark.slow
def test_bench_quick_times_a_supported_pair_and_names_an_unsupported_one(tmp_path, tiny_model, data_dir, monkeypatch):
    from benchmarks.bench_quick import run_quick

    monkeypatch.setenv("KINJECT_DATA_DIR", str(data_dir))
    ran = run_quick("finetune", "hpo-isa", "tiny", "native")
    assert ran["rc"] == 0 and ran["supported"] and ran["seconds"] > 0, ran
    refused = run_quick("doktra", "ncbi-disease", "tiny", "native")
    assert refused["rc"] == 2 and not refused["supported"] and "token tagging" in refused["reason"], refused
