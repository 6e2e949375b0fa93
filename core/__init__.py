"""kinject: inject domain knowledge into transformer language models and compare the ways of doing it.

Importing ``kinject`` is cheap: no torch, no transformers. Heavy modules are imported where used.
"""

__version__ = "0.1.0"

from kinject import compat as _compat  # noqa: E402 - old places of moved modules and names (one release)

_compat.install()

__all__ = ["__version__", "load", "run"]


def __getattr__(name: str):
    """``kinject.run`` (a run from Python, as `kinject run`), ``kinject.load`` (a run folder as ``run`` returns it) and
    ``kinject.RunResult``: the `run` command plugin's Python side (its ``python``: kinject's own is
    :mod:`kinject.plugins.cli.python`), found through the registry on first use."""
    if name in ("run", "load", "RunResult"):
        from kinject.registry import registry

        return getattr(registry("commands").get("run").python, name)
    raise AttributeError(f"module 'kinject' has no attribute {name!r}")
