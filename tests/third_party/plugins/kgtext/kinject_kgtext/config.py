"""Options of the `kgtext` strategy."""

from __future__ import annotations

from pydantic import Field

from kinject.api import PluginConfig


class KgTextConfig(PluginConfig):
    """Options of the `kgtext` strategy."""

    max_triples: int | None = Field(20000, ge=1, description="Triples verbalised (a seeded sample of the default "
                                    "HPO graph; a configured source is read up to this many).")
    template: str = Field("{head} {relation} {tail}.", description="One sentence per triple.")
    head_steps: int = Field(20, ge=1, description="Steps fitting an MLM head when the model ships none.")
    mlm_steps: int = Field(100, ge=1, description="Continued masked-LM steps on the sentences.")
    mlm_learning_rate: float = Field(5e-5, gt=0, description="Continued masked-LM learning rate.")
    mlm_batch_size: int = Field(16, ge=1, description="Continued masked-LM batch size (sequences).")
