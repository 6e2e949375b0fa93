"""kinject's compatibility promise, as code (docs/plugins.md, "The promise").

The public API is the names the front doors export: :mod:`kinject.api`, :mod:`kinject.tasks`,
:mod:`kinject.training`, :mod:`kinject.knowledge` and :mod:`kinject.evidence`. A public name that is renamed
keeps working for one minor release: :func:`renamed` serves it with a :class:`KinjectDeprecationWarning` that
points at the caller's own line and names a replacement that imports. After that release the old name is gone,
and :func:`explain_import_error` turns the failure into one line.

A plugin declares the kinject it was written for in its distribution's metadata (``dependencies =
["kinject>=0.1,<0.2"]``); :func:`api_mismatch` says, in one line, when the running kinject does not satisfy it.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from typing import Any, Callable

PROMISE = "docs/plugins.md#the-promise"
#: The modules a plugin imports kinject through (their exports are the public API; every other module is internal)
PUBLIC = ("kinject", "kinject.api", "kinject.tasks", "kinject.training", "kinject.knowledge", "kinject.evidence",
          "kinject.testing")


class KinjectDeprecationWarning(DeprecationWarning):
    """A renamed public name was used by its old name. Shown by default (Python hides a plain DeprecationWarning
    raised inside a plugin)."""


warnings.filterwarnings("default", category=KinjectDeprecationWarning)


def kinject_version() -> str:
    return importlib.import_module("kinject").__version__


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside kinject's own package: the line of the plugin that used the
    old name, not a line of kinject's."""
    root = importlib.import_module("kinject").__file__.rsplit("/", 1)[0]
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(root):
        frame, level = frame.f_back, level + 1
    return level


def resolve(target: str) -> Any:
    """The object ``module:name`` (or ``module``) names; raises ImportError/AttributeError when it does not."""
    module, _, name = target.partition(":")
    value = importlib.import_module(module)
    for part in filter(None, name.split(".")):
        value = getattr(value, part)
    return value


def renamed(old: str, new: str, removed_in: str) -> Any:
    """The object ``new`` (``module:name``) serving the old name ``old``, with a warning at the caller's line:
    'old is deprecated: use new (gone in kinject X)'. A front door's ``__getattr__`` calls it for a renamed name."""
    value = resolve(new)
    warnings.warn(f"{old} is deprecated: import {new.replace(':', '.')} instead (gone in kinject {removed_in})",
                  KinjectDeprecationWarning, stacklevel=_caller_level())
    return value


def renamed_function(old: str, new: str, removed_in: str) -> Callable:
    """A function under its old name that warns at each call site and calls ``new``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return renamed(old, new, removed_in)(*args, **kwargs)

    call.__name__ = old.rpartition(":")[2].rpartition(".")[2]
    call.__doc__ = f"Deprecated: use {new}."
    return call


def explain_import_error(exc: BaseException) -> str | None:
    """For an ImportError naming a ``kinject`` module or name this kinject does not have: 'imports X, which kinject V
    does not have (not a public name: see docs/plugins.md#the-promise)'. None for any other error."""
    if not isinstance(exc, ImportError):
        return None
    module, name = exc.name or "", None
    found = re.match(r"cannot import name '([\w]+)' from '([\w.]+)'", str(exc))
    if found:
        name, module = found.group(1), found.group(2)
    if not (module == "kinject" or module.startswith("kinject.")):
        return None
    what = f"{name} from {module}" if name else module
    return (f"imports {what}, which kinject {kinject_version()} does not have (the public names are the front "
            f"doors' exports: see {PROMISE})")


def api_mismatch(distribution: Any) -> str:
    """'' when ``distribution`` (an importlib.metadata Distribution) declares no kinject requirement or this kinject
    satisfies it; else 'needs kinject>=0.2,<0.3; this is kinject 0.1.0'."""
    from packaging.requirements import InvalidRequirement, Requirement

    for line in (getattr(distribution, "requires", None) or []):
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() != "kinject" or requirement.marker is not None and not requirement.marker.evaluate(
                {"extra": ""}):
            continue
        version = kinject_version()
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            return f"needs kinject{requirement.specifier}; this is kinject {version}"
    return ""
