"""What a stage's cache key is made of: its keyed config fields and a fingerprint of the code it runs.

* :data:`NOT_KEYED` marks a config field that cannot change a stage's output (an evaluation batch size, a logging
  interval). Every other field is part of the key: ``keyed_dump(config)``.
* :func:`code_fingerprint` hashes the *definitions* a stage runs, not the files they sit in: its body function, its
  config class, and, transitively, every function, class and module-level constant they name (resolved through
  import statements, also inside functions, and through front doors). A definition is keyed by its name and its
  source text, so a refactor that moves code between files re-keys nothing, and an edit to code a stage never names
  re-runs nothing.

Which packages are followed is one rule, by package, never by a list of modules:

- the body's own package (a third party's whole distribution package, or one of kinject's subpackages: a method
  in ``kinject.plugins``, the libraries ``kinject.training``, ``.knowledge``, ``.tasks``, ``.evidence``) and every
  such package it names;
- never the kernel's own modules (``kinject.<module>``: the contract and the engine; what they do to a stage is
  :data:`kinject.keys.CONTRACT`), unless a stage or a reference names one as code it runs (a fold run names
  :mod:`kinject.splits`);
- never a module a library declares computes nothing a stage writes: the package's ``UNKEYED`` mapping
  (``{".cost": "why"}`` in its ``__init__``), or a package whose ``UNKEYED`` is ``"*"`` (the front ends).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import json
import os
from typing import Any, Callable, Iterable

from pydantic import BaseModel


#: ``Field(..., json_schema_extra=NOT_KEYED)``: the field does not affect the output; it stays out of keys.
NOT_KEYED: dict[str, Any] = {"keyed": False}


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
def _is_package(module: str) -> bool:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.submodule_search_locations is not None


class _Module:
    """One module's source as the fingerprint reads it: its top-level definitions (name -> the statements that bind
    it) and its top-level imports (name -> (module, attribute or None))."""

    def __init__(self, name: str, origin: str):
        self.name = name
        self.package = name if _is_package(name) else name.rpartition(".")[0]
        with open(origin, "rb") as handle:
            self.text = handle.read().decode("utf-8", errors="replace")
        tree = ast.parse(self.text, filename=origin)
        self.lines = self.text.splitlines(keepends=True)
        self.defs: dict[str, list[ast.stmt]] = {}
        self.imports: dict[str, tuple[str, str | None]] = {}
        self.exports: dict[str, str] = {}  # a front door's name -> its defining module
        self._uses: dict[str, Any] = {}
        for node in _top_level(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            self.defs.setdefault(leaf.id, []).append(node)
                if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                    self._read_exports(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imports.update(_bindings(node, self.package))

    def _read_exports(self, node: ast.stmt) -> None:
        try:
            table = ast.literal_eval(node.value)
        except ValueError:
            return
        for module, names in table.items():
            target = importlib.util.resolve_name(module, self.name) if module.startswith(".") else module
            self.exports.update({name: target for name in names})

    def uses(self, name: str) -> tuple[str, list[tuple[tuple[str, str | None] | None, tuple[str, ...]]]] | None:
        """(digest of ``name``'s source, what it reads: (where a local import binds it or None, the chain)), read
        from the tree once per file version (a run's stages share most of their definitions)."""
        if name not in self._uses:
            nodes = self.defs.get(name)
            if nodes is None:
                self._uses[name] = None
            else:
                digest = hashlib.sha256(self.source(nodes).encode()).hexdigest()[:16]
                reads = []
                for node in nodes:
                    local: dict[str, tuple[str, str | None]] = {}
                    for inner in ast.walk(node):
                        if isinstance(inner, (ast.Import, ast.ImportFrom)):
                            local.update(_bindings(inner, self.package))
                    reads.extend((local.get(chain[0]), chain) for chain in _references(node))
                self._uses[name] = (digest, reads)
        return self._uses[name]

    def source(self, nodes: list[ast.stmt]) -> str:
        parts = []
        for node in nodes:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            parts.append("".join(self.lines[first - 1:node.end_lineno]))
        return "".join(parts)


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements of a module body, looking into top-level ``if``/``try``/``with`` blocks."""
    for node in body:
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                yield from (n for n in node.body if isinstance(n, (ast.Import, ast.ImportFrom)))
                continue
            for part in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, part, []):
                    yield from _top_level(child.body if isinstance(child, ast.ExceptHandler) else [child])
        else:
            yield node


def _bindings(node: ast.stmt, package: str) -> dict[str, tuple[str, str | None]]:
    """name -> (module, attribute) an import statement binds (attribute None: the name is the module)."""
    out: dict[str, tuple[str, str | None]] = {}
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out[alias.asname] = (alias.name, None)
            else:
                root = alias.name.split(".")[0]
                out[root] = (root, None)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
            base = ".".join(parts + ([node.module] if node.module else []))
        for alias in node.names:
            if alias.name != "*":
                out[alias.asname or alias.name] = (base, alias.name)
    return out


@functools.lru_cache(maxsize=4096)
def _parsed(origin: str, mtime_ns: int, size: int, module: str) -> _Module:
    return _Module(module, origin)


def _module(name: str) -> _Module | None:
    origin = _origin(name)
    if origin is None:
        return None
    stat = os.stat(origin)
    return _parsed(origin, stat.st_mtime_ns, stat.st_size, name)


def _unkeyed(module: str) -> bool:
    """Whether the library that holds ``module`` declares it computes nothing a stage writes (its ``UNKEYED``)."""
    parts = module.split(".")
    for depth in range(2, len(parts) + 1):
        package = _module(".".join(parts[:depth]))
        if package is None or not package.name.endswith(tuple(parts[:depth][-1:])):
            continue
        declared = _literal(package, "UNKEYED")
        if declared == "*":
            return True
        if isinstance(declared, dict):
            for relative in declared:
                if module == importlib.util.resolve_name(relative, package.name):
                    return True
    return False


def _literal(module: _Module, name: str) -> Any:
    for node in module.defs.get(name, []):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return None
    return None


class _Closure:
    """The definitions a stage runs, followed from its roots: ``found`` maps a definition's key (its name, and a
    digest of its source) to that digest."""

    def __init__(self, own: str):
        self.own = own  # the body's top-level package: a third party's is followed whole
        self.found: dict[tuple[str, str], str] = {}  # (name, digest) -> module it was found in
        self.seen: set[tuple[str, str]] = set()

    def followed(self, module: str) -> bool:
        top = module.split(".")[0]
        if top != "kinject":
            return top == self.own
        parts = module.split(".")
        if len(parts) < 2:
            return False
        if not _is_package(".".join(parts[:2])):  # kinject.<module>: the kernel
            return False
        return not _unkeyed(module)

    def module_whole(self, name: str) -> None:
        """Every definition of module ``name`` (a module a stage or a reference names, or one used as a value)."""
        module = _module(name)
        if module is not None:
            for definition in list(module.defs):
                self.definition(module, definition)

    def definition(self, module: _Module, name: str) -> None:
        if (module.name, name) in self.seen:
            return
        self.seen.add((module.name, name))
        uses = module.uses(name)
        if uses is None:
            self.resolve(module, name, ())
            return
        digest, reads = uses
        self.found[(name, digest)] = module.name
        for local, chain in reads:
            if local is not None:
                self.target(*local, chain[1:])
            else:
                self.resolve(module, chain[0], chain[1:])

    def resolve(self, module: _Module, name: str, attributes: tuple[str, ...]) -> None:
        """Follow ``name`` (then ``.attributes``) as module ``module`` binds it."""
        if name in module.defs:
            self.definition(module, name)
        elif name in module.imports:
            self.target(*module.imports[name], attributes)
        elif name in module.exports:
            self.target(module.exports[name], name, attributes)

    def target(self, module_name: str, attribute: str | None, attributes: tuple[str, ...]) -> None:
        """Follow ``module_name.attribute`` (attribute None: the module itself, then ``.attributes``)."""
        if attribute is not None:
            submodule = f"{module_name}.{attribute}"
            if _origin(submodule) is not None:
                module_name, attribute = submodule, None
        if attribute is None:
            if attributes and _origin(f"{module_name}.{attributes[0]}") is not None:
                self.target(f"{module_name}.{attributes[0]}", None, attributes[1:])
            elif self.followed(module_name):
                module = _module(module_name)
                if module is None:
                    return
                if attributes:
                    self.resolve(module, attributes[0], attributes[1:])
                else:
                    self.module_whole(module_name)  # a module used as a value: all of it
            return
        module = _module(module_name)
        if module is None:
            return
        if attribute in module.exports and attribute not in module.defs:  # a front door: where the name is defined
            self.target(module.exports[attribute], attribute, attributes)
        elif self.followed(module_name):
            self.resolve(module, attribute, attributes)
        elif attribute in module.imports:  # a kernel module's re-export of a library's name
            self.target(*module.imports[attribute], attributes)

    def record(self) -> tuple[dict[str, str], dict[str, list[str]]]:
        """(name -> digest, module -> the names found in it); a name defined twice (in two modules, differently) is
        ``name`` and ``name~2``..."""
        out: dict[str, str] = {}
        where: dict[str, list[str]] = {}
        for name, digest in sorted(self.found):
            key, n = name, 1
            while key in out:
                n += 1
                key = f"{name}~{n}"
            out[key] = digest
            where.setdefault(self.found[(name, digest)], []).append(key)
        return out, dict(sorted(where.items()))


def _references(node: ast.AST) -> Iterable[tuple[str, ...]]:
    """The names a definition reads, each with the attribute chain read from it (``a.b.c`` -> ("a", "b", "c"))."""
    chains: dict[int, tuple[str, ...]] = {}
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute):
            parts, value = [inner.attr], inner.value
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                chains[id(value)] = (value.id, *reversed(parts))
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Store):
            yield chains.get(id(inner), (inner.id,))


def code_fingerprint(body: Callable, classes: tuple[type, ...] = (),
                     modules: tuple[str, ...] = ()) -> tuple[dict[str, str], dict[str, list[str]]]:
    """({definition name: digest of its source}, {module: the names found in it}) of what a stage runs: ``body`` and
    ``classes`` (its config class and the stage configs it holds) with every definition they name, and every
    definition of ``modules`` (what the config's references and ``Stage.code`` name: a task's module, its
    evaluators', an input transform's). The first is keyed; the second says where the code is."""
    closure = _Closure(body.__module__.split(".")[0])
    for obj in (body, *classes):
        module = _module(obj.__module__)
        if module is not None and (closure.followed(module.name) or obj is body):
            closure.definition(module, obj.__qualname__.split(".")[0])
    for name in modules:
        closure.module_whole(name)
    return closure.record()


def check_body(body: Callable, stage: str) -> None:
    """A stage body must be a module-level function: a closure could read settings its key lacks."""
    qualname = getattr(body, "__qualname__", "")
    if getattr(body, "__self__", None) is not None or getattr(body, "__closure__", None) or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"stage {stage!r}: its body {qualname or body!r} must be a module-level function "
                        "(it receives its config and inputs; it may not capture the run)")
