"""Every built-in method, and the template a new one starts from (templates/strategy/), follows the one rule of
docs/method-skeleton.md:

* strategy.py defines the Strategy its entry point names, with its Config, and builds the stages: it is the only
  module of the method that imports ``Stage`` or a library's stage builder;
* no other module of the method imports strategy.py;
* a stage config lives beside its body: a body of the method takes a config class defined in the body's module; a
  library's body runs with the library's config or a method's subclass of it;
* stage configs are typed: no field of a method's StageConfig is a bare ``dict``, ``list`` or ``Any``;
* a module that plots in a stage is report.py;
* every stage a method adds is named ``<method>-...`` (but the shared baseline and the knowledge probe).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import typing
from pathlib import Path

import pytest

from test_dependency_direction import ROOT, front_doors, imports, package_dirs, under

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

BASELINE = {"finetune", "evaluate"}  # the shared baseline: the finetune strategy's own stages and keys
PROBE = {"probe-base", "probe"}  # the knowledge probe's stages, added by a hook
TEMPLATE = ROOT / "templates" / "strategy"


def registered(pyproject: Path) -> dict[str, str]:
    """Strategy name -> "module:object" in a pyproject.toml's kinject.strategies entry points."""
    return tomllib.loads(pyproject.read_text())["project"]["entry-points"]["kinject.strategies"]


def builtin_methods() -> dict[str, tuple[Path, str, str]]:
    """name -> (folder, package, entry point) of every strategy of pyproject.toml under kinject.plugins."""
    folders = {package: folder for folder, package in package_dirs().items()}
    out = {}
    for name, target in registered(ROOT / "pyproject.toml").items():
        package = target.partition(":")[0].rpartition(".")[0]
        if under(package, "kinject.plugins"):
            out[name] = (ROOT / folders[package], package, target)
    return out


def template_method() -> tuple[str, Path, str, str]:
    """(name, folder, package, entry point) of the template's one strategy."""
    [(name, target)] = registered(TEMPLATE / "pyproject.toml").items()
    package = target.partition(":")[0].rpartition(".")[0]
    return name, TEMPLATE / package.replace(".", "/"), package, target


METHODS = builtin_methods()
NAME, FOLDER, PACKAGE, TARGET = template_method()
EVERY = {**METHODS, NAME: (FOLDER, PACKAGE, TARGET)}


def each_method() -> list[str]:
    """Every built-in method and the template, as test parameters."""
    return sorted(EVERY)


def modules(name: str) -> list[tuple[Path, str, ast.Module]]:
    """(file, dotted module, syntax tree) of every module of a method."""
    folder, package, _ = EVERY[name]
    out = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        module = ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
        out.append((path, module, ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return out


def bodies(tree: ast.Module) -> list[ast.FunctionDef]:
    """The stage bodies a module defines: its top-level functions named ``*_body``."""
    return [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.endswith("_body")]


@pytest.fixture
def template_on_path(monkeypatch):
    """The template's package importable and its strategy registered, as an installed plugin would be."""
    from kinject.api import registry

    monkeypatch.syspath_prepend(str(TEMPLATE))
    strategies = registry("strategies")
    module, _, obj = TARGET.partition(":")
    strategies.register(NAME, getattr(importlib.import_module(module), obj))
    yield
    strategies._extra.pop(NAME, None)
    strategies.refresh()
    for loaded in [m for m in sys.modules if under(m, PACKAGE)]:
        del sys.modules[loaded]


def test_every_built_in_method_is_found():
    assert set(METHODS) >= {"finetune", "kimera", "mop", "doktra", "stilt", "pretrain", "context"}


@pytest.mark.parametrize("name", each_method())
def test_strategy_py_defines_the_strategy_and_its_config(name, template_on_path):
    folder, package, target = EVERY[name]
    module, _, obj = target.partition(":")
    assert module == f"{package}.strategy", f"{name}: the entry point names {module}, not {package}.strategy"
    strategy = getattr(importlib.import_module(module), obj)
    assert (strategy.__module__, strategy.Config.__module__) == (module, module), \
        f"{name}: {strategy.__name__} is defined in {strategy.__module__}, its Config in {strategy.Config.__module__}"
    init = ast.parse((folder / "__init__.py").read_text(encoding="utf-8")).body
    assert len(init) == 1 and isinstance(init[0], ast.Expr) and isinstance(init[0].value, ast.Constant), \
        f"{name}: __init__.py holds a docstring only"


@pytest.mark.parametrize("name", each_method())
def test_only_strategy_py_builds_stages_and_no_module_imports_it(name):
    _, package, _ = EVERY[name]
    doors = front_doors()
    builders = {f"{door}.{n}" for door, names in doors.items() for n in names
                if n == "Stage" or n.endswith(("_stage", "_stages"))}
    wrong = []
    for path, module, _ in modules(name):
        if module == f"{package}.strategy":
            continue
        for line, imported, names in imports(path, module, path.name == "__init__.py"):
            where = f"{path.relative_to(ROOT)}:{line}"
            if under(imported, f"{package}.strategy") or imported == package and "strategy" in names:
                wrong.append(f"{where} imports strategy.py")
            wrong += [f"{where} imports {n} (stages are built in strategy.py)" for n in names
                      if f"{imported}.{n}" in builders]
    assert not wrong, f"{name}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", each_method())
def test_a_body_takes_a_config_defined_beside_it(name):
    """Every ``*_body`` of the method (each variant's stages, planned or not) is annotated with its config class, and
    the class is defined in the body's module."""
    wrong = []
    for path, _, tree in modules(name):
        classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        for body in bodies(tree):
            config = body.args.args[0].annotation if body.args.args else None
            if not isinstance(config, ast.Name) or config.id not in classes:
                shown = ast.unparse(config) if config is not None else "no annotation"
                wrong.append(f"{path.relative_to(ROOT)}:{body.lineno}: {body.name}({shown}): its config class is "
                             "not defined in this module")
    assert not wrong, f"{name}:\n" + "\n".join(wrong)


def untyped(annotation) -> bool:
    """Whether a field's annotation is, or holds, a bare dict / list or Any."""
    if annotation in (dict, list, typing.Any, typing.Dict, typing.List, object):
        return True
    return any(untyped(arg) for arg in typing.get_args(annotation) if arg is not type(None))


@pytest.mark.parametrize("name", each_method())
def test_stage_configs_are_typed(name, template_on_path):
    from kinject.api import StageConfig

    _, package, _ = EVERY[name]
    loaded = importlib.import_module(package)
    found, wrong = [], []
    for info in pkgutil.walk_packages(loaded.__path__, f"{package}."):
        for value in vars(importlib.import_module(info.name)).values():
            if isinstance(value, type) and issubclass(value, StageConfig) and value.__module__ == info.name:
                found.append(value)
                wrong += [f"{info.name}.{value.__name__}.{field}: {info_.annotation}"
                          for field, info_ in value.model_fields.items() if untyped(info_.annotation)]
    assert not wrong, f"{name}: untyped stage config fields (use a typed model):\n" + "\n".join(wrong)
    assert found or name == "finetune", f"{name}: no stage config found"


@pytest.mark.parametrize("name", each_method())
def test_a_stage_that_plots_lives_in_report_py(name):
    wrong = [f"{path.relative_to(ROOT)}" for path, module, tree in modules(name)
             if bodies(tree) and path.name != "report.py"
             and any(under(imported, "matplotlib") for _, imported, _ in imports(path, module, False))]
    assert not wrong, f"{name}: plotting stage bodies outside report.py: {wrong}"


def test_the_untyped_check_sees_nested_and_optional_fields():
    assert untyped(dict) and untyped(dict | None) and untyped(typing.Any) and untyped(list[typing.Any])
    assert untyped(typing.Optional[typing.Dict]) and untyped(dict[str, list])
    assert not untyped(dict[str, float]) and not untyped(list[list[float]] | None) and not untyped(int)


@pytest.mark.parametrize("name", each_method())
def test_planned_stages_follow_the_rule(name, tmp_path, tiny_model, template_on_path):
    """The stages of a quick run: named ``<method>-...``; a body of the method with its module's config; a library
    body with the library's config or a subclass of it."""
    from kinject.api import build_spec, prepare

    _, package, _ = EVERY[name]
    spec = build_spec({"strategy": {"name": name}, "task": {"name": "hpo-isa"}, "model": {"name": "tiny"},
                       "protocol": "quick", "data_dir": str(tmp_path / "empty")})
    stages = prepare(spec).stages  # planned, none executed
    wrong = [stage.name for stage in stages if stage.name not in BASELINE | PROBE and not stage.name.startswith(f"{name}-")]
    assert not wrong, f"{name}: stages {wrong} are not named {name}-..."
    for stage in stages:
        body, config = stage.body.__module__, type(stage.config)
        if under(body, package):
            assert config.__module__ == body, f"{stage.name}: body in {body}, config {config.__name__} in " \
                                              f"{config.__module__}"
        else:
            assert any(cls.__module__ == body for cls in config.__mro__), \
                f"{stage.name}: the library body {body}.{stage.body.__name__} runs with {config.__qualname__}, " \
                "neither its library's config nor a subclass of it"
        if stage.name in BASELINE:
            assert not under(body, package) and not under(config.__module__, package), f"{name}: {stage.name}"


def test_the_template_reaches_kinject_only_through_the_api_and_the_front_doors():
    doors = front_doors()
    wrong = [f"{path.relative_to(ROOT)}:{line}: {imported}" for path, module, _ in modules(NAME)
             for line, imported, _ in imports(path, module, path.name == "__init__.py")
             if under(imported, "kinject") and imported not in doors]
    assert not wrong


def test_the_template_holds_a_strategy_and_its_bodies_only():
    """No file but __init__.py, strategy.py and modules that define a stage body; and it pins the kinject it was
    written for, which includes this one."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    extra = [path.name for path, _, tree in modules(NAME)
             if path.name not in ("__init__.py", "strategy.py") and not bodies(tree)]
    assert not extra, f"template modules with no stage body: {extra}"
    [kinject] = [Requirement(r) for r in tomllib.loads((TEMPLATE / "pyproject.toml").read_text())["project"]
                 ["dependencies"] if Requirement(r).name == "kinject"]
    assert version("kinject") in kinject.specifier, f"the template pins {kinject}; this kinject is {version('kinject')}"
    assert any(s.operator in ("<", "~=", "==") for s in kinject.specifier), f"{kinject}: no upper bound"
