"""The method's fine-tune: the shared fine-tune body with the word embeddings frozen (``prepare_model``)."""

from __future__ import annotations

from kinject.api import StageContext
from kinject.training import FinetuneConfig


class FrozenEmbeddingsConfig(FinetuneConfig):
    """Fine-tune the task model with its input embeddings frozen (when ``freeze_embeddings``)."""

    freeze_embeddings: bool = True

    def prepare_model(self, model, ctx: StageContext):
        if self.freeze_embeddings:
            for param in model.get_input_embeddings().parameters():
                param.requires_grad = False
        return model
