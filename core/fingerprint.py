"""What a stage's cache key is made of: its keyed config fields and a fingerprint of its code.

* :data:`NOT_KEYED` marks a config field that cannot change a stage's output (an evaluation batch size, a
  logging interval). Every other field is part of the key: ``keyed_dump(config)``.
* :func:`code_fingerprint` hashes the source of the modules that compute what a stage writes: the module of its
  body and of its config class (a config subclass may override the fine-tune extension points), and,
  transitively, the modules they import (import statements found with ``ast``, also inside functions), within
  the same top-level package and ``kinject``. Three things keep it narrow:

  - modules that compute nothing a stage writes are not followed: they are listed, with the reason, in
    :data:`NOT_FOLLOWED` (the engine, cache, registry, CLI, hooks, errors; the contract modules - interfaces,
    refs, spec, knowledge - whose behaviour the engine's ``CONTRACT`` constant stands for in every key);
  - a front door (:data:`FRONT_DOORS`: :mod:`kinject.api`, :mod:`kinject.tasks` and each library's package) is never hashed whole: a
    name imported from it counts as an import of the module that defines it;
  - so a plugin's report or plot module is in no training stage's key unless that stage's modules import it.

Both tables are this module's alone: a third party's modules are always followed (a key that is too wide costs a
re-run, one that is too narrow returns a stale result).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
from typing import Any, Callable

from pydantic import BaseModel


#: ``Field(..., json_schema_extra=NOT_KEYED)``: the field does not affect the output; it stays out of keys.
NOT_KEYED: dict[str, Any] = {"keyed": False}

#: Modules a stage's key does not follow, and why.
NOT_FOLLOWED: dict[str, str] = {
    "kinject": "the version string",
    "kinject.cache": "how stages are stored and shared, never what a stage computes",
    "kinject.decisions": "decides settings before stages are planned; their values are keyed",
    "kinject.distributed": "process ranks",
    "kinject.engine": "orchestration: what it does to a stage is covered by keys.CONTRACT",
    "kinject.errors": "messages only",
    "kinject.files": "where and how files are written, never what a stage computes",
    "kinject.fingerprint": "how keys are made: covered by keys.CONTRACT",
    "kinject.hooks": "observers",
    "kinject.hooks.specs": "observers",
    "kinject.interfaces": "contract: what the engine hands a stage is covered by keys.CONTRACT",
    "kinject.knowledge": "contract: how facts are keyed and held out is covered by keys.CONTRACT",
    "kinject.stage_runner": "orchestration: what it does to a stage is covered by keys.CONTRACT",
    "kinject.keys": "how keys are made: covered by keys.CONTRACT",
    "kinject.context": "contract: what a prepared run hands a strategy is covered by keys.CONTRACT",
    "kinject.preparation": "orchestration: checks a spec and plans its stages; their configs are keyed",
    "kinject.outputs": "where a run writes, never what a stage computes",
    "kinject.frontdoor": "re-exports names; the defining modules are followed",
    "kinject.refs": "contract: refs are keyed as config values, their code by keys.CONTRACT",
    "kinject.registry": "plugin lookup",
    "kinject.spec": "contract: settings are keyed as config values, their code by keys.CONTRACT",
    "kinject.splits": "contract: what examples() returns is covered by keys.CONTRACT",
    "kinject.spec_input": "reads and checks specs; their values are keyed",
    "kinject.worker": "orchestration: runs a body, computes nothing of its own",
    "kinject.plugins.evidence.cli": "the command line",
    "kinject.plugins.evidence.forest": "a figure of finished runs",
    "kinject.plugins.evidence.grid": "orchestration",
    "kinject.plugins.evidence.grid_board": "reads finished runs",
    "kinject.plugins.evidence.grid_exec": "orchestration",
    "kinject.plugins.evidence.grid_state": "orchestration",
    "kinject.plugins.evidence.study": "orchestration",
    "kinject.plugins.evidence.sweep": "orchestration",
    "kinject.plugins.cli.app": "the command line",
    "kinject.plugins.cli.doctor": "the command line",
    "kinject.plugins.cli.describe": "the command line",
    "kinject.plugins.cli.listing": "the command line",
    "kinject.plugins.cli.python": "runs specs as the CLI does",
    "kinject.plugins.cli.run": "the command line",
    "kinject.plugins.hub.cli": "the command line",
    "kinject.plugins.training.cli": "the command line",
    "kinject.plugins.training.repeats": "runs seeds as the engine does; summaries of finished runs",
    "kinject.plugins.training.stage_training": "sets the training settings a stage holds; their values are keyed",
    "kinject.plugins.training.choice": "chooses settings before stages are planned; their values are keyed",
    "kinject.plugins.training.decisions": "decides settings before stages are planned; their values are keyed",
    "kinject.plugins.training.cost": "estimates a stage's time (--dry-run), never what it computes",
    "kinject.plugins.training.estimate": "estimates a stage's time (--dry-run), never what it computes",
    "kinject.plugins.knowledge.dose": "the dose record beside a stage's output, as kinject.knowledge's was: its "
                                      "format is covered by keys.CONTRACT",
    "kinject.plugins.knowledge.held_out": "held-out facts, as kinject.knowledge's were: their digest is keyed",
    "kinject.plugins.training.spec_files": "reads specs; their values are keyed",
    "kinject.plugins.training.tables": "prints finished runs' metrics",
}
#: Front doors (lazy re-exports, :func:`kinject.frontdoor.lazy_exports`): a name imported from one counts as an
#: import of the module that defines it.
FRONT_DOORS: frozenset[str] = frozenset({"kinject.api", "kinject.tasks", "kinject.plugins.training",
                                         "kinject.plugins.knowledge", "kinject.plugins.evidence"})


def is_keyed(model: type[BaseModel], name: str) -> bool:
    extra = model.model_fields[name].json_schema_extra
    return not (isinstance(extra, dict) and extra.get("keyed") is False)


def keyed_dump(value: Any) -> Any:
    """JSON data of ``value`` without the fields marked :data:`NOT_KEYED` (recursively)."""
    if isinstance(value, BaseModel):
        cls = type(value)
        out = {name: keyed_dump(getattr(value, name)) for name in cls.model_fields if is_keyed(cls, name)}
        for name, extra in (value.model_extra or {}).items():
            out[name] = keyed_dump(extra)
        return out
    if isinstance(value, (list, tuple)):
        return [keyed_dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): keyed_dump(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return json.loads(json.dumps(value, default=str))


def stable_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


# -- code fingerprint ----------------------------------------------------------------------------- #
def _origin(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin


@functools.lru_cache(maxsize=4096)
def _module_facts(origin: str, mtime_ns: int, size: int, module: str,
                  is_package: bool) -> tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """(sha256 of the source, imports as (module, names imported from it)) of one file."""
    with open(origin, "rb") as handle:
        source = handle.read()
    digest = hashlib.sha256(source).hexdigest()
    text = source.decode("utf-8", errors="replace")
    package = module if is_package else module.rpartition(".")[0]
    imports: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(text, filename=origin)):
        if isinstance(node, ast.Import):
            imports.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            imports.append((prefix, tuple(alias.name for alias in node.names if alias.name != "*")))
    return digest, tuple(imports)


def _defined_in(facade: str, name: str) -> str | None:
    """The module that defines ``facade.name`` (None for plain values such as constants)."""
    import importlib

    value = getattr(importlib.import_module(facade), name, None)
    module = getattr(value, "__module__", None)
    if module is None and hasattr(value, "__name__") and hasattr(value, "__path__"):
        return value.__name__  # a module
    return module


def module_hashes(roots: list[str], packages: set[str] | None = None) -> dict[str, str]:
    """sha256 of the source of each module in the import closure of ``roots`` (within ``packages``)."""
    packages = packages or {r.split(".")[0] for r in roots} | {"kinject"}
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen or module.split(".")[0] not in packages:
            continue
        origin = _origin(module)
        if origin is None or module in NOT_FOLLOWED or module in FRONT_DOORS:
            seen[module] = ""  # None: a name imported from a module (``from a import b``), or not Python source
            continue
        stat = os.stat(origin)
        digest, imports = _module_facts(origin, stat.st_mtime_ns, stat.st_size, module,
                                        os.path.basename(origin) == "__init__.py")
        seen[module] = digest
        for target, names in imports:
            if _is_facade(target):
                todo.extend(m for m in (_defined_in(target, n) for n in names) if m)
                continue
            todo.append(target)
            todo.extend(f"{target}.{n}" for n in names if not _is_facade(f"{target}.{n}"))
            todo.extend(m for n in names if _is_facade(f"{target}.{n}") for m in _facade_modules(f"{target}.{n}"))
    return {name: digest for name, digest in sorted(seen.items()) if digest}


def _is_facade(module: str) -> bool:
    return module in FRONT_DOORS


def _facade_modules(facade: str) -> list[str]:
    """Every module a facade imported whole (``from kinject import api``) stands for."""
    import importlib

    names = getattr(importlib.import_module(facade), "__all__", [])
    return sorted({m for m in (_defined_in(facade, n) for n in names) if m})


def code_fingerprint(body: Callable, extra_modules: tuple[str, ...] = ()) -> dict[str, str]:
    """Per-module source hashes of what implements ``body``: its module's import closure, and that of
    ``extra_modules`` (the config class's module, modules named by the config's references, ``Stage.code``)."""
    return module_hashes([body.__module__, *extra_modules])


def check_body(body: Callable, stage: str) -> None:
    """A stage body must be a module-level function: a closure could read settings its key lacks."""
    qualname = getattr(body, "__qualname__", "")
    if getattr(body, "__self__", None) is not None or getattr(body, "__closure__", None) or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"stage {stage!r}: its body {qualname or body!r} must be a module-level function "
                        "(it receives its config and inputs; it may not capture the run)")
