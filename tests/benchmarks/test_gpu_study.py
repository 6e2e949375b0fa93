"""benchmarks/gpu_study.sh, the study's unattended GPU run (issue #53): its grid files load, its input commands
write their files and every grid plans (``kinject grid run ... --dry-run``) on the tiny model. No GPU runs it here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_study.sh"
TINY = ["--set", "model.name=tiny", "--set", "model.layers=1"]


def study(*args: str, work: Path, data: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"KINJECT_DATA_DIR": str(data)} if data else {}), "STUDY_WORK": str(work), "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1",
           "DOKTRA_TEACHER": "tiny"}  # DoKTra's teachers are part 1's run folders: a tiny model here
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=1200)


def test_the_script_parses_and_names_the_study_grids_and_inputs(tmp_path):
    from kinject.experiments.grid import load_grid

    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    listed = study("--list", work=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    grids = [Path(line) for line in lines if line.endswith(".yaml")]
    assert {g.name for g in grids} == {"study-hpo-isa.yaml", "study-hpo-isa-doktra.yaml", "study-capr.yaml"}
    cells = {g.stem: load_grid(g, output=tmp_path / g.stem).cells for g in grids}
    assert {c.strategy for c in cells["study-capr"]} == {"finetune", "kimera", "kimera-no-mask"}
    assert {c.data["strategy"].get("retrain_seed") for c in cells["study-capr"] if c.strategy != "finetune"} == {None}
    assert all(len({c.seed for c in found}) == 5 for found in cells.values())  # five seeds everywhere
    teachers = {c.data["strategy"]["teacher"] for c in cells["study-hpo-isa-doktra"] if c.strategy != "finetune"}
    assert len(teachers) == 5  # each seed distils its own kimera-no-mask draw
    modules = [line.split()[2] for line in lines if line.startswith("python -m ")]
    assert modules and all((ROOT / (m.replace(".", "/") + ".py")).exists() for m in modules)
    assert study("--nonsense", work=tmp_path).returncode == 2


@pytest.mark.slow
def test_every_input_is_written_and_every_study_grid_plans(tmp_path, tiny_model, data_dir):
    done = study("--dry-run", *TINY, "--only", "*/seed-46", work=tmp_path, data=data_dir)  # one seed of each cell plans
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("hpo.txt", "isa_shuffled.tsv", "unrelated.tsv"):
        assert (tmp_path / "runs" / "study" / name).stat().st_size > 0, name
    unrelated = (tmp_path / "runs" / "study" / "unrelated.tsv").read_text().splitlines()
    shuffled = (tmp_path / "runs" / "study" / "isa_shuffled.tsv").read_text().splitlines()
    assert len(unrelated) == len(shuffled)  # equal rows
    for grid in ("study-hpo-isa", "study-hpo-isa-doktra", "study-capr"):
        assert f"grid {grid} " in done.stdout, grid
    assert "hpo-isa/kimera-no-mask-unrelated/seed-46" in done.stdout
    assert "capr-medquad/kimera/seed-46" in done.stdout
