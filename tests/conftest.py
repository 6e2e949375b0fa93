"""Shared fixtures: offline, a per-session stage cache, the tiny model, the real data dir when present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.common import write_textcls  # noqa: F401  (tests import it from here)

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ["KINJECT_PROGRESS"] = "0"
os.environ["KINJECT_CHOOSE"] = "0"  # no cross-validated choice before every small test run (tests/training/test_choose.py has it)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.pop("COLUMNS", None)  # pytest-xdist workers inherit a terminal width; tables must not fold in tests
if os.environ.get("PYTEST_XDIST_WORKER"):  # one compute thread per worker (and its subprocesses): no oversubscription
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: the example plugin packages' own tests run in their own pytest session (tests/third_party/test_third_party.py)
collect_ignore_glob = ["third_party/plugins/*"]


@pytest.fixture(autouse=True)
def _engine_tests_without_the_probe(request, monkeypatch):
    """The reliability suite tests the engine (kills, locks, resumes), not the knowledge probe (tests/knowledge/test_probe.py):
    its runs leave the probe out (KINJECT_PROBE=0, inherited by the processes they start)."""
    if request.node.get_closest_marker("reliability") is not None:
        monkeypatch.setenv("KINJECT_PROBE", "0")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kinject-cache")
    os.environ["KINJECT_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def tiny_model(cache_dir) -> str:
    """Path of the tiny random BERT (2 layers, 4 heads, hidden 32) with its char-level tokenizer."""
    from kinject.api import resolve_model

    return resolve_model("tiny", cache_dir)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark data (../shared/data or $KINJECT_DATA_DIR); tests using it skip when absent."""
    path = Path(os.environ.get("KINJECT_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        pytest.skip(f"benchmark data not found at {path}")
    return path


@pytest.fixture
def textcls_dir(tmp_path) -> Path:
    return write_textcls(tmp_path / "textcls")


@pytest.fixture
def broken_dist(tmp_path, monkeypatch):
    """An installed distribution of three broken strategies: one imports a missing package, one raises at import,
    one is not a Strategy (the registry's and the listing's tests)."""
    from helpers import fake_distribution

    root = fake_distribution(tmp_path / "site", "kinject-broken-plugins", """
        [kinject.strategies]
        needs_missing = broken_needs:Strategy
        raises_on_import = broken_raises:Strategy
        not_a_strategy = broken_wrong:Strategy
        """, {
        "broken_needs": '"""doc"""\nimport package_that_is_not_installed\nclass Strategy:\n    """Needs a missing package."""\n',
        "broken_raises": 'from kinject.interfaces import Strategy as _S\nraise RuntimeError("boom at import")\nclass Strategy(_S):\n    """Raises."""\n',
        "broken_wrong": 'class Strategy:\n    """Not a kinject Strategy."""\n',
    })
    monkeypatch.syspath_prepend(str(root))
    from kinject.registry import GROUPS, registry

    for kind in GROUPS:  # the process-wide registries cache what they discovered
        registry(kind).refresh()
    yield root
    for kind in GROUPS:
        registry(kind).refresh()


def pytest_collection_finish(session):
    """What collection imported (torch, transformers, every test module) is frozen out of the garbage collector's
    passes: the engine collects after every stage, and each pass would walk those million objects again."""
    import gc

    gc.collect()
    gc.freeze()
