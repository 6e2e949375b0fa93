"""A strategy from outside kinject: fine-tunes like the baseline and leaves a note, then evaluates.

It shows how a third party extends the built-in fine-tune stage under the declared-stage contract: subclass its
config (the new field is then part of the cache key, the module part of its code fingerprint) and override one of
its extension points; the stage keeps the shared body.
"""

from __future__ import annotations

from pydantic import Field

from kinject.api import PluginConfig, Stage, Strategy
from kinject.training import FinetuneConfig, finetune_body


class EchoFinetuneConfig(FinetuneConfig):
    note: str

    def save_model(self, model, tokenizer, folder, ctx) -> None:
        (ctx.out / "note.txt").write_text(self.note)
        super().save_model(model, tokenizer, folder, ctx)


class EchoStrategy(Strategy):
    """Fine-tune and leave a note (a third-party example strategy)."""

    class Config(PluginConfig):
        note: str = Field("hello", description="Written into the stage output, to prove config reaches stages.")

    def stages(self, run):
        from kinject.training import evaluate_stage, finetune_stage

        base = finetune_stage(run)
        config = EchoFinetuneConfig(**dict(base.config), note=self.config.note)
        return [Stage(name=base.name, body=finetune_body, config=config, produces_model=True),
                evaluate_stage(run)]
