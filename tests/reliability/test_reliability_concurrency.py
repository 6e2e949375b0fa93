"""Reliability: many processes on one stage cache. Each stage is computed once, the others wait and find it
finished; a waiting process never deletes a live computation; a dead holder's lock is taken over; sweeps
started together join one study."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from helpers import wait_until
from reliability_helpers import finish, held, spawn, stage_records

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def finetune_args(data: Path, cache: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.epochs=3", "--set", "training.batch_size=8", "--set", "training.save_steps=4",
            "--set", "training.logging_steps=1", "--cache-dir", str(cache), "-o", str(out), *extra]


def check_all_succeeded(results) -> None:
    for code, err in results:
        assert code == 0 and "Traceback" not in err, err[-3000:]


def computed_once(outs: list[Path], stages: list[str]) -> None:
    """Each stage was computed by exactly one of the runs and has one key; the others found it finished."""
    for stage in stages:
        records = [stage_records(out)[stage] for out in outs]
        assert len({r["key"] for r in records}) == 1, stage
        assert sum(not r["cached"] for r in records) == 1, (stage, [r["cached"] for r in records])


def clean_cache(cache: Path) -> None:
    """No computation left behind, no temporary debris."""
    assert not list(cache.glob("stages/*/*.partial"))
    assert not [p for p in cache.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name]


@pytest.mark.parametrize("processes", [2, 4])
def test_identical_runs_started_together_compute_each_stage_once(tmp_path, textcls_dir, tiny_model, processes):
    cache = tmp_path / "cache"
    outs = [tmp_path / f"run-{i}" for i in range(processes)]
    started = time.perf_counter()
    check_all_succeeded(finish([spawn(finetune_args(textcls_dir, cache, out), slowed=True,
                                      env={"KINJECT_TEST_STEP_DELAY": "0.05"}) for out in outs]))
    computed_once(outs, ["finetune", "evaluate"])
    metrics = [json.loads((out / "metrics.json").read_text()) for out in outs]
    assert all(m["test"] == metrics[0]["test"] and m["dev"] == metrics[0]["dev"] for m in metrics)
    clean_cache(cache)
    print(f"{processes} identical runs on one cache: {time.perf_counter() - started:.1f} s")


def test_kimera_and_finetune_started_together_share_phase_one(tmp_path, textcls_dir, tiny_model):
    cache = tmp_path / "cache"
    kg = tmp_path / "kg.tsv"
    kg.write_text("gene\tcauses\tdisease\ndrug\ttreatment\tcancer\ncell\tcauses\tcancer\n"
                  "protein\tassociated\tgene\ndose\teffect\tdrug\npatients\tassociated\tdisease\n")
    base = ["--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}", "--set", "model.max_length=32",
            "--set", "training.epochs=2", "--set", "training.batch_size=8", "--cache-dir", str(cache)]
    kimera = ["run", "kimera", *base, "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]',
              "--set", "strategy.kg_steps=6", "--set", "strategy.kg_batch_size=4", "--set", "strategy.score_examples=16"]
    outs = [tmp_path / "kimera", tmp_path / "finetune"]
    check_all_succeeded(finish([spawn([*kimera, "-o", str(outs[0])]),
                                spawn(["run", "finetune", *base, "-o", str(outs[1])])]))
    computed_once(outs, ["finetune", "evaluate"])
    clean_cache(cache)


def test_two_mop_runs_started_together_share_partition_and_adapters(tmp_path, textcls_dir, tiny_model):
    from helpers import write_kg

    cache, kg = tmp_path / "cache", write_kg(tmp_path / "kg.tsv")
    base = ["run", "mop", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "model.max_length=32", "--set", "training.epochs=1", "--set", "training.batch_size=8",
            "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]', "--set", "strategy.partitions=2",
            "--set", "strategy.adapter_epochs=1", "--cache-dir", str(cache), "--resume"]
    outs = [tmp_path / "softmax", tmp_path / "gumbel"]
    check_all_succeeded(finish([spawn([*base, "--set", f"strategy.mixture={m}", "-o", str(out)])
                                for m, out in zip(("softmax", "gumbel"), outs)]))
    computed_once(outs, ["mop-partition", "mop-adapter-0", "mop-adapter-1", "finetune"])
    clean_cache(cache)


def test_a_run_started_while_another_trains_waits_and_never_deletes_its_work(tmp_path, textcls_dir, tiny_model):
    cache = tmp_path / "cache"
    gate, log = tmp_path / "gate", tmp_path / "second.log"
    first = spawn(finetune_args(textcls_dir, cache, tmp_path / "first"), gate=gate,  # held after checkpoint-4:
                  env={"KINJECT_TEST_STEP_DELAY": "0"})  # still training when the second arrives
    wait_until(lambda: held(gate), "the first run to hold after its first checkpoint", process=first)
    second = spawn(finetune_args(textcls_dir, cache, tmp_path / "second"), log=log)  # not --resume: used to rmtree
    wait_until(lambda: "waiting for process" in log.read_text(), "the second run to wait", process=second)
    gate.touch()
    results = finish([first, second])
    check_all_succeeded(results)
    assert "waiting for process" in results[1][1]  # it said whom it waits for
    computed_once([tmp_path / "first", tmp_path / "second"], ["finetune"])
    assert not stage_records(tmp_path / "first")["finetune"]["cached"]
    clean_cache(cache)


@pytest.mark.parametrize("mode", ["flock", "lease"])
def test_a_killed_holders_lock_is_taken_over(tmp_path, textcls_dir, tiny_model, mode):
    cache = tmp_path / "cache"
    env = {"KINJECT_LOCK": mode, "KINJECT_LOCK_LEASE": "3"}
    holder = spawn(finetune_args(textcls_dir, cache, tmp_path / "dead"), gate=tmp_path / "never",  # held: killed
                   env={**env, "KINJECT_TEST_STEP_DELAY": "0"})
    wait_until(lambda: held(tmp_path / "never"), "the holder to hold after its first checkpoint", process=holder)
    log = tmp_path / "waiter.log"
    waiter = spawn(finetune_args(textcls_dir, cache, tmp_path / "alive"), env=env, log=log)
    wait_until(lambda: "waiting for process" in log.read_text(), "the waiter to wait", process=waiter)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    check_all_succeeded(finish([waiter]))
    assert not stage_records(tmp_path / "alive")["finetune"]["cached"]  # it computed the stage itself
    assert not (tmp_path / "dead").exists()
    clean_cache(cache)


def test_sweeps_started_together_on_a_new_study_join_it(tmp_path, textcls_dir, tiny_model):
    import optuna

    space = tmp_path / "space.yaml"
    space.write_text("training.learning_rate: {low: 1e-4, high: 1e-2, log: true}\n")
    out = tmp_path / "sweep"
    args = ["sweep", "finetune", "--task", "textcls", "--model", "tiny", "--space", str(space), "--trials", "3",
            "-o", str(out), "--set", f"task.path={textcls_dir}", "--set", "training.max_steps=4",
            "--set", "training.batch_size=8", "--cache-dir", str(tmp_path / "cache")]
    check_all_succeeded(finish([spawn(args), spawn(args)]))
    trials = optuna.load_study(study_name="kinject-finetune-textcls", storage=f"sqlite:///{out / 'study.db'}").trials
    assert len([t for t in trials if t.state.name == "COMPLETE"]) >= 3
    assert len({t.number for t in trials}) == len(trials)
    assert (out / "best.yaml").exists()
