"""MoP's partition adapters on the `adapters` library: their names, the configured adapter resolved (and tried on a
one-layer copy of the model, so anything the library rejects fails before any stage), one added to an encoder as
the only thing that trains, a digest of the frozen base, and a quiet activation."""

from __future__ import annotations

import hashlib
import logging
from contextlib import contextmanager
from typing import Any

from kinject.api import SpecError

# kinject logs at INFO; the library's INFO lines (every adapter loaded / saved, K of them per stage) would drown it
logging.getLogger("adapters").setLevel(logging.WARNING)


def adapter_name(part: int) -> str:
    return f"part-{part}"


def adapter_names(k: int) -> list[str]:
    """The partition adapters' names: part-0 .. part-(k-1)."""
    return [adapter_name(i) for i in range(k)]


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


def resolve_adapter_config(adapter: str | dict[str, Any], reduction_factor: float | None, model_path: str) -> dict:
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
