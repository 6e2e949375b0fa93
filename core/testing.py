"""Helpers and pytest fixtures for a plugin package's own tests (docs/plugin-reference.md, "Testing a plugin package").

A package's ``conftest.py`` says ``pytest_plugins = ["kinject.testing"]`` to get the fixtures: ``kinject_cache`` (a
temporary stage cache, offline), ``kinject_tiny_model`` (the tiny random BERT), ``kinject_textcls`` (a small labelled
folder for the ``textcls`` task) and ``kinject_register`` (registers a plugin in-process for one test). The plain
functions work without pytest too.
"""

from __future__ import annotations

import json
import random
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

#: the environment every run of a test session gets: offline, no progress bars
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "KINJECT_PROGRESS": "0",
           "TOKENIZERS_PARALLELISM": "false"}


def offline_environment(cache: Path) -> dict[str, str]:
    """The environment variables of an offline test run whose stage cache is ``cache``."""
    return {**OFFLINE, "KINJECT_CACHE_DIR": str(cache)}


def write_textcls(folder: Path, n_train: int = 48, n_eval: int = 16, seed: int = 0) -> Path:
    """A small, learnable two-class folder for the ``textcls`` task: train/dev/test.jsonl with ``text`` and
    ``label`` (``bio`` or ``other``, alternating). Returns ``folder``."""
    rng = random.Random(seed)
    bio = ["gene expression increased in tumor cells", "the drug dose reduced symptoms",
           "protein level rose after treatment", "patients with the disease had risk"]
    other = ["the weather was cold today", "we went to the market", "a cat sat on the mat",
             "trains run late on sunday"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for i in range(n):
                label = "bio" if i % 2 == 0 else "other"
                text = rng.choice(bio if label == "bio" else other)
                handle.write(json.dumps({"text": text, "label": label}) + "\n")
    return folder


@contextmanager
def registered(kind: str, name: str, obj: Any) -> Iterator[Any]:
    """Register ``obj`` as plugin ``name`` of ``kind`` (``strategies``, ``tasks``, ``sources``, ``evaluators``,
    ``commands``, ``models``, ``hooks``) for the block, as if an installed package declared it. A hook plugin joins
    the running hook manager too. On leaving, what it replaced is back (an entry point, or an earlier object)."""
    from kinject.hooks import plugin_manager
    from kinject.registry import GROUPS, registry

    if kind not in GROUPS:
        raise ValueError(f"unknown plugin kind {kind!r}; one of {', '.join(GROUPS)}")
    plugins = registry(kind)
    replaced = plugins.register(name, obj)
    manager = plugin_manager() if kind == "hooks" else None
    earlier = manager.unregister(name=name) if manager is not None and manager.has_plugin(name) else None
    if manager is not None:
        manager.register(obj, name=name)
    try:
        yield obj
    finally:
        if manager is not None:
            manager.unregister(name=name)
            if earlier is not None:
                manager.register(earlier, name=name)
        if replaced is None:
            plugins.unregister(name)
        else:
            plugins.register(name, replaced)


# -- pytest fixtures (``pytest_plugins = ["kinject.testing"]``) -------------------------------------------------- #
try:
    import pytest
except ImportError:  # pragma: no cover - the helpers above work without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture(scope="session")
    def kinject_cache(tmp_path_factory) -> Iterator[Path]:
        """A stage cache of the test session's own, offline (:func:`offline_environment`); set for every run the
        session starts, in-process or as a subprocess, and the previous environment restored at its end."""
        cache = tmp_path_factory.mktemp("kinject-cache")
        with pytest.MonkeyPatch.context() as patch:
            for key, value in offline_environment(cache).items():
                patch.setenv(key, value)
            yield cache

    @pytest.fixture(scope="session")
    def kinject_tiny_model(kinject_cache) -> str:
        """Path of the ``tiny`` model (a random BERT: 2 layers, hidden 32, a character tokenizer), built in the
        session's cache on first use. It checks code paths, not results."""
        from kinject.models import resolve_model

        return resolve_model("tiny", kinject_cache)

    @pytest.fixture
    def kinject_textcls(tmp_path) -> Path:
        """A folder of the ``textcls`` task (:func:`write_textcls`): ``--set task.path=`` it."""
        return write_textcls(tmp_path / "textcls")

    @pytest.fixture
    def kinject_register():
        """``kinject_register(kind, name, obj)``: :func:`registered` for the rest of the test."""
        blocks = []

        def register(kind: str, name: str, obj: Any) -> Any:
            block = registered(kind, name, obj)
            blocks.append(block)
            return block.__enter__()

        yield register
        for block in reversed(blocks):
            block.__exit__(None, None, None)


__all__ = ["OFFLINE", "offline_environment", "registered", "write_textcls"]
