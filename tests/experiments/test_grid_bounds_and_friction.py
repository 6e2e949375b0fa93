"""`kinject grid` (issue #42): axes bounded (one line, at once), `quick: true` and `--cache-dir`, a Slurm script whose
paths hold spaces, and local workers that stop when their grid process is killed."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import one_line_error

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "grids" / "tiny.yaml"


def grid_file(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(TINY.read_text())
    data.update(changes)
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("changes, words", [
    ({"seeds": {"start": 0, "count": 5_000_000}}, "seeds: count 5000000: 1 to 10,000 seeds"),
    ({"seeds": list(range(20_000))}, "seeds: List should have at most 10000 items"),
    ({"seeds": list(range(100)), "vary": {"training.learning_rate": [i * 1e-6 + 1e-6 for i in range(60)]}},
     "12,000 cells (tasks x strategies x varied values x seeds); a grid has 10,000 at most")])
def test_a_grid_past_its_cap_is_one_line_at_once(tmp_path, capsys, changes, words):
    path = grid_file(tmp_path, **changes)
    started = time.perf_counter()
    line = one_line_error(capsys, ["grid", str(path), "--dry-run", "-o", str(tmp_path / "out")])
    assert words in line and str(path) in line, line
    assert time.perf_counter() - started < 30 and not (tmp_path / "out").exists()


def test_quick_makes_every_cell_a_quick_try(tmp_path):
    from kinject.experiments.grid import load_grid

    cells = load_grid(grid_file(tmp_path, quick=True)).cells
    assert {(c.data["protocol"], c.data["training"]["limit"]) for c in cells} == {("quick", 64)}
    cells = load_grid(grid_file(tmp_path, quick=True, limit=8, settings={"protocol": "kinject"})).cells
    assert {(c.data["protocol"], c.data["training"]["limit"]) for c in cells} == {("kinject", 8)}  # given wins


def test_cache_dir_holds_every_cells_stages(tmp_path, textcls_dir, tiny_model):
    cache = tmp_path / "my cache"
    code = subprocess.run([sys.executable, "-m", "kinject", "grid", str(TINY), "--set", f"task.path={textcls_dir}",
                           "--only", "textcls/finetune/seed-42", "--cache-dir", str(cache), "-o", str(tmp_path / "g")],
                          capture_output=True, text=True, timeout=600)
    assert code.returncode == 0, code.stderr[-2000:]
    assert {p.parent.parent.name for p in cache.glob("stages/*/*/stage.json")} >= {"finetune", "evaluate"}


def test_the_slurm_script_keeps_a_folder_with_spaces_one_value(tmp_path, textcls_dir):
    from kinject.experiments.grid import load_grid
    from kinject.experiments.grid_exec import write_slurm

    loaded = load_grid(TINY, tmp_path / "my grids" / "out (1)", [f"task.path={textcls_dir}"])
    script = write_slurm(loaded, loaded.cells, {}).read_text()
    subprocess.run(["bash", "-n", "-c", script], check=True)
    for flag in ("output", "error"):
        line = next(x for x in script.splitlines() if x.startswith(f"#SBATCH --{flag}="))
        assert shlex.split(line.split("=", 1)[1]) == [str((tmp_path / "my grids" / "out (1)" / "_grid" / "logs")
                                                          .absolute()) + f"/%A_%a.{flag[:3]}"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"


@pytest.mark.slow
def test_local_workers_stop_when_their_grid_is_killed(tmp_path, textcls_dir, tiny_model):
    path = grid_file(tmp_path, seeds=[42], settings={**yaml.safe_load(TINY.read_text())["settings"],
                                                     "training.max_steps": 100_000})
    process = subprocess.Popen([sys.executable, "-m", "kinject", "grid", str(path), "--set",
                                f"task.path={textcls_dir}", "--only", "textcls/finetune/*", "--executor", "local",
                                "--workers", "1", "-o", str(tmp_path / "g")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True, env={**os.environ,
                                                                                      "OMP_NUM_THREADS": "1"})
    status = tmp_path / "g" / "_grid" / "status" / "textcls" / "finetune" / "seed-42.json"
    worker = None
    try:
        deadline = time.monotonic() + 300
        while worker is None:  # the cell's status file names the worker once it runs the cell
            assert time.monotonic() < deadline and process.poll() is None
            record = yaml.safe_load(status.read_text()) if status.is_file() else {}
            worker = record.get("pid") if (record or {}).get("state") == "running" else None
            time.sleep(0.2)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        deadline = time.monotonic() + 60
        while alive(worker):
            assert time.monotonic() < deadline, "the worker trains on without its grid"
            time.sleep(0.2)
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
