"""Last release's plugins survive this one: kinject-legacy (built into a wheel and pip-installed) imports the
previous module paths (kinject.stages, kinject.plugins.pretrain.mlm), hands the shared builders a TaskRef with an
input transform, documents itself with square brackets, and ships a Brier evaluator that needs the model's scores.
It runs with a deprecation warning naming the replacement, and compare and a grid's leaderboard rank its metric."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from third_party_wheels import installed

KINJECT = [sys.executable, "-m", "kinject"]
METRICS = "task.metrics=[{name: brier}, {name: accuracy}]"


def kinject(env: dict, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KINJECT, *args], env=env, capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.mark.slow
def test_a_plugin_written_against_the_old_paths_runs_with_a_deprecation_and_compare_ranks_its_brier(
        tmp_path, textcls_dir, tiny_model):
    env = installed(tmp_path, "legacy")
    listed = kinject(env, "list", "strategies")
    row = next(line for line in listed.stdout.splitlines() if " legacy " in line)
    assert "kinject-legacy" in row and "ok; deprecated: imports kinject.plugins.pretrain.mlm" in row

    shown = kinject(env, "info", "legacy")  # a docstring with [E] .. [/E] is text, not rich markup
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "wrapped in [E] .. [/E]" in shown.stdout and "[E] text [/E]" in shown.stdout
    assert kinject(env, "info", "brier").returncode == 0

    runs = []
    for seed in ("1", "2"):
        out = tmp_path / f"legacy-{seed}"
        ran = kinject(env, "run", "legacy", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                      "--set", METRICS, "--set", "training.epochs=1", "--set", "hooks.knowledge-probe.enabled=false",
                      "--seed", seed, "-o", str(out))
        assert ran.returncode == 0, ran.stderr[-3000:]
        runs.append(out)
    assert "kinject.stages moved in kinject 0.1.0: import it from kinject.plugins.training" in ran.stderr
    assert "kinject.plugins.pretrain.mlm moved in kinject 0.1.0" in ran.stderr
    record = json.loads((runs[0] / "predictions" / "test.jsonl").read_text().splitlines()[0])
    assert record["context"] == "E" and len(record["scores"]) == 2  # the TaskRef's transform reached the records
    reported = json.loads((runs[0] / "metrics.json").read_text())["test"]["brier_macro"]

    compared = kinject(env, "compare", str(runs[0]), str(runs[1]), "-m", "brier_macro", "--json")
    assert compared.returncode == 0, compared.stderr[-2000:]
    rows = json.loads(compared.stdout)["metrics"][0]["rows"]
    assert rows[0]["value"] == pytest.approx(reported)  # recomputed from the kept scores
    assert json.loads(compared.stdout)["metrics"][0]["greater_is_better"] is False


@pytest.mark.slow
def test_a_grid_started_beside_a_kinject_folder_ranks_the_brier_metric(tmp_path, textcls_dir, tiny_model):
    env = installed(tmp_path, "legacy")
    work = tmp_path / "work"
    (work / "kinject" / "core").mkdir(parents=True)  # a clone of kinject in the working folder
    grid = work / "grid.yaml"
    grid.write_text(f"""
output: {tmp_path / 'grid-out'}
model: tiny
seeds: [42]
tasks: [textcls]
strategies:
  finetune: {{}}
  legacy: {{}}
settings:
  task.path: {textcls_dir}
  task.metrics: [{{name: brier}}, {{name: accuracy}}]
  training.max_steps: 2
  training.batch_size: 8
  model.max_length: 32
  hooks: {{knowledge-probe: {{enabled: false}}}}
baseline: finetune
metric: brier_macro
""")
    script = Path(sys.executable).with_name("kinject")  # as a user types it (`python -m` would put work/ first)
    ran = subprocess.run([str(script), "grid", str(grid), "--executor", "local", "--workers", "1"], env=env,
                         capture_output=True, text=True, timeout=600, cwd=work)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "textcls/legacy/seed-42: done" in ran.stdout + ran.stderr
    board = json.loads((tmp_path / "grid-out" / "leaderboard.json").read_text())
    rows = {row["system"]: row for task in board["tasks"] for row in task["rows"]}
    assert board["tasks"][0]["metric"] == "brier_macro"
    assert "error" not in rows["legacy"] and 0 <= rows["legacy"]["value"] <= 1 and "difference" in rows["legacy"]
