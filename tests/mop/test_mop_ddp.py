"""MoP's partition adapters under `torchrun --nproc_per_node 2` (CPU, gloo): the parts are shared out over both
processes, and every adapter equals the one a single-process run trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import write_kg


@pytest.mark.slow
def test_two_processes_share_the_parts_and_match_the_single_process_run(tmp_path, textcls_dir, tiny_model):
    import torch

    from helpers import free_port, run_kinject

    kg = write_kg(tmp_path / "kg.tsv", clusters=2)
    args = ["run", "mop", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "sources.0.name=triples", "--set", f"sources.0.path={kg}", "--set", "model.max_length=32",
            "--set", "strategy.partitions=2", "--set", "strategy.baseline=false", "--set", "strategy.analysis=false",
            "--set", "strategy.adapter_max_steps=3", "--set", "strategy.adapter_batch_size=8",
            "--set", "training.epochs=1", "--set", "training.batch_size=8"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun process has (OMP_NUM_THREADS=1): same kernels, same bits
    try:
        assert run_kinject(*args, "--cache-dir", str(tmp_path / "cache-single"), "-o", str(tmp_path / "run-single")) == 0
    finally:
        torch.set_num_threads(threads)
    env = dict(os.environ, OMP_NUM_THREADS="1", KINJECT_PROGRESS="0")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             free_port(), "-m", "kinject", *args, "--cache-dir", str(tmp_path / "cache-ddp"),
                             "-o", str(tmp_path / "run-ddp")], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    stages = {name: {s["name"]: s for s in json.loads((tmp_path / f"run-{name}" / "run.json").read_text())["stages"]}
              for name in ("single", "ddp")}
    ranks = []
    for i in range(2):
        single, ddp = stages["single"][f"mop-adapter-{i}"], stages["ddp"][f"mop-adapter-{i}"]
        assert single["key"] == ddp["key"]
        ranks.append(json.loads(open(os.path.join(ddp["dir"], "stage.json")).read())["rank"])
        weights = [open(os.path.join(s["dir"], "adapter", "adapter.safetensors"), "rb").read() for s in (single, ddp)]
        assert weights[0] == weights[1]  # bit-identical adapter, trained alone in a worker process
        heldout = [json.loads(open(os.path.join(s["dir"], "adapter.json")).read())["heldout"] for s in (single, ddp)]
        assert heldout[0] == heldout[1]
    assert set(ranks) == {0, 1}  # a shared queue: each process took one of the two parts
    metrics = json.loads((tmp_path / "run-ddp" / "metrics.json").read_text())
    assert metrics["train"]["world_size"] == 2  # the fusion fine-tune itself runs data-parallel
    assert set(metrics["test"]) == {"accuracy", "f1_macro"}
