"""The context strategy's stage config (what its key holds): ``context-facts`` (its body: :mod:`.facts`). The
fine-tune and evaluate stages on the transformed task are the training library's, with their configs' task
replaced (:mod:`.plan`)."""

from __future__ import annotations

from kinject.api import StageConfig, TaskRef


class ContextFactsConfig(StageConfig):
    """The task with its inputs transformed (the TaskRef the fine-tune stage trains on) and the splits to report."""

    task: TaskRef
    splits: list[str]
