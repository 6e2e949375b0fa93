"""Models: a model name turned into loadable weights.

A :class:`ModelProvider` is the plugin kind ``kinject.models``: a name (``tiny``, ``minilm``, a third party's) ->
where its weights are, what identifies them (in every stage key), the checks of a run's model settings, and how its
encoder and tokenizer load. A name no provider registers is a local folder or a hub id, which :class:`ModelProvider`
itself handles. Every local folder passes the same safety checks, whoever named it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kinject.errors import KinjectError, SpecError


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


class ModelProvider:
    """How kinject finds, identifies, checks and loads the model a run names. The base class serves a local folder
    or a hub id; a provider (entry point ``kinject.models``) overrides :meth:`resolve` and :meth:`fingerprint`, and
    may override :meth:`check` and :meth:`load`."""

    description = "a local model folder or a Hugging Face hub id"

    def __init__(self, name: str):
        self.name = name

    def resolve(self, cache_dir: Path) -> str:
        """What ``from_pretrained`` accepts: a local folder or a hub id."""
        path = Path(self.name).expanduser()
        if path.exists():
            return str(path.resolve())
        if self.name.startswith((".", "/", "~")):
            raise KinjectError(f"model {self.name!r}: no such directory")
        close = near_misses(self.name)
        if close:
            raise SpecError(f"model.name: {self.name!r} is neither a model name kinject knows, a local folder nor a "
                            f"model in the local Hugging Face cache. Did you mean {' or '.join(map(repr, close))}?")
        return self.name  # a hub id; from_pretrained honours HF_HUB_OFFLINE

    def fingerprint(self, path: str, revision: str | None) -> str:
        """What identifies the weights (part of every stage key): a local folder's files, or a hub id at its
        revision."""
        from kinject.refs import files_fingerprint

        local = Path(path)
        if local.is_dir():
            return "dir:" + files_fingerprint([p for p in local.iterdir() if p.is_file()], local)
        return f"hub:{path}@{revision or 'main (unpinned)'}"

    def check(self, spec: Any, path: str) -> None:
        """The run's model settings (``spec.model``) checked against the model's config, before any stage."""
        check_model_settings(spec, model_config(spec.name, path, spec.revision))

    def load(self, ref: Any, part: str) -> Any:
        """The ``part`` ("encoder" or "tokenizer") of the model a :class:`kinject.refs.ModelRef` names."""
        if part == "tokenizer":
            return load_tokenizer(ref.path, revision=ref.revision)
        return load_encoder(ref.path, revision=ref.revision, attn_implementation=ref.attn_implementation,
                            layers=ref.layers)


def near_misses(name: str) -> list[str]:
    """The registered model names ``name`` is a near miss of (``minilmm``: ``minilm``), when it is no hub id with an
    owner (``org/model``) and not in the local Hugging Face cache; [] otherwise."""
    import difflib

    from kinject.registry import registry

    close = difflib.get_close_matches(name, registry("models").names(), n=2, cutoff=0.8)
    if not close or "/" in name:
        return []
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid repository id at all
        cached = None
    return [] if isinstance(cached, str) else close


def provider(name: str) -> ModelProvider:
    """The provider of model ``name``: a registered one (a broken one is a PluginLoadError), else the base class."""
    from kinject.registry import registry

    models = registry("models")
    return models.get(name)(name) if name in models.names() else ModelProvider(name)


def resolve_model(name: str, cache_dir: Path) -> str:
    """What ``from_pretrained`` accepts for model ``name``, every local folder checked: a config.json, weights whole
    (:func:`kinject.files.check_weights`), no weights torch's safe loader refuses."""
    from kinject.files import check_weights

    found = provider(name).resolve(Path(cache_dir))
    path = Path(found)
    if path.exists():
        if not (path / "config.json").exists():
            raise KinjectError(f"model {name!r}: directory has no config.json")
        check_pickled_weights(path, name)
        check_weights(path, f"model {name!r}")  # weights cut short or damaged: one line, before any stage
    return found


def model_fingerprint(name: str, path: str, revision: str | None) -> str:
    return provider(name).fingerprint(path, revision)


def check_model(spec: Any, path: str) -> None:
    provider(spec.name).check(spec, path)


def load_model(ref: Any, part: str) -> Any:
    return provider(ref.name).load(ref, part)


# -- what the base provider calls (transformers) ----------------------------------------------------------- #
def model_config(name: str, path: str, revision: str | None = None):
    """The model's config (``AutoConfig``), read before any stage: a hub id that cannot be resolved - offline and
    not in the local cache, or no such model - is one line saying why and what to pass instead."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, revision=revision, local_files_only=offline())
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        if Path(path).exists():
            raise SpecError(f"model.name: {name!r}: cannot read its config.json ({first})") from None
        if offline():
            raise SpecError(_offline_miss(name)) from None
        raise SpecError(f"model.name: {name!r} is neither a local folder nor a model the Hub serves ({first}); "
                        "check the id, or pass a local model folder") from None


def check_offline_model(name: str, path: str) -> None:
    """Offline, a hub id the local Hugging Face cache holds nothing of is one line (with the model names it is close
    to), said before transformers (and torch) load."""
    if offline() and not Path(path).exists() and not _in_hub_cache(path):
        raise SpecError(_offline_miss(name))


def _in_hub_cache(name: str) -> bool:
    """Whether the local Hugging Face cache holds anything of hub id ``name`` (its ``models--org--name`` folder)."""
    from huggingface_hub import constants

    return (Path(constants.HF_HUB_CACHE) / f"models--{name.replace('/', '--')}").is_dir()


def _offline_miss(name: str) -> str:
    """Why an offline run cannot use hub id ``name``, with the registered model names it is close to."""
    import difflib

    from kinject.registry import registry

    close = difflib.get_close_matches(name, registry("models").names(), n=2, cutoff=0.6)
    hint = f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return (f"model.name: {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 (offline). {hint}"
            "Unset HF_HUB_OFFLINE to download it, or pass a local model folder (model.name=/path/to/folder with "
            "config.json), or use minilm or tiny")


def usable_positions(config) -> int:
    """The longest sequence a model's position embeddings hold (RoBERTa-style models reserve padding_idx + 1)."""
    positions = int(getattr(config, "max_position_embeddings", 0) or 0)
    if "roberta" in str(getattr(config, "model_type", "")) or getattr(config, "model_type", "") == "camembert":
        positions -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    return positions


def check_model_settings(spec, config) -> None:
    """Settings checked against the model's config before any stage (one line each, naming the field): the
    sequence length against its positions, the layers kept against its layers."""
    positions = usable_positions(config)
    if positions and spec.max_length > positions:
        raise SpecError(f"model.max_length: {spec.max_length} is beyond the {positions} positions of model "
                        f"{spec.name!r} (at most {positions})")
    layers = getattr(config, "num_hidden_layers", None)
    if spec.layers is not None and layers is not None and spec.layers > layers:
        raise SpecError(f"model.layers: {spec.layers} but model {spec.name!r} has {layers} layers")


def keep_layers(model, layers: int | None):
    """Keep only the first ``layers`` encoder layers of a BERT-style model (in place; config updated)."""
    if layers is None:
        return model
    base = getattr(model, "base_model", model)
    stack = getattr(getattr(base, "encoder", None), "layer", None)
    if stack is None:
        raise KinjectError(f"model.layers: {type(model).__name__} has no encoder.layer stack to cut")
    if layers > len(stack):
        raise KinjectError(f"model.layers: {layers} but the model has only {len(stack)} layers")
    base.encoder.layer = stack[:layers]
    model.config.num_hidden_layers = layers
    return model


def load_encoder(path: str, revision: str | None = None, attn_implementation: str = "sdpa",
                 layers: int | None = None):
    """``AutoModel`` at ``path`` (pinned to ``revision`` for hub ids), optionally cut to its first layers."""
    from transformers import AutoModel

    try:
        model = AutoModel.from_pretrained(path, revision=revision, local_files_only=offline(),
                                          attn_implementation=attn_implementation)
    except OSError as exc:
        raise KinjectError(f"model {path!r}: cannot load ({str(exc).splitlines()[0]})") from None
    return keep_layers(model, layers)


def load_tokenizer(path: str, revision: str | None = None):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, revision=revision, local_files_only=offline())
    except OSError as exc:
        raise KinjectError(f"model {path!r}: cannot load tokenizer ({str(exc).splitlines()[0]})") from None


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
