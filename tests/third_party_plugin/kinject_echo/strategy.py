"""A strategy from outside kinject: fine-tunes with the encoder's embeddings frozen, then evaluates."""

from __future__ import annotations

from pydantic import Field

from kinject.interfaces import PluginConfig, Stage, Strategy


class EchoStrategy(Strategy):
    """Fine-tune with frozen embeddings (a third-party example strategy)."""

    class Config(PluginConfig):
        note: str = Field("hello", description="Written into the stage output, to prove config reaches stages.")

    def stages(self, run):
        from kinject.stages import evaluate_stage, finetune_stage

        base = finetune_stage(run, name="finetune", extra_config={"note": self.config.note})
        inner = base.fn

        def fn(ctx):
            (ctx.out / "note.txt").write_text(self.config.note)
            inner(ctx)

        return [Stage(name=base.name, fn=fn, config=base.config, produces_model=True), evaluate_stage(run)]
