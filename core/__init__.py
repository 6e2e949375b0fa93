"""kinject: inject domain knowledge into transformer language models and compare the ways of doing it.

Importing ``kinject`` is cheap: no torch, no transformers. Heavy modules are imported where used.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "run"]


def __getattr__(name: str):
    """``kinject.run``: one call runs a spec from Python (:func:`kinject.notebook.run`); imported on first use."""
    if name in ("run", "RunResult"):
        from kinject import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'kinject' has no attribute {name!r}")
