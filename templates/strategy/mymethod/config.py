"""The `mymethod` strategy's options: every switch of the method."""

from __future__ import annotations

from pydantic import Field

from kinject.api import PluginConfig


class MyMethodConfig(PluginConfig):
    """Options of the `mymethod` strategy."""

    freeze_embeddings: bool = Field(True, description="Fine-tune with the word embeddings frozen.")
    metric: str | None = Field(None, description="The metric the comparison and the report read (default: the "
                               "task's primary metric).")
