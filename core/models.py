"""Models, the kernel's side: a model name resolved to what ``from_pretrained`` accepts and a :class:`ModelRef`'s
parts loaded, both through hooks (:mod:`kinject.hooks.specs`; the training library's ``models`` plugin holds the
catalogue - ``tiny``, ``minilm`` - and the loaders, and a plugin adds or replaces names), a name no plugin knows taken
as a local folder or a hub id; the safety check every local model passes, whoever named it; and ``offline()``.
The mean pooling tasks score bi-encoders with is the data layer's (``kinject.tasks.masked_mean``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kinject.errors import KinjectError


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def resolve_model(name: str, cache_dir: Path) -> str:
    """Return something ``from_pretrained`` accepts: a local directory or a hub id. The ``kinject_resolve_model``
    hook answers first; a name it leaves is a local folder or a hub id. Every local folder is checked, whoever named
    it (engine safety): a config.json, weights whole (:func:`kinject.files.check_weights`), no weights torch's safe
    loader refuses (:func:`check_pickled_weights`)."""
    from kinject.files import check_weights
    from kinject.hooks import plugin_manager

    found = plugin_manager().hook.kinject_resolve_model(name=name, cache_dir=Path(cache_dir))
    path = Path(found if found is not None else name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise KinjectError(f"model {name!r}: directory has no config.json")
        check_pickled_weights(path, name)
        check_weights(path, f"model {name!r}")  # weights cut short or damaged: one line, before any stage
    if found is not None:
        return str(found)  # a folder or a hub id a plugin named
    if path.exists():
        return str(path.resolve())
    if name.startswith((".", "/", "~")):
        raise KinjectError(f"model {name!r}: no such directory")
    return name  # a hub id; from_pretrained honours HF_HUB_OFFLINE


def load_model(ref: Any, part: str) -> Any:
    """The ``part`` ("encoder" or "tokenizer") of the model a :class:`kinject.refs.ModelRef` names, loaded by the
    ``kinject_load_model`` hook."""
    from kinject.hooks import plugin_manager

    loaded = plugin_manager().hook.kinject_load_model(model=ref, part=part)
    if loaded is None:
        raise KinjectError(f"model {ref.name!r}: no hook plugin loads a model's {part} (the training library's "
                           "'models' hook plugin is missing: `kinject list hooks`)")
    return loaded


def check_pickled_weights(folder: Path, name: str) -> None:
    """A local model whose weights are only pickled (``pytorch_model*.bin``, no safetensors) must pass torch's
    restricted unpickler (``weights_only``), as transformers loads it: a file it refuses is one line naming the
    file, before any stage, instead of tracebacks inside one."""
    import pickle

    if any(Path(folder).glob("*.safetensors")):
        return
    for weights in sorted(Path(folder).glob("pytorch_model*.bin")):
        import torch

        try:
            try:
                torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                torch.load(weights, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise KinjectError(f"model {name!r}: {weights} is refused by torch's safe loader ({reason}); "
                               "save the model with safetensors (save_pretrained(dir, safe_serialization=True))") \
                from None

