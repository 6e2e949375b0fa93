"""Reliability (issue #54): the choice's fold runs write nothing to ``$TMPDIR`` (their folders are in the cache), and two
threads calling ``kinject.run`` on a fresh cache in a fresh process both finish (transformers' lazily imported names
are resolved once, when a run starts)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

from helpers import run_kinject as kinject

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def test_the_choice_needs_no_tmpdir(tmp_path, textcls_dir, tiny_model, monkeypatch, capsys):
    unusable = tmp_path / "tmp-is-a-file"
    unusable.write_text("a full or missing $TMPDIR: no folder can be made there")
    monkeypatch.setattr(tempfile, "tempdir", str(unusable))
    cache = tmp_path / "cache"
    capsys.readouterr()
    assert kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", "choose=true", "--set", "defaults.folds=2", "--set", "training.max_steps=2",
                   "--cache-dir", str(cache), "-o", str(tmp_path / "run")) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert said.count("choice: fold") == 4 and "chose training.head_learning_rate=" in said
    chosen = json.loads((tmp_path / "run" / "run.json").read_text())["chosen"]
    assert chosen["fold_runs"] == 4 and "cached" not in chosen
    assert [p.suffix for p in (cache / "choices").iterdir()] == [".json"]  # the fold runs' folders are gone


THREADS = """
import sys, threading, traceback
import kinject

data, cache, out = sys.argv[1:4]
errors = []

def run(i):
    try:
        kinject.run("finetune", "textcls", "tiny", overrides={"task.path": data, "training.max_steps": 2,
                    "hooks.knowledge-probe.enabled": False}, output=f"{out}/run-{i}", cache_dir=cache)
    except BaseException:
        errors.append(traceback.format_exc())

threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print("ERRORS", len(errors))
print("".join(errors)[-3000:])
"""


def test_two_threads_run_on_a_fresh_cache_in_a_fresh_process(tmp_path, textcls_dir):
    done = subprocess.run([sys.executable, "-c", THREADS, str(textcls_dir), str(tmp_path / "cache"), str(tmp_path)],
                          capture_output=True, text=True, timeout=900, env={**__import__("os").environ,
                                                                           "KINJECT_CHOOSE": "0"})
    assert done.returncode == 0 and "ERRORS 0" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert all((tmp_path / f"run-{i}" / "metrics.json").is_file() for i in range(2))
