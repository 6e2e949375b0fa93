"""A strategy from outside kinject: fine-tunes like the baseline and leaves a note, then evaluates.

It shows how a third party extends a built-in stage under the declared-stage contract: subclass the stage's
config (the new field is then part of the cache key) and wrap its module-level body.
"""

from __future__ import annotations

from pydantic import Field

from kinject.api import FinetuneConfig, PluginConfig, Stage, Strategy, finetune_body


class EchoFinetuneConfig(FinetuneConfig):
    note: str


def echo_finetune_body(cfg: EchoFinetuneConfig, ctx) -> None:
    (ctx.out / "note.txt").write_text(cfg.note)
    finetune_body(cfg, ctx)


class EchoStrategy(Strategy):
    """Fine-tune and leave a note (a third-party example strategy)."""

    class Config(PluginConfig):
        note: str = Field("hello", description="Written into the stage output, to prove config reaches stages.")

    def stages(self, run):
        from kinject.api import evaluate_stage, finetune_stage

        base = finetune_stage(run)
        config = EchoFinetuneConfig(**dict(base.config), note=self.config.note)
        return [Stage(name=base.name, body=echo_finetune_body, config=config, produces_model=True),
                evaluate_stage(run)]
