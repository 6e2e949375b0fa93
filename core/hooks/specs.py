"""Hook specifications: the lifecycle events a run announces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pluggy


hookspec = pluggy.HookspecMarker("kinject")
hookimpl = pluggy.HookimplMarker("kinject")


class HookSpecs:
    @hookspec
    def kinject_run_start(self, spec: dict, run_dir: Path) -> None:
        """A run begins. ``spec`` is the resolved spec (plain data); ``run_dir`` is being written."""

    @hookspec
    def kinject_run_end(self, spec: dict, run_dir: Path, metrics: dict[str, Any]) -> None:
        """A run finished; ``metrics`` is what metrics.json holds."""

    @hookspec
    def kinject_stage_start(self, stage: str, key: str, cached: bool) -> None:
        """A stage begins (``cached``: its output is reused, nothing will be computed)."""

    @hookspec
    def kinject_stage_end(self, stage: str, key: str, cached: bool, seconds: float) -> None:
        """A stage ended."""

    @hookspec
    def kinject_extra_stages(self, run: Any) -> list | None:
        """Stages to add to every prepared run after the strategy's own (e.g. a measurement every method gets the
        same way); called in ``prepare`` with the prepared run (``run.stages`` holds the strategy's stages)."""

    @hookspec
    def kinject_metrics_logged(self, stage: str, metrics: dict[str, float], step: int | None) -> None:
        """Training or evaluation metrics were logged."""
