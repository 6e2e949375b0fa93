"""The [CLS] pooler through an intermediate stage whose model has none.

A token-classification model (NER, PICO) has no pooler, and neither has a sequence model with
``model.pooling=mean`` (its pooler is replaced by a parameter-free mean), so the encoder such a stage saves
lacks the pooler weights. Without them, a sequence target after the intermediate would start from a randomly
initialised pooler while the no-intermediate baseline starts from the pre-trained one: a confound. An
intermediate stage therefore writes the pooler of the model it started from into its saved checkpoint (as
``<base prefix>.pooler.*``), so ``AutoModel.from_pretrained`` - and the next stage - load it unchanged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from kinject.api import StageContext
from kinject.training import FinetuneConfig

log = logging.getLogger("kinject")


class IntermediateConfig(FinetuneConfig):
    """Fine-tune on an intermediate task (the shared fine-tune body), then, when the saved model has no pooler
    (token heads, mean pooling), write the start model's pooler into it (:func:`carry_pooler`)."""

    def save_model(self, model, tokenizer, folder: Path, ctx: StageContext) -> None:
        super().save_model(model, tokenizer, folder, ctx)
        start = ctx.inputs[self.init_from] / "model" if self.init_from else self.model.path
        carry_pooler(start, folder, None if self.init_from else self.model.revision)


def pooler_weights(model_dir: str | Path, revision: str | None = None) -> dict:
    """The ``pooler.*`` weights the checkpoint really holds (relative to the base model; empty when it has none)."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    from kinject.api import offline

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a missing pooler is what we are looking for, not a problem
    try:
        encoder, info = AutoModel.from_pretrained(str(model_dir), revision=revision, local_files_only=offline(),
                                                  output_loading_info=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    missing = set(info["missing_keys"])
    return {k: v.detach().clone().contiguous() for k, v in encoder.state_dict().items()
            if k.startswith("pooler.") and k not in missing}


def add_weights(model_dir: Path, weights: dict) -> None:
    """Add tensors to a saved safetensors checkpoint (single file, or a new shard listed in the index)."""
    from safetensors.torch import load_file, save_file

    single = model_dir / "model.safetensors"
    if single.exists():
        state = load_file(str(single))
        state.update(weights)
        save_file(state, str(single), metadata={"format": "pt"})
        return
    index_file = model_dir / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    save_file(weights, str(model_dir / "model-pooler.safetensors"), metadata={"format": "pt"})
    index["weight_map"].update({k: "model-pooler.safetensors" for k in weights})
    index_file.write_text(json.dumps(index, indent=2))


def carry_pooler(start: str | Path, saved: Path, revision: str | None = None) -> bool:
    """Give the model saved at ``saved`` the pooler of ``start`` when it has none; True when weights were added."""
    import transformers

    if pooler_weights(saved):
        return False  # a sequence stage with the [CLS] pooler: its own trained pooler carries over
    weights = pooler_weights(start, revision)
    if not weights:
        log.info("stilt: %s has no pooler weights either; nothing to carry", start)
        return False
    architecture = json.loads((saved / "config.json").read_text())["architectures"][0]
    prefix = getattr(transformers, architecture).base_model_prefix
    add_weights(saved, {f"{prefix}.{k}": v for k, v in weights.items()})
    if set(pooler_weights(saved)) != set(weights):
        raise RuntimeError(f"stilt: the pooler written into {saved} does not load back")
    log.info("stilt: kept the pooler of %s in the intermediate model (its head has none)", start)
    return True
