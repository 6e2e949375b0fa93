"""`kinject grid`: grid files -> cells (ordinary cached runs), the debug / local / slurm executors, re-submission,
dry-run cache states, status after a failure, the leaderboard (= `kinject compare`), one-line errors; and the
journal storage of `kinject sweep`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest
import yaml

from conftest import write_textcls
from helpers import run_kinject

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "grids" / "tiny.yaml"
CELLS = ["textcls/finetune/seed-42", "textcls/finetune/seed-43", "textcls/lora/seed-42", "textcls/lora/seed-43"]


def kinject(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the CLI run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_kinject(*args)
    return code, out.getvalue(), err.getvalue()


def lines_of(text: str) -> dict[str, str]:
    """cell id -> the rest of its line."""
    return {line.split()[0]: line for line in text.splitlines() if line.split() and line.split()[0] in CELLS}


def finished_stages(cache_dir: Path) -> set[Path]:
    return {p.parent for p in (cache_dir / "stages").glob("*/*/stage.json")}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_textcls(tmp_path_factory.mktemp("grid-data") / "textcls")


def grid(data: Path, out: Path, *extra: str, command: str | None = None) -> list[str]:
    return ["grid", *([command] if command else []), str(TINY), "-o", str(out), "--set", f"task.path={data}", *extra]


@pytest.fixture(scope="module")
def grid_run(tmp_path_factory, data, cache_dir, tiny_model):
    """The tiny grid (finetune and LoRA x textcls x seeds 42, 43) run in this process, with its dry runs."""
    out = tmp_path_factory.mktemp("grid") / "out"
    before = kinject(*grid(data, out, "--dry-run"))
    stages_before = finished_stages(cache_dir)
    ran = kinject(*grid(data, out, "--executor", "debug"))
    return {"out": out, "before": before, "ran": ran, "stages_before": stages_before}


def test_dry_run_before_lists_every_cell_to_compute_and_writes_nothing(grid_run):
    code, text, _ = grid_run["before"]
    assert code == 0
    found = lines_of(text)
    assert sorted(found) == sorted(CELLS)
    for cell, line in found.items():
        assert "to compute: 0 of 2 stages cached" in line and line.endswith(cell), line
        assert re.search(r"\(~\d+(\.\d)? (s|min|h)\)", line), line  # the cell's own time
    assert "4 cells: 0 done, 4 to run; 8 stage(s) to compute, 8 distinct" in text
    assert re.search(r"estimated time: ~\d+(\.\d)? (s|min|h) for the distinct stages", text), text  # the total


def test_debug_executor_runs_every_cell_as_an_ordinary_run(grid_run, data):
    from kinject.evidence import run_not_learned
    from kinject.evidence.runs import find_runs

    code, text, err = grid_run["ran"]
    assert code == 0, err
    out = grid_run["out"]
    warned = set()
    for cell in CELLS:
        assert f"{cell}: done" in text
        line = next(x for x in text.splitlines() if x.startswith(f"{cell}: done"))  # said when the cell ends
        flag = run_not_learned(out / cell)
        assert ("warning: learned nothing on test: " in line) == bool(flag), line
        if flag:
            warned.add(cell)
            assert flag["reason"] in line
        run_dir = out / cell
        info = json.loads((run_dir / "run.json").read_text())
        spec = yaml.safe_load(run_dir.with_suffix(".yaml").read_text())  # the cell's spec, beside its folder
        assert info["command"] == ["kinject", "run", "finetune", "--config", str(run_dir.with_suffix(".yaml")),
                                   "-o", str(run_dir)]
        assert spec["seed"] == info["seed"] == int(cell[-2:]) and spec["task"]["path"] == str(data)
        assert (spec["training"].get("peft") or {}).get("method") == ("lora" if "/lora/" in cell else None)
        assert (run_dir / "predictions" / "test.jsonl").is_file() and "test" in json.loads(
            (run_dir / "metrics.json").read_text())
        status = json.loads((out / "_grid" / "status" / f"{cell}.json").read_text())
        assert status["state"] == "done" and status["seconds"] > 0
    assert sorted(find_runs([str(out / "textcls" / "lora")])[0].runs) == [42, 43]  # a --repeats-style folder
    assert "4 cells: 4 done, 0 running, 0 failed, 0 pending" in text
    assert {p.name for p in out.iterdir()} >= {"leaderboard.md", "leaderboard.html", "leaderboard.json"}
    assert warned  # two steps of a tiny random BERT: at least one cell predicts one class


def test_resubmission_computes_nothing_and_dry_run_shows_the_cache(grid_run, data, cache_dir):
    out = grid_run["out"]
    stages = finished_stages(cache_dir)
    assert len(stages - grid_run["stages_before"]) == 8  # 2 stages x 4 cells, each computed once
    stamps = {cell: (out / cell / "run.json").stat().st_mtime_ns for cell in CELLS}
    code, text, _ = kinject(*grid(data, out, "--executor", "debug"))
    assert code == 0 and "4 cells, 4 done, 0 running elsewhere, 0 to run" in text
    assert finished_stages(cache_dir) == stages
    assert stamps == {cell: (out / cell / "run.json").stat().st_mtime_ns for cell in CELLS}
    code, text, _ = kinject(*grid(data, out, "--dry-run"))
    assert all(" done " in line for line in lines_of(text).values()) and "4 cells: 4 done, 0 to run" in text
    # another evaluation split: the fine-tuning stage is cached, the evaluation is not, and the cells are not done
    code, text, _ = kinject(*grid(data, out, "--dry-run", "--set", "training.eval_splits=[test]"))
    assert code == 0
    for line in lines_of(text).values():
        assert "to run: 1 of 2 stages cached (pending: spec changed since its run)" in line, line
    assert "4 stage(s) to compute, 4 distinct" in text


def test_leaderboard_equals_kinject_compare(grid_run, data, tmp_path):
    from kinject.evidence.comparison import comparison_table

    copy = tmp_path / "copy"
    shutil.copytree(grid_run["out"], copy)
    for seed in (42, 43):  # make the systems differ: flip some of LoRA's test predictions (both tools read them)
        path = copy / "textcls" / "lora" / f"seed-{seed}" / "predictions" / "test.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in records[: 3 + seed % 2 * 4]:
            record["pred"] = "other" if record["pred"] == "bio" else "bio"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, text, err = kinject(*grid(data, copy, command="report"))
    assert code == 0, err
    board = json.loads((copy / "leaderboard.json").read_text())["tasks"][0]
    rows = {row["system"]: row for row in board["rows"]}
    code, printed, err = kinject("compare", "--json", str(copy / "textcls" / "finetune"),
                                 str(copy / "textcls" / "lora"))
    assert code == 0, err
    result = json.loads(printed)
    base, other = result["metrics"][0]["rows"]
    assert board["metric"] == result["metrics"][0]["metric"] == "accuracy"
    assert rows["finetune"]["value"] == base["value"] and rows["finetune"].get("is_baseline")
    for key in ("value", "difference", "ci_low", "ci_high"):
        assert rows["lora"][key] == other[key], key
    assert other["difference"] != 0
    markdown = (copy / "leaderboard.md").read_text()
    _, table = comparison_table(result, result["metrics"][0])
    assert (f"| lora | finetune | 2 † | {table[1][2]} | {table[1][3]} | {table[1][4]} | {table[1][5]} |"
            in markdown)  # as compare prints: value, difference, the seed-inclusive interval and its verdict
    assert rows["lora"]["trainable_parameters"] < rows["finetune"]["trainable_parameters"]  # LoRA + the head
    assert rows["lora"]["wall_seconds"] > 0
    assert "<table>" in (copy / "leaderboard.html").read_text() and "Δ vs finetune" in markdown


@pytest.mark.slow
def test_status_after_a_forced_failure_then_running_then_resubmission(grid_run, data, tmp_path, monkeypatch):
    from filelock import FileLock

    from kinject import api

    out = tmp_path / "out"
    execute = api.execute

    def failing(run, output):
        if str(output).endswith("lora/seed-43"):
            raise RuntimeError("boom: injected\nsecond line")
        return execute(run, output)

    monkeypatch.setattr(api, "execute", failing)
    code, text, _ = kinject(*grid(data, out, "-e", "debug"))
    assert code == 1 and "textcls/lora/seed-43: failed" in text and "RuntimeError: boom: injected" in text
    monkeypatch.setattr(api, "execute", execute)
    code, text, _ = kinject(*grid(data, out, command="status"))
    states = lines_of(text)
    assert code == 0 and "3 done, 0 running, 1 failed, 0 pending" in text
    assert states["textcls/lora/seed-43"].split()[1:4] == ["failed", "RuntimeError:", "boom:"]
    record = json.loads((out / "_grid" / "status" / "textcls" / "lora" / "seed-43.json").read_text())
    assert "Traceback" in record["traceback"] and record["error"] == "RuntimeError: boom: injected"
    lock = FileLock(str(out / "_grid" / "status" / "textcls" / "lora" / "seed-43.lock"), thread_local=False)
    with lock:  # another process runs it now: status says so and a re-submission leaves it alone
        record.update(state="running", started="2026-01-01T00:00:00+0000")
        (out / "_grid" / "status" / "textcls" / "lora" / "seed-43.json").write_text(json.dumps(record))
        code, text, _ = kinject(*grid(data, out, command="status"))
        assert lines_of(text)["textcls/lora/seed-43"].split()[1] == "running"
        code, text, _ = kinject(*grid(data, out, "-e", "debug"))
        assert "3 done, 1 running elsewhere, 0 to run" in text
    code, text, _ = kinject(*grid(data, out, command="status"))  # its process died without a word
    assert "failed    interrupted: started 2026-01-01" in lines_of(text)["textcls/lora/seed-43"]
    code, text, _ = kinject(*grid(data, out, "-e", "debug"))
    assert code == 0 and "0 running elsewhere, 1 to run" in text and "textcls/lora/seed-43: done" in text
    assert "4 cells: 4 done, 0 running, 0 failed, 0 pending" in kinject(*grid(data, out, command="status"))[1]


@pytest.mark.slow
def test_local_executor_runs_each_cell_in_its_own_process(grid_run, data, tmp_path):
    out = tmp_path / "local"
    code, text, err = kinject(*grid(data, out, "-e", "local", "-w", "2", "--only", "textcls/finetune/*",
                                    "--set", "training.max_steps=3"))  # new stage keys: the workers compute
    assert code == 0, text + err
    records = [json.loads((out / "_grid" / "status" / "textcls" / "finetune" / f"seed-{s}.json").read_text())
               for s in (42, 43)]
    assert [r["state"] for r in records] == ["done", "done"]
    pids = {r["pid"] for r in records}
    assert len(pids) == 2 and os.getpid() not in pids
    for seed in (42, 43):
        info = json.loads((out / "textcls" / "finetune" / f"seed-{seed}" / "run.json").read_text())
        assert info["spec"]["training"]["max_steps"] == 3 and not any(s["cached"] for s in info["stages"])
    assert "2 done, 0 running, 0 failed, 2 pending" in text  # the leaderboard covers the whole grid


def test_slurm_submission_is_one_array_job_of_readable_runs(grid_run, data, tmp_path):
    import shutil as shell
    import subprocess

    from kinject.experiments.grid_exec import _minutes

    calls = []
    real_run = subprocess.run

    def sbatch(command, *args, **kwargs):  # stands in for sbatch: records the command, answers as sbatch does
        if command[0] != "sbatch":
            return real_run(command, *args, **kwargs)
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="4242\n", stderr="")

    which = shell.which
    out = tmp_path / "slurm"
    # off a cluster: one line, and the script is there to take to one
    code, text, err = kinject(*grid(data, out, "-e", "slurm"))
    assert code == 2 and "sbatch is not on this machine's PATH" in err and len(err.strip().splitlines()) == 1
    # the preview: the script and one spec per cell, nothing submitted
    code, text, err = kinject(*grid(data, out, "-e", "slurm", "--dry-run", "--partition", "a100", "--time", "1:30:00",
                                    "--gpus", "2", "--parallelism", "3"))
    assert code == 0, err
    script_path = out / "_grid" / "slurm" / "tiny.sbatch"
    assert f"wrote {script_path}" in text and not calls
    script = script_path.read_text()
    for line in ("#SBATCH --array=0-3%3", "#SBATCH --partition=a100", "#SBATCH --time=90", "#SBATCH --gres=gpu:2",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --mem=16GB", "#SBATCH --job-name=kinject-grid-tiny"):
        assert line in script.splitlines(), line  # command line values win over the file's slurm: section
    seed = out / "textcls" / "lora" / "seed-42"
    assert f"run finetune --config {seed}.yaml -o {seed}" in script and "pickle" not in script
    assert yaml.safe_load(seed.with_suffix(".yaml").read_text())["training"]["peft"]["method"] == "lora"
    with mock.patch("shutil.which", lambda name, *a, **k: f"/usr/bin/{name}" if name == "sbatch"
                    else which(name, *a, **k)), mock.patch("subprocess.run", sbatch):
        code, text, err = kinject(*grid(data, out, "-e", "slurm", "--partition", "a100", "--time", "1:30:00",
                                        "--gpus", "2", "--parallelism", "3"))
    assert code == 0, err
    assert len(calls) == 1 and calls[0][:2] == ["sbatch", "--parsable"]  # one array job for the 4 cells
    assert "Slurm array job 4242" in text
    code, text, _ = kinject(*grid(data, out, command="status"))
    assert "queued (slurm job 4242_0)" in lines_of(text)[CELLS[0]] and "0 done, 0 running, 0 failed, 4 pending" in text
    assert [_minutes(v) for v in (90, "90", "1:30", "01:30:00", "1-00:00", "00:00:30")] == [90, 90, 90, 90, 1440, 1]


def _mutated(tmp_path: Path, change) -> Path:
    spec = yaml.safe_load(TINY.read_text())
    change(spec)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("change, needles", [
    (lambda g: g.update(executer="local"), ["executer: unknown field"]),
    (lambda g: g["slurm"].update(partiton="gpu"), ["slurm.partiton: unknown field", "partition"]),
    (lambda g: g["settings"].update({"training.learnin_rate": 0.1}),
     ["cell textcls/finetune/seed-42: training.learnin_rate: unknown field", "learning_rate"]),
    (lambda g: g["strategies"].update(bad={"name": "finetun"}), ["strategies.bad.name: unknown strategy 'finetun'"]),
    (lambda g: g["settings"].update({"strategy.kg_stepz": 3}), ["settings.strategy.kg_stepz: no strategy of the grid"]),
    (lambda g: g.update(vary={"training.learning_rate": []}), ["vary.training.learning_rate.values"]),
    (lambda g: g.update(overrides=[{"match": {"strategy": "nope"}, "skip": True}]), ["overrides.0.match: matches no"]),
    (lambda g: g.update(overrides=[{"match": {"colour": "red"}}]), ["overrides.0.match: 'colour' is not a grid"]),
    (lambda g: g.update(seeds=[42, 42]), ["seeds: a seed repeats"]),
    (lambda g: g["settings"].update({"seed": 1}), ["settings.seed: set by the grid"]),
])
def test_bad_grid_file_is_one_line_exit_2_and_writes_nothing(tmp_path, data, tiny_model, change, needles):
    path = _mutated(tmp_path, change)
    code, _, err = kinject("grid", str(path), "-o", str(tmp_path / "out"), "--set", f"task.path={data}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_experiment_grid_files_load(tmp_path):
    from kinject.experiments.grid import load_grid

    folder = TINY.parent
    sizes = {name: len(load_grid(folder / f"{name}.yaml").cells) for name in
             ("kimera", "kimera-masks", "mop", "mop-gpu", "stilt-matrix", "stilt-pubmedqa")}
    assert sizes == {"kimera": 60, "kimera-masks": 3, "mop": 24, "mop-gpu": 45, "stilt-matrix": 30,
                     "stilt-pubmedqa": 12}
    mop = {c.id: c.data for c in load_grid(folder / "mop.yaml").cells}
    assert "partitions" not in mop["capr/finetune/seed-42"]["strategy"]  # strategy.* reach the MoP cells only
    assert mop["ncbi-disease/mop-linear-k4-r1/seed-43"]["strategy"]["shuffle"] == 1.0
    assert mop["capr/mop-linear-k4/seed-44"]["model"]["pooling"] == "cls"


@pytest.mark.parametrize("form", ["journal:{}", "{}"])
def test_sweep_journal_storage_is_shared_by_two_handles(tmp_path, form):
    import optuna

    from kinject.experiments.study import open_storage, open_study

    url = form.format(tmp_path / "study.log")
    first, second = (open_study(open_storage(url), "shared", "maximize") for _ in range(2))
    assert isinstance(first._storage, optuna.storages.JournalStorage)
    trial = first.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    first.tell(trial, 0.25)
    assert [t.value for t in second.trials] == [0.25]
    second.tell(second.ask(), 0.75)
    assert [t.value for t in first.trials] == [0.25, 0.75] and first.best_value == 0.75
    with pytest.raises(Exception, match="cannot open the study storage"):
        open_storage(f"journal:{tmp_path}/missing/study.log")


def test_dry_run_says_what_the_automatic_choice_costs_before_the_grid_runs(tmp_path, data, monkeypatch, tiny_model):
    """#43's note: a grid cell on a small train split pays the choice's fold runs first; the grid's dry run says so per
    cell and in total (cells that share a choice run it once), as `kinject run --dry-run` does."""
    monkeypatch.setenv("KINJECT_CHOOSE", "1")  # on, as for a user (the suite turns it off)
    code, text, err = kinject(*grid(data, tmp_path / "out", "--dry-run", "--cache-dir", str(tmp_path / "cache")))
    assert code == 0, err
    found = lines_of(text)
    assert sorted(found) == sorted(CELLS)
    assert all("after 10 fold runs of the choice" in line for line in found.values()), found
    total = " ".join(text.split())
    assert "the automatic choice first:" in total and "--set choose=false skips it" in total
    fold_runs, choices = map(int, re.search(r"choice first: (\d+) fold runs? .*?\((\d+) choices?", total).groups())
    assert fold_runs == 10 * choices and 1 <= choices <= len(CELLS)
    assert not (tmp_path / "cache" / "choices").exists() and not (tmp_path / "out").exists()  # nothing ran, nothing written
    code, text, _ = kinject(*grid(data, tmp_path / "out", "--dry-run", "--cache-dir", str(tmp_path / "cache"),
                                  "--set", "choose=false"))
    assert code == 0 and "fold runs" not in text
