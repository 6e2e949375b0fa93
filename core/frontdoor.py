"""Front doors: a library's package re-exports the names it promises, each imported from its defining module on
first use (so importing the package imports none of them).

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {".stages": ("finetune_stage", ...), ...})

A stage's cache key follows a name imported from a front door to its defining module (:mod:`kinject.fingerprint`
reads the ``_EXPORTS`` table).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any],
                                                                            Callable[[], list[str]], list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) of ``package``, exporting ``exports`` (module -> names;
    a module name starting with "." is relative to ``package``)."""
    module_of = {name: module for module, names in exports.items() for name in names}
    duplicated = sorted(name for name in module_of if sum(name in names for names in exports.values()) > 1)
    if duplicated:
        raise ValueError(f"{package}: {', '.join(duplicated)} exported by two modules")

    def __getattr__(name: str) -> Any:
        if name in module_of:
            value = getattr(importlib.import_module(module_of[name], package), name)
        elif name.startswith("__") or not hasattr(sys.modules[package], "__path__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:  # a submodule, as a package's attribute (``from kinject.knowledge import kg``)
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *module_of})

    return __getattr__, __dir__, sorted(module_of)
