"""Helpers shared by tests (imported as ``from helpers import ...``: pytest imports tests/ modules by basename)."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

from benchmarks.common import write_kg  # noqa: F401  (tests import it from here)


def wait_until(predicate, what: str, seconds: float = 900, process: subprocess.Popen | None = None) -> None:
    """Poll ``predicate`` until it holds: tests that kill, signal, lock or race wait on such an event (a file, a log
    line), never on a fixed sleep. The deadline is generous, so a loaded machine only makes them slower; with
    ``process``, fail at once if it ends first."""
    import time

    deadline = time.monotonic() + seconds
    while not predicate():
        if process is not None and process.poll() is not None and not predicate():
            raise AssertionError(f"the process ended (exit code {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.1)


def run_kinject(*args: str) -> int:
    """Run the kinject CLI in-process; return its exit code."""
    from kinject.cli.app import main

    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def free_port() -> str:
    """A TCP port free right now, for a torchrun rendezvous: fixed ports collide when xdist runs two DDP tests."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def fake_distribution(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    """A minimal installed distribution (dist-info + modules) in a folder (tests put it first on the import path
    with ``monkeypatch.syspath_prepend``)."""
    info = root / f"{name.replace('-', '_')}-1.2.3.dist-info"  # dist-info names use underscores
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return root


@contextlib.contextmanager
def installed(monkeypatch, root: Path, name: str, entry_points: str, modules: dict[str, str], kind: str):
    """A :func:`fake_distribution` on the import path and the ``kind`` registry re-read, for the block; after it the
    path is restored (``monkeypatch.undo``) and the registry re-read again."""
    from kinject.registry import registry

    monkeypatch.syspath_prepend(str(fake_distribution(root, name, entry_points, modules)))
    registry(kind).refresh()
    try:
        yield
    finally:
        monkeypatch.undo()
        registry(kind).refresh()


PROBE_STAGES = ("probe-base", "probe")  # the knowledge probe's stages, which every run with a task gets


def one_line_error(capsys, args) -> str:
    """Run kinject with ``args``, expect exit 2 and exactly one "error:" line on stderr; return it."""
    capsys.readouterr()
    assert run_kinject(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


CORPUS_WORDS = ("gene expression protein cell tumor patients drug dose lymphoma insulin receptor kinase pathway mutation "
         "increased reduced treatment clinical trial").split()


def write_corpus(path: Path, n: int = 300, extra: tuple[str, ...] = ()) -> Path:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(CORPUS_WORDS) for _ in range(rng.randint(8, 30))) + f" doc{i}." for i in range(n)]
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
    return path


def cli(*args: str, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, COLUMNS="300", **(env or {}))
    return subprocess.run([sys.executable, "-m", "kinject", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def assert_user_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr  # one line, last thing said
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


TOOLS = ("plugins.evidence", ".report", ".analysis", ".cli", "matplotlib")


def plans(tmp_path: Path, textcls_dir: Path) -> dict[str, object]:
    """Every stage of every built-in strategy on the tiny model: 'strategy/stage' -> PlannedStage."""
    from kinject.api import build_spec, plan, prepare

    kg, corpus = tmp_path / "kg.tsv", tmp_path / "corpus.txt"
    if not kg.exists():
        write_kg(kg)
        corpus.write_text("gene expression in tumor cells rose after the drug dose.\n" * 40)
    triples = {"sources": [{"name": "triples", "path": str(kg)}]}
    extras = {"finetune": {}, "kimera": triples, "mop": {**triples, "strategy": {"name": "mop", "partitions": 2}},
              "doktra": {"strategy": {"name": "doktra", "teacher": "tiny"}, "training": {"epochs": 2}},
              "stilt": {"strategy": {"name": "stilt", "intermediate": [{"name": "textcls", "path": str(textcls_dir)}]}},
              "pretrain": {"sources": [{"name": "corpus", "paths": [str(corpus)]}]}}
    out = {}
    for name, extra in extras.items():
        spec = {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(textcls_dir)},
                "strategy": {"name": name}, "cache_dir": str(tmp_path / "cache"), **extra}
        for planned in plan(prepare(build_spec(spec))):
            out[f"{name}/{planned.stage.name}"] = planned
    return out


def fake_kinject_run(folder: Path, model_dir: str, exclude: list[str], task: dict | None = None,
                     dose: bool = True) -> Path:
    """A kinject run directory as a later run reads it (run.json, metrics.json, a copy of ``model_dir`` as model/):
    trained on ``task`` (default hpo-isa) with ``knowledge.exclude`` = ``exclude`` and, with ``dose``, knowledge
    consumed (the is-a graph)."""
    import json
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(model_dir, folder / "model", dirs_exist_ok=True)
    task = task or {"name": "hpo-isa"}
    held = None if not exclude else {"facts": 0, "digest": "", "splits": exclude, "file": None}
    info = {"spec": {"task": task, "sources": [{"name": "hpo", "include": ["isa"]}] if dose else []},
            "knowledge": {"epochs": None, "exclude": exclude, "exclude_file": None, "held_out": held}, "seed": 42}
    (folder / "run.json").write_text(json.dumps(info))
    (folder / "metrics.json").write_text(json.dumps({"dose": {"unit": "triples", "distinct": 22000}} if dose else {}))
    return folder


def refusal_line(capsys, args) -> str:
    """Run kinject with ``args``, expect exit 2, one "error:" line, the last thing said, and no traceback."""
    capsys.readouterr()
    assert run_kinject(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and err[-1] == errors[0] and not any("Traceback" in line for line in err), err
    return errors[0]


def prepare_stops_in_one_line(textcls_dir: Path, tmp_path: Path, *needles: str) -> None:
    """``prepare`` of a tiny textcls run raises a one-line PluginLoadError holding ``needles``; no stage folder
    is made (a broken built-in plugin stops the run before any stage)."""
    import pytest

    from kinject.errors import PluginLoadError
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    spec = build_spec({"model": {"name": "tiny"}, "task": {"name": "textcls", "path": str(textcls_dir)},
                       "cache_dir": str(tmp_path / "cache")})
    with pytest.raises(PluginLoadError) as caught:
        prepare(spec)
    line = str(caught.value)
    assert "\n" not in line and all(needle in line for needle in needles), line
    assert not (tmp_path / "cache" / "stages").exists()
