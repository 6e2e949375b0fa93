"""STILT's stage config: an intermediate fine-tune that keeps the [CLS] pooler of the model it started from."""

from __future__ import annotations

from pathlib import Path

from kinject.api import StageContext
from kinject.plugins.training import FinetuneConfig


class IntermediateConfig(FinetuneConfig):
    """Fine-tune on an intermediate task (the shared fine-tune body), then, when the saved model has no pooler
    (token heads, mean pooling), write the start model's pooler into it (:mod:`.pooler`)."""

    def save_model(self, model, tokenizer, folder: Path, ctx: StageContext) -> None:
        from .pooler import carry_pooler

        super().save_model(model, tokenizer, folder, ctx)
        start = ctx.inputs[self.init_from] / "model" if self.init_from else self.model.path
        carry_pooler(start, folder, None if self.init_from else self.model.revision)
