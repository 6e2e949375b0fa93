"""kinject: inject domain knowledge into transformer language models and compare the ways of doing it.

Importing ``kinject`` is cheap: no torch, no transformers. Heavy modules are imported where used.
"""

__version__ = "0.1.0"
__kinject_fingerprint__ = False  # the version string

__all__ = ["__version__"]
