"""STILT configuration: the intermediate tasks (with their own task options) and their training overrides."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kinject.api import PluginConfig
from kinject.training import TrainingOverrides


class IntermediateSpec(BaseModel):
    """One intermediate task: a registered task name plus that task's own config fields.

    Written as a plain name (``chemprot``) or a mapping (``{name: textcls, path: DIR, training: {epochs: 1}}``);
    every field other than ``name`` and ``training`` is validated by the task's Config.
    """

    model_config = ConfigDict(extra="allow", protected_namespaces=())
    name: str = Field(..., description="Registered task name (see `kinject list tasks`).")
    training: TrainingOverrides = Field(default_factory=TrainingOverrides,
                                        description="Training overrides for this intermediate stage only.")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class StiltConfig(PluginConfig):
    """Options of the `stilt` strategy."""

    intermediate: list[IntermediateSpec] | None = Field(
        None, min_length=1,
        description="Intermediate tasks, trained in this order before the target; each a task name or "
                    "{name: TASK, <task options>, training: {epochs, learning_rate, ...}}. Required (--quick: "
                    "hpo-isa, which needs no data dir).")
    training: TrainingOverrides = Field(default_factory=TrainingOverrides,
                                        description="Training overrides for every intermediate stage.")

    @field_validator("intermediate", mode="before")
    @classmethod
    def _names_to_specs(cls, value: Any) -> Any:
        if isinstance(value, str):  # "a,b" -> [a, b]
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, dict):
            value = [value]
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value
