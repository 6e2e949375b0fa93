"""Many runs launched as cached runs: grids of strategies x tasks x seeds with their leaderboard (:mod:`.grid`), and
hyper-parameter sweeps with optuna (:mod:`.sweep`, :mod:`.study`). Every cell and trial is a run the engine executes,
prepared the way `kinject run` prepares one (:func:`kinject.api.prepare_runs`); the statistics are
:mod:`kinject.evidence`'s."""
UNKEYED = "*"  # launches runs; computes none: no stage key follows it (kinject.fingerprint)
