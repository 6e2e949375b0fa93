"""MoP's partition adapters under `torchrun --nproc_per_node 2` (CPU, gloo): the parts are shared out over both
processes, and every adapter equals the one a single-process run trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_mop_strategy import write_kg


@pytest.mark.slow
def test_two_processes_share_the_parts_and_match_the_single_process_run(tmp_path, textcls_dir, tiny_model):
    kg = write_kg(tmp_path / "kg.tsv", clusters=4)
    env = dict(os.environ, OMP_NUM_THREADS="1", KINJECT_PROGRESS="0")
    args = ["run", "mop", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "sources.0.name=triples", "--set", f"sources.0.path={kg}", "--set", "model.max_length=32",
            "--set", "strategy.partitions=4", "--set", "strategy.baseline=false", "--set", "strategy.analysis=false",
            "--set", "strategy.adapter_max_steps=3", "--set", "strategy.adapter_batch_size=8",
            "--set", "training.epochs=1", "--set", "training.batch_size=8"]
    launches = {"single": [sys.executable, "-m", "kinject"],
                "ddp": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                        "29541", "-m", "kinject"]}
    for name, launch in launches.items():
        result = subprocess.run([*launch, *args, "--cache-dir", str(tmp_path / f"cache-{name}"),
                                 "-o", str(tmp_path / f"run-{name}")], capture_output=True, text=True, env=env,
                                timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    runs = {name: json.loads((tmp_path / f"run-{name}" / "run.json").read_text()) for name in launches}
    stages = {name: {s["name"]: s for s in info["stages"]} for name, info in runs.items()}
    ranks = []
    for i in range(4):
        single, ddp = stages["single"][f"mop-adapter-{i}"], stages["ddp"][f"mop-adapter-{i}"]
        assert single["key"] == ddp["key"] and not ddp["cached"]
        record = json.loads((tmp_path / "cache-ddp" / "stages" / f"mop-adapter-{i}" / ddp["key"][:20] / "stage.json")
                            .read_text())
        ranks.append(record["rank"])
        weights = [open(os.path.join(s["dir"], "adapter", "adapter.safetensors"), "rb").read() for s in (single, ddp)]
        assert weights[0] == weights[1]  # bit-identical adapter, trained alone in a worker process
        heldout = [json.loads(open(os.path.join(s["dir"], "adapter.json")).read())["heldout"] for s in (single, ddp)]
        assert heldout[0] == heldout[1]
    assert ranks == [0, 1, 0, 1]  # process r trains parts r, r + 2
    metrics = json.loads((tmp_path / "run-ddp" / "metrics.json").read_text())
    assert metrics["train"]["world_size"] == 2  # the fusion fine-tune itself runs data-parallel
    assert set(metrics["test"]) == {"accuracy", "f1_macro"}
