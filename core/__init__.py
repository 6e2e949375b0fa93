"""kinject: inject domain knowledge into transformer language models and compare the ways of doing it.

Importing ``kinject`` is cheap: no torch, no transformers. Heavy modules are imported where used.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load", "run"]


def __getattr__(name: str):
    """``kinject.run`` (a run from Python, as `kinject run`), ``kinject.load`` (a run folder as ``run`` returns it) and
    ``kinject.RunResult``: the program's Python side (:mod:`kinject.cli.python`), imported on first use."""
    if name in ("run", "load", "RunResult"):
        from kinject.cli import python

        return getattr(python, name)
    raise AttributeError(f"module 'kinject' has no attribute {name!r}")
