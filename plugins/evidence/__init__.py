"""Evidence from runs: per-example paired comparisons with bootstrap intervals, per-seed tests, reports, sweeps.

``kinject compare`` / ``kinject report`` / ``kinject sweep`` are built on this package; docs/evidence.md says
what the numbers mean.
"""

from kinject.plugins.evidence.compare import compare_prediction_files, compare_runs
from kinject.plugins.evidence.stats import PairedDifference, paired_bootstrap, seed_tests

__all__ = ["PairedDifference", "compare_prediction_files", "compare_runs", "paired_bootstrap", "seed_tests"]
