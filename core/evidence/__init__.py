"""kinject's evidence library: per-example paired comparisons with intervals over seeds and examples, verdicts,
per-seed tests, summaries over seeds, and reports. docs/evidence.md says what the numbers mean. Launching many runs
(grids, sweeps) is :mod:`kinject.experiments`'.

Its front door: import what a plugin, a notebook or a script uses from here (``from kinject.evidence import
compare_prediction_files``); the modules behind it are internal. Names are imported on first use, so importing the
package imports none of them.
"""

from __future__ import annotations

from kinject.api import lazy_exports

_EXPORTS = {  # name -> the module defining it
    ".comparison": ("compare", "compare_prediction_files", "compare_runs", "pair"),
    ".tables": ("comparison_table", "format_value", "plural", "print_comparison", "shown_verdict"),
    ".seeds": ("seed_stats", "summarize_seeds"),
    ".bootstrap": ("DEFAULT_INTERVAL", "INTERVALS", "bootstrap_intervals", "interval_set", "two_way_bootstrap",
                   "verdict"),
    ".learned": ("not_learned", "run_not_learned"),
    ".stats": ("seed_tests",),
    ".runs": ("find_runs", "load_predictions", "smoke_of"),
    ".report": ("build_report", "comparison_markdown", "metrics_markdown"),
    ".stage": ("CompareConfig", "compare_stage"),
    ".metrics": ("MetricDef", "define", "task_metric_refs"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
