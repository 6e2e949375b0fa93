"""Run engine: stage cache and keys, partial re-runs, run directory, determinism, repeats, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import run_kinject as kinject
from helpers import wait_until
from reliability_helpers import SLOWED, held


def run_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.epochs=2", "--set", "training.batch_size=8", "-o", str(out), *extra]


def stages(run_dir: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads((run_dir / "run.json").read_text())["stages"]}


@pytest.mark.slow
def test_eval_splits_scores_only_the_chosen_splits(tmp_path, textcls_dir, tiny_model, capsys):
    full, only_test = tmp_path / "full", tmp_path / "test-only"
    assert kinject(*run_args(textcls_dir, full)) == 0
    assert kinject(*run_args(textcls_dir, only_test, "--set", "training.eval_splits=[test]")) == 0
    metrics = json.loads((only_test / "metrics.json").read_text())
    assert "dev" not in metrics and metrics["test"] == json.loads((full / "metrics.json").read_text())["test"]
    assert stages(only_test)["finetune"]["cached"] and not stages(only_test)["evaluate"]["cached"]
    capsys.readouterr()
    assert kinject(*run_args(textcls_dir, tmp_path / "bad", "--set", "training.eval_splits=[tset]")) == 2
    assert "training.eval_splits: tset" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_run_directory_and_cache(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "run"
    assert kinject(*run_args(textcls_dir, out)) == 0
    assert {p.name for p in out.iterdir()} >= {"run.json", "metrics.json", "model", "kinject.log"}
    info = json.loads((out / "run.json").read_text())
    assert info["spec"]["task"]["name"] == "textcls" and info["seed"] == 42
    assert {"kinject", "torch", "transformers"} <= set(info["versions"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) >= {"dev", "test"} and 0 <= metrics["test"]["accuracy"] <= 1
    assert metrics["train"]["useful_token_fraction"] > 0.5
    # the final model loads with plain transformers, from safetensors, no pickle
    from transformers import AutoModel

    assert (out / "model" / "model.safetensors").exists()
    assert not list((out / "model").glob("*.bin"))
    encoder = AutoModel.from_pretrained(out / "model")
    assert encoder.config.hidden_size == 32

    first = stages(out)
    assert not first["finetune"]["cached"] and not first["evaluate"]["cached"]
    # same spec again: every stage is a cache hit, metrics identical
    again = tmp_path / "again"
    assert kinject(*run_args(textcls_dir, again)) == 0
    second = stages(again)
    assert second["finetune"]["cached"] and second["evaluate"]["cached"]
    assert second["finetune"]["key"] == first["finetune"]["key"]
    assert json.loads((again / "metrics.json").read_text()) == metrics

    # a field that cannot change any output (the evaluation batch size) is a cache hit everywhere
    evalonly = tmp_path / "evalonly"
    assert kinject(*run_args(textcls_dir, evalonly, "--set", "training.eval_batch_size=7")) == 0
    third = stages(evalonly)
    assert third["finetune"]["cached"] and third["evaluate"]["cached"]
    # an evaluation field re-runs only the evaluate stage
    maxlen = tmp_path / "splits"
    assert kinject(*run_args(textcls_dir, maxlen, "--set", "training.eval_splits=[dev]")) == 0
    assert stages(maxlen)["finetune"]["cached"] and not stages(maxlen)["evaluate"]["cached"]
    # changing a training parameter re-runs both
    lr = tmp_path / "lr"
    assert kinject(*run_args(textcls_dir, lr, "--set", "training.learning_rate=1e-3")) == 0
    fourth = stages(lr)
    assert not fourth["finetune"]["cached"] and fourth["finetune"]["key"] != first["finetune"]["key"]


@pytest.mark.slow
def test_same_seed_same_metrics_different_seed_differs(tmp_path, textcls_dir, tiny_model):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert kinject(*run_args(textcls_dir, a, "--cache-dir", str(tmp_path / "ca"), "--seed", "3")) == 0
    assert kinject(*run_args(textcls_dir, b, "--cache-dir", str(tmp_path / "cb"), "--seed", "3")) == 0
    assert kinject(*run_args(textcls_dir, c, "--cache-dir", str(tmp_path / "cc"), "--seed", "4")) == 0
    ma, mb, mc = (json.loads((d / "metrics.json").read_text()) for d in (a, b, c))
    assert not stages(b)["finetune"]["cached"]  # really recomputed in a fresh cache
    assert ma["train"]["train_loss"] == mb["train"]["train_loss"]
    assert ma["dev"] == mb["dev"] and ma["test"] == mb["test"]
    assert ma["train"]["train_loss"] != mc["train"]["train_loss"]


@pytest.mark.slow
def test_repeats_report_mean_and_std(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "rep"
    assert kinject(*run_args(textcls_dir, out, "--repeats", "2", "--seed", "10")) == 0
    assert (out / "seed-10" / "metrics.json").exists() and (out / "seed-11" / "metrics.json").exists()
    summary = json.loads((out / "metrics.json").read_text())
    acc = summary["test"]["accuracy"]
    values = [json.loads((out / f"seed-{s}" / "metrics.json").read_text())["test"]["accuracy"] for s in (10, 11)]
    assert acc["values"] == values and acc["n"] == 2
    assert acc["mean"] == pytest.approx(sum(values) / 2)


def test_dry_run_shows_stages_and_writes_nothing(tmp_path, textcls_dir, tiny_model, capsys):
    out = tmp_path / "dry"
    assert kinject(*run_args(textcls_dir, out, "--dry-run")) == 0
    text = capsys.readouterr().out
    assert "stage finetune" in text and "stage evaluate" in text and "miss" in text
    assert "learning_rate" in text
    assert not out.exists()


@pytest.mark.slow
def test_kill_mid_stage_then_resume_matches_uninterrupted(tmp_path, textcls_dir, tiny_model):
    data = textcls_dir
    common = ["--set", "training.epochs=6", "--set", "training.save_steps=4", "--set", "training.logging_steps=1",
              "--set", "training.warmup_ratio=0"]
    # 1. uninterrupted reference, own cache
    ref = tmp_path / "ref"
    assert kinject(*run_args(data, ref, "--cache-dir", str(tmp_path / "cache-ref"), *common)) == 0
    # 2. a run in a subprocess, held mid-training once checkpoint-4 is written, and killed there
    cache = tmp_path / "cache"
    out = tmp_path / "crashed"
    args = run_args(data, out, "--cache-dir", str(cache), *common)
    gate = tmp_path / "never"  # (the environment as the in-process runs have it: the same threads, the same numbers)
    proc = subprocess.Popen([sys.executable, "-c", SLOWED, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, KINJECT_TEST_STEP_DELAY="0", KINJECT_TEST_GATE=str(gate),
                                     KINJECT_TEST_GATE_STEP="5"), start_new_session=True)
    wait_until(lambda: held(gate), "the run to hold after its first checkpoint", process=proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()  # nothing half-written in the output dir
    assert not [p for p in cache.glob("stages/finetune/*") if p.is_dir() and p.suffix != ".partial"]  # none finished
    # 3. resume: continues from the checkpoint and ends with the same metrics
    assert kinject(*run_args(data, out, "--cache-dir", str(cache), "--resume", *common)) == 0
    resumed = json.loads((out / "metrics.json").read_text())
    reference = json.loads((ref / "metrics.json").read_text())
    assert resumed["train"]["resumed_from_step"] >= 4
    assert resumed["dev"] == reference["dev"] and resumed["test"] == reference["test"]
    from safetensors.torch import load_file

    a = load_file(out / "model" / "model.safetensors")
    b = load_file(ref / "model" / "model.safetensors")
    assert all((a[k] - b[k]).abs().max().item() < 1e-6 for k in a)


@pytest.mark.slow
def test_repeats_work_for_task_groups(tmp_path, textcls_dir, tiny_model):
    from pydantic import Field

    from kinject.interfaces import TaskGroup
    from kinject.registry import registry
    from kinject.tasks.textcls import TextClassificationTask

    class Member(TextClassificationTask):
        """textcls on a fixed folder."""

        class Config(TextClassificationTask.Config):
            path: Path | None = Field(textcls_dir)

    class Pair(TaskGroup):
        """Two members, summarised by their mean test accuracy."""

        def members(self, env):
            return ["member-a", "member-b"]

        def summarize(self, member_metrics, env):
            return {"score": sum(m["test"]["accuracy"] for m in member_metrics.values()) / len(member_metrics)}

    for name in ("member-a", "member-b"):
        registry("tasks").register(name, type(name, (Member,), {}))
    registry("tasks").register("pair-group", Pair)
    out = tmp_path / "group"
    assert kinject("run", "finetune", "--task", "pair-group", "--model", "tiny", "--repeats", "2", "--seed", "5",
                   "--set", "training.epochs=1", "-o", str(out)) == 0
    for seed in (5, 6):
        assert (out / f"seed-{seed}" / "member-a" / "metrics.json").exists()
        assert (out / f"seed-{seed}" / "member-b" / "run.json").exists()
    summary = json.loads((out / "metrics.json").read_text())
    scores = [json.loads((out / f"seed-{s}" / "metrics.json").read_text())["score"] for s in (5, 6)]
    assert summary["score"]["n"] == 2 and summary["score"]["values"] == scores


def test_spread_stage_claims_are_taken_once_per_launch(tmp_path):
    """Spread stages are a shared queue: the first process to claim a stage runs it; a new launch (token) may
    claim it again (a resumed run does not inherit a dead launch's claims)."""
    from types import SimpleNamespace

    from kinject.stage_runner import _claim

    member = SimpleNamespace(folder=tmp_path / "stages" / "mop-adapter-0" / "abc123")
    assert _claim(member, "launch1") and not _claim(member, "launch1")
    assert _claim(member, "launch2")


def test_memory_is_given_back_after_each_computed_stage_not_after_a_hit(tmp_path, textcls_dir, tiny_model,
                                                                        monkeypatch):
    """Without it a run's peak RSS is the sum of its stages' high-water marks (the headline: 4.2 GB, not 2.3)."""
    from kinject import stage_runner

    released = []
    real = stage_runner.release_memory
    monkeypatch.setattr(stage_runner, "release_memory", lambda: released.append(real()))
    assert kinject(*run_args(textcls_dir, tmp_path / "a", "--set", "hooks.knowledge-probe.enabled=false")) == 0
    assert len(released) == len(stages(tmp_path / "a")) == 2  # finetune, evaluate
    assert kinject(*run_args(textcls_dir, tmp_path / "b", "--set", "hooks.knowledge-probe.enabled=false")) == 0
    assert len(released) == 2  # all cache hits: nothing was computed, nothing to give back


def test_a_run_freezes_what_existed_before_it_and_still_collects_its_stages_garbage():
    """The collection after each stage skips the objects that existed before the run (gc.freeze) and still frees a
    stage's reference cycles; the freeze ends with the run, and one that a caller made is left to that caller."""
    code = textwrap.dedent("""
        import gc, weakref
        from kinject.stage_runner import _collections_skip_older_objects, release_memory
        class Node: pass
        def cycle():
            a, b = Node(), Node()
            a.b, b.a = b, a
            return weakref.ref(a)
        before = cycle()  # garbage when the run starts: collected then, not frozen
        with _collections_skip_older_objects():
            assert before() is None and gc.get_freeze_count() > 0
            during = cycle()
            release_memory()
            assert during() is None
        assert gc.get_freeze_count() == 0
        gc.freeze()
        kept = gc.get_freeze_count()
        with _collections_skip_older_objects():
            pass
        assert gc.get_freeze_count() >= kept
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
