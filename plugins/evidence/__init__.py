"""kinject's evidence library: per-example paired comparisons with intervals over seeds and examples, verdicts,
per-seed tests, reports, sweeps and grids. docs/evidence.md says what the numbers mean.

Its front door: import what a plugin, a notebook or a script uses from here (``from kinject.plugins.evidence import
compare_prediction_files``); the modules behind it (``comparison``, ``bootstrap``, ``stats``, ``scorers``, ``metrics``,
``report``/``render``, ``sweep``/``study``, ``grid*``, ``stage``, ``cli``) are internal. Names are imported on first
use, so importing the package imports none of them; in a stage's key a name counts as its defining module.
"""

from __future__ import annotations

from kinject.api import lazy_exports

_EXPORTS = {  # name -> the module defining it
    ".comparison": ("compare", "compare_prediction_files", "compare_runs", "pair"),
    ".tables": ("comparison_table", "print_comparison", "shown_verdict"),
    ".bootstrap": ("DEFAULT_INTERVAL", "INTERVALS", "bootstrap_intervals", "interval_set", "two_way_bootstrap",
                   "verdict"),
    ".learned": ("not_learned", "run_not_learned"),
    ".stats": ("paired_bootstrap", "seed_tests"),
    ".runs": ("find_runs", "load_predictions"),
    ".report": ("build_report", "comparison_markdown", "metrics_markdown"),
    ".stage": ("CompareConfig", "compare_stage"),
    ".study": ("run_sweep",),
    ".grid": ("load_grid",),
    ".metrics": ("MetricDef", "define", "task_metric_refs"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
