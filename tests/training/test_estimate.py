"""An estimate before the first run (#40): ``--dry-run`` on a fresh cache gives a time for every stage (the stage's
FLOPs at the machine's measured speed), computed stages record their FLOPs, and later estimates are scaled by how far
the earlier ones were off."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.common import write_kg
from helpers import run_kinject

STAGE_LINE = re.compile(r"^stage (\S+)\s+\w{12}\s+(.*)$")


def dry_run(capsys, *args: str) -> tuple[dict[str, str], str]:
    capsys.readouterr()
    assert run_kinject("run", *args, "--dry-run") == 0
    out = capsys.readouterr().out
    stages = {m.group(1): m.group(2) for m in map(STAGE_LINE.match, out.splitlines()) if m}
    total = next(line for line in out.splitlines() if line.startswith("estimated time:"))
    return stages, total


def test_a_fresh_cache_gets_a_time_for_every_stage(tmp_path, tiny_model, textcls_dir, capsys):
    kg = write_kg(tmp_path / "kg.tsv")
    fresh = tmp_path / "fresh-cache"
    stages, total = dry_run(capsys, "kimera", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model",
                            "tiny", "--set", "sources.0.name=triples", "--set", f"sources.0.path={kg}",
                            "--cache-dir", str(fresh))
    assert {"finetune", "evaluate", "kimera-retrain", "kimera-finetune", "kimera-evaluate"} <= set(stages)
    for name, state in stages.items():
        assert re.match(r"miss \(~\d+ (s|min|h)", state), (name, state)
    for name in ("finetune", "evaluate", "kimera-retrain"):  # stated arithmetic, not only the overhead
        assert "TFLOP at" in stages[name], stages[name]
    assert "no estimate" not in total and "uncorrected" in total
    speed = json.loads((fresh / "machine-speed.json").read_text())
    assert speed and all(value["flops_per_s"] > 0 and "load_average" in value for value in speed.values())


@pytest.mark.slow
def test_stages_record_their_flops_and_later_estimates_learn_from_them(tmp_path, tiny_model, textcls_dir, capsys):
    cache = tmp_path / "cache"
    common = ("finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny", "--set",
              "training.epochs=1", "--set", "choose=false", "--cache-dir", str(cache))
    assert run_kinject("run", *common, "-o", str(tmp_path / "run")) == 0
    records = {p.parent.parent.name: json.loads(p.read_text()) for p in cache.glob("stages/*/*/stage.json")}
    assert records["finetune"]["flops"] > 0 and records["evaluate"]["flops"] > 0
    assert records["finetune"]["flops"] > records["evaluate"]["flops"]  # training: 3x a forward pass, and more data
    stages, total = dry_run(capsys, *common, "--seed", "7")  # another seed: every stage misses
    assert "as its 1 earlier run(s) here" in stages["finetune"]
    assert re.search(r"on the \d+ stage run\(s\) this cache holds, actual / uncorrected estimate was "
                     r"[\d.]+\.\.[\d.]+ \(median [\d.]+\)", total), total


def test_finetune_arithmetic_scales_with_epochs(tmp_path, tiny_model, textcls_dir):
    from kinject.api import build_spec, prepare

    def flops(epochs: int) -> float:
        run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "finetune"},
                                  "task": {"name": "textcls", "path": str(textcls_dir)},
                                  "training": {"epochs": epochs, "selection": "last"},
                                  "cache_dir": str(tmp_path / "cache")}))
        stage = next(s for s in run.stages if s.name == "finetune")
        return stage.config.cost(run)

    assert flops(4) == pytest.approx(2 * flops(2), rel=1e-6)
