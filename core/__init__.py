"""kinject: inject domain knowledge into transformer language models and compare the ways of doing it.

Importing ``kinject`` is cheap: no torch, no transformers. Heavy modules are imported where used.
"""

__version__ = "0.1.0"

from kinject import compat as _compat  # noqa: E402 - old places of moved modules and names (one release)

_compat.install()

__all__ = ["__version__", "load", "run"]


def __getattr__(name: str):
    """``kinject.run`` (one call runs a spec from Python: :func:`kinject.notebook.run`) and ``kinject.load`` (a run
    folder as the RunResult run returns: :func:`kinject.results.load`); imported on first use."""
    if name in ("run", "RunResult"):
        from kinject import notebook

        return getattr(notebook, name)
    if name == "load":  # a run folder made on the command line, as run() returns it
        from kinject.results import load

        return load
    raise AttributeError(f"module 'kinject' has no attribute {name!r}")
