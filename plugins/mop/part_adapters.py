"""MoP's partition adapters on the `adapters` library: their names, the configured adapter resolved (and tried on a
one-layer copy of the model, so anything the library rejects fails before any stage), one added to an encoder as
the only thing that trains, a digest of the frozen base, a quiet activation, and the check that an adapter loaded
into a task model holds exactly the tensors its stage saved."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kinject.api import SpecError

# kinject logs at INFO; the library's INFO lines (every adapter loaded / saved, K of them per stage) would drown it
logging.getLogger("adapters").setLevel(logging.WARNING)


def adapter_name(part: int) -> str:
    return f"part-{part}"


@contextmanager
def quiet_activation():
    """``set_active_adapters`` / ``train_adapter*`` open a forward context before the setup is active, so the library
    warns "There are adapters available but none are activated"; that one message is dropped while they run."""

    def drop(record) -> bool:
        return "none are activated" not in record.getMessage()

    logger = logging.getLogger("adapters.model_mixin")
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


Scalar = str | int | float | bool | None
#: A bottleneck adapter's config as the adapters library serialises it (``AdapterConfig.to_dict()``): its fields and
#: values are the library's, checked by it when the run is prepared (:func:`resolve_adapter_config`).
AdapterSettings = dict[str, Scalar | list[Scalar]]


def resolve_adapter_config(adapter: str | dict[str, Any], reduction_factor: float | None, model_path: str) -> AdapterSettings:
    """``strategy.adapter`` as a bottleneck config with ``reduction_factor`` applied, as a dict; added once to a
    one-layer copy of the model. SpecError on anything the library rejects."""
    from adapters import AdapterConfig, BnConfig

    overrides = {"reduction_factor": reduction_factor} if reduction_factor is not None else {}
    try:
        config = AdapterConfig.load(adapter, **overrides)
    except Exception as exc:  # the library's own message (unknown name, missing or bad fields)
        raise SpecError(f"strategy.adapter: rejected by adapters: {type(exc).__name__}: {exc}") from None
    if not isinstance(config, BnConfig):
        raise SpecError(f"strategy.adapter: {type(config).__name__} is not a bottleneck adapter; MoP's fusion "
                        "mixes bottleneck adapters (seq_bn, double_seq_bn, par_bn, ...)")
    probe_adapter(model_path, config)
    return config.to_dict()


def probe_adapter(model_path: str, config) -> None:
    """Add ``config`` to a one-layer copy of the model and run it once; SpecError on anything the library rejects."""
    import adapters
    import torch
    from transformers import AutoConfig, AutoModel

    from kinject.api import offline

    model_config = AutoConfig.from_pretrained(model_path, local_files_only=offline())
    model_config.num_hidden_layers = 1
    try:
        model = AutoModel.from_config(model_config)
        adapters.init(model)
        model.add_adapter("probe", config=config)
        with quiet_activation():
            model.set_active_adapters("probe")
        with torch.no_grad():
            model(input_ids=torch.ones(1, 2, dtype=torch.long))
    except Exception as exc:
        raise SpecError(f"strategy.adapter: rejected by adapters for this model: {type(exc).__name__}: {exc}") from None


def adapter_encoder(encoder, name: str, adapter_config: dict[str, Any]):
    """``encoder`` with a new adapter ``name`` that alone trains (base frozen, adapter active)."""
    import adapters
    from adapters import AdapterConfig

    adapters.init(encoder)
    encoder.add_adapter(name, config=AdapterConfig.load(adapter_config))
    with quiet_activation():
        encoder.train_adapter(name)
    return encoder


def base_digest(encoder) -> str:
    """sha256 over every base-model tensor (adapter weights excluded): equal digests = bit-identical weights."""
    import torch

    digest = hashlib.sha256()
    for key, tensor in sorted(encoder.state_dict().items()):
        if ".adapters." in f".{key}" or "adapter_fusion_layer" in key:
            continue
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# -- saved adapters: what a partition-adapter stage wrote, and the check that a task model loaded exactly that -- #
WEIGHTS = "adapter.safetensors"  # what ``save_adapter(..., use_safetensors=True)`` writes


def tensors_digest(tensors: dict) -> str:
    """sha256 over the keys and raw bytes of ``tensors`` (sorted by key)."""
    import torch

    digest = hashlib.sha256()
    for key in sorted(tensors):
        digest.update(key.encode())
        digest.update(tensors[key].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def saved_adapter_digest(folder: Path) -> str:
    """:func:`tensors_digest` of the adapter saved in ``folder``."""
    from safetensors.torch import load_file

    return tensors_digest(load_file(str(Path(folder) / WEIGHTS)))


def saved_adapter_name(folder: Path) -> str:
    """The name an adapter was saved under (``adapter_config.json``), e.g. part-3."""
    return json.loads((Path(folder) / "adapter_config.json").read_text())["name"]


def check_loaded_adapter(model, folder: Path, name: str, expected_digest: str | None = None) -> None:
    """DataError unless adapter ``name`` of ``model`` holds, bit for bit, every tensor saved in ``folder`` and no
    other (the library only logs missing or unexpected keys, at INFO), and - given ``expected_digest``, what the
    adapter stage recorded - the file still holds what the stage saved."""
    import torch
    from safetensors.torch import load_file

    from kinject.api import DataError

    folder = Path(folder)
    saved_name = saved_adapter_name(folder)
    saved = load_file(str(folder / WEIGHTS))
    prefix = f"{model.base_model_prefix}."

    def local(key: str, adapter: str) -> str:  # without the base-model prefix, the adapter called ``name``
        return ".".join(name if part == adapter else part for part in key.removeprefix(prefix).split("."))

    loaded = {local(k, name): v for k, v in model.state_dict().items() if name in k.split(".")}
    stored = {local(k, saved_name): v for k, v in saved.items()}
    problems = []
    if expected_digest is not None and tensors_digest(saved) != expected_digest:
        problems.append("the file no longer holds what the adapter stage saved (sha256 differs)")
    if missing := sorted(set(stored) - set(loaded)):
        problems.append(f"{len(missing)} saved tensors not loaded ({', '.join(missing[:3])})")
    if unset := sorted(set(loaded) - set(stored)):
        problems.append(f"{len(unset)} adapter tensors missing from the file, left at initialisation "
                        f"({', '.join(unset[:3])})")
    differ = sorted(k for k in set(stored) & set(loaded)
                    if loaded[k].shape != stored[k].shape or loaded[k].dtype != stored[k].dtype
                    or not torch.equal(loaded[k].detach().cpu(), stored[k]))
    if differ:
        problems.append(f"{len(differ)} tensors differ from the saved ones ({', '.join(differ[:3])})")
    if not stored and not loaded:
        problems.append("the file holds no tensors")
    if problems:
        raise DataError(f"partition adapter {name!r} did not load as saved: {'; '.join(problems)}. Delete its "
                        "adapter stage's cache folder and run again", path=folder)
