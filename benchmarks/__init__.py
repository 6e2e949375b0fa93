"""kinject's benchmarks and experiments, run from the repository root as ``python -m benchmarks.NAME``
(``python -m benchmarks.experiments.NAME``); shared synthetic data writers are in ``benchmarks.common``."""
