"""Evidence from runs: per-example paired comparisons with bootstrap intervals, per-seed tests, reports, sweeps.

``kinject compare`` / ``kinject report`` / ``kinject sweep`` are built on this package; docs/evidence.md says
what the numbers mean.

Modules: ``compare`` (pairing runs), ``stats`` (bootstrap, seed tests), ``scorers`` and ``metrics`` (recomputing a
metric from predictions), ``report``/``render`` (pages), ``sweep``/``study`` (optuna), ``stage`` (the paired
comparison stage methods end with), ``cli`` (the commands). Importing the package imports none of them.
"""
