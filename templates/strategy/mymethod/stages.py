"""mymethod's stage configs: what each key holds. A config that overrides a fine-tune extension point lives beside
the code it calls (:mod:`.freeze`), not here: every stage configured from this module would carry that code in its
key."""

from __future__ import annotations

from kinject.api import StageConfig


class ReportConfig(StageConfig):
    """The two evaluations the report reads (their stage names) and the metric it puts side by side."""

    baseline: str
    method: str
    metric: str
