"""Third-party packages, built into wheels and pip-installed, add strategies and a hook plugin without touching the
core: `echo` extends the built-in fine-tune stage; `kgtext` reads a triples source, adds stages of its own (one with
an input) and reuses the knowledge library's MLM builders and the kernel's fine-tune builder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PROBE_STAGES
from third_party_wheels import installed


@pytest.mark.slow
def test_pip_installed_plugin_is_listed_and_runs(tmp_path, textcls_dir, tiny_model):
    env = installed(tmp_path, "echo")
    kinject = [sys.executable, "-m", "kinject"]
    listed = subprocess.run([*kinject, "list", "strategies"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if " echo " in line)
    assert "kinject-echo" in row and "0.3.0" in row and "ok" in row

    out = tmp_path / "run"
    ran = subprocess.run([*kinject, "run", "echo", "--task", "textcls", "--model", "tiny", "--set",
                          f"task.path={textcls_dir}", "--set", "strategy.note=from-test", "--set",
                          "training.epochs=1", "-o", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    info = json.loads((out / "run.json").read_text())
    assert info["spec"]["strategy"] == {"name": "echo", "note": "from-test"}
    finetune_dir = Path(next(s["dir"] for s in info["stages"] if s["name"] == "finetune"))
    assert (finetune_dir / "note.txt").read_text() == "from-test"
    assert "test" in json.loads((out / "metrics.json").read_text())
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["run_start", *["stage_end"] * (2 + len(PROBE_STAGES)), "run_end"]
    assert events[0]["strategy"] == "echo"


@pytest.mark.slow
def test_a_third_party_kg_to_text_strategy_reuses_the_public_builders(tmp_path, textcls_dir, tiny_model):
    from helpers import write_kg

    env = installed(tmp_path, "kgtext")
    kg = write_kg(tmp_path / "kg.tsv")
    out = tmp_path / "run"
    ran = subprocess.run([sys.executable, "-m", "kinject", "run", "kgtext", "--task", "textcls", "--model", "tiny",
                          "--set", f"task.path={textcls_dir}", "--set", "model.max_length=32",
                          "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]', "--set", "strategy.mlm_steps=6",
                          "--set", "strategy.head_steps=3", "--set", "training.epochs=1", "-o", str(out)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    stages = {s["name"]: s for s in json.loads((out / "run.json").read_text())["stages"]}
    assert list(stages) == ["kgtext-verbalise", "kgtext-coverage", "kgtext-pack", "kgtext-head", "kgtext-mlm",
                            "kgtext-finetune", "evaluate", *PROBE_STAGES]  # the probe: a third party's runs too
    texts = (Path(stages["kgtext-verbalise"]["dir"]) / "texts.jsonl").read_text().splitlines()
    assert len(texts) == 121 and json.loads(texts[0])["text"].endswith(".")  # every triple, one sentence each
    mlm = json.loads((Path(stages["kgtext-mlm"]["dir"]) / "train.json").read_text())
    assert mlm["global_step"] == 6
    coverage = json.loads((out / "coverage.json").read_text())  # its own stage's artifact, exported
    assert coverage["examples"] == 16 and 0 <= coverage["share"] <= 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"dev", "test"} <= set(metrics)
    dose = metrics["dose"]  # a third party's MLM on the public builder records its dose like a built-in method
    assert dose["unit"] == "texts" and dose["rows_seen"] > 0 and dose["distinct"] > 0 and len(dose["digest"]) == 16
    ran = subprocess.run([sys.executable, "-m", "kinject", "run", "kgtext", "--task", "textcls", "--model", "tiny",
                          "--set", f"task.path={textcls_dir}", "--set", "model.max_length=32",
                          "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]', "--set", "knowledge.epochs=1",
                          "--set", "strategy.head_steps=3", "--set", "training.epochs=1", "--set",
                          "hooks.knowledge-probe.enabled=false", "-o", str(tmp_path / "dosed")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    dosed = json.loads((tmp_path / "dosed" / "metrics.json").read_text())["dose"]  # knowledge.epochs reached it
    assert dosed["epochs"] == 1.0 and 100 < dosed["distinct"] == dosed["available"] <= 121  # distinct sentences


@pytest.mark.slow
def test_a_plugin_package_tests_itself_with_kinjects_fixtures(tmp_path):
    """kinject-echo's own tests (its conftest.py: ``pytest_plugins = ["kinject.testing"]``) pass in a pytest session of
    their own, from a copy of the package that is not installed: kinject.testing registers it in-process."""
    import os
    import shutil

    from third_party_wheels import PLUGINS

    package = shutil.copytree(PLUGINS / "echo", tmp_path / "echo", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KINJECT_CACHE_DIR"))}
    env["PYTHONPATH"] = os.pathsep.join([str(package), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=package, env=env,
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert "2 passed" in ran.stdout
    assert not any(package.rglob("kinject-cache*"))  # the cache was the session's temporary one
