"""The experiments behind docs/results.md: each prints its ``kinject`` commands (``--run`` runs them);
run as ``python -m benchmarks.experiments.NAME`` from the repository root."""
