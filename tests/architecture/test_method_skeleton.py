"""Every built-in method follows the one method skeleton of docs/method-skeleton.md, and so does the template a new
method starts from (templates/strategy/): the same files, validate -> stages through ``plan.Resolved`` /
``plan.resolve``, no extension-point override in ``stages.py``, and stage names ``<method>-...`` (but the shared
baseline and the knowledge probe) with the report stage ``<method>-report``."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sys
from pathlib import Path

import pytest

from test_import_boundaries import ROOT, front_door_names, imports, package_dirs, through_front_door, under

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

FILES = ("__init__.py", "config.py", "plan.py", "stages.py", "strategy.py")
EXTENSION_POINTS = {"trainer_class", "prepare_model", "save_model", "load_model", "extra_stats"}
BASELINE = {"finetune", "evaluate"}  # the shared baseline: the finetune strategy's own stages and keys
PROBE = {"probe-base", "probe"}  # the knowledge probe's stages, added by a hook
#: methods without a report stage, and why
EXCEPTIONS = {
    "stilt": "a run has no baseline of its own: STILT's evidence is across runs, the transfer matrix against the "
             "finetune runs (`kinject stilt matrix`)",
    "context": "context-facts writes what is handed over (and the dose), context-compare the paired result; "
               "nothing else to gather",
}
TEMPLATE = ROOT / "templates" / "strategy"


def registered(pyproject: Path) -> dict[str, str]:
    """Strategy name -> "module:object" in a pyproject.toml's kinject.strategies entry points."""
    return tomllib.loads(pyproject.read_text())["project"]["entry-points"]["kinject.strategies"]


def builtin_methods() -> dict[str, tuple[Path, str]]:
    """name -> (folder, package) of every strategy of pyproject.toml whose module is under kinject.plugins, but
    finetune."""
    folders = {package: folder for folder, package in package_dirs().items()}
    out = {}
    for name, target in registered(ROOT / "pyproject.toml").items():
        package = target.partition(":")[0].rpartition(".")[0]
        if name != "finetune" and under(package, "kinject.plugins"):
            out[name] = (ROOT / folders[package], package)
    return out


def template_method() -> tuple[str, Path, str]:
    """(name, folder, package) of the template's one strategy."""
    [(name, target)] = registered(TEMPLATE / "pyproject.toml").items()
    package = target.partition(":")[0].rpartition(".")[0]
    return name, TEMPLATE / package.replace(".", "/"), package


METHODS = builtin_methods()
NAME, FOLDER, PACKAGE = template_method()
EVERY = {**{name: (folder, package) for name, (folder, package) in METHODS.items()}, NAME: (FOLDER, PACKAGE)}


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def method_of(module: ast.Module, class_name: str | None, name: str) -> ast.FunctionDef:
    for node in ast.walk(module):
        if isinstance(node, ast.ClassDef) and (class_name is None or node.name == class_name):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return item
    raise AssertionError(f"no method {name!r}")


@pytest.fixture
def template_on_path(monkeypatch):
    """The template's package importable and its strategy registered, as an installed plugin would be."""
    from kinject.api import registry

    monkeypatch.syspath_prepend(str(TEMPLATE))
    strategies = registry("strategies")
    target = registered(TEMPLATE / "pyproject.toml")[NAME]
    module, _, obj = target.partition(":")
    strategies.register(NAME, getattr(importlib.import_module(module), obj))
    yield
    strategies._extra.pop(NAME, None)
    strategies.refresh()
    for loaded in [m for m in sys.modules if under(m, PACKAGE)]:
        del sys.modules[loaded]


def test_every_built_in_method_is_found():
    assert set(METHODS) >= {"kimera", "mop", "doktra", "stilt", "pretrain", "context"}
    assert set(EXCEPTIONS) <= set(METHODS)  # no exception for a method that is gone


@pytest.mark.parametrize("name", sorted(EVERY))
def test_the_skeleton_s_files_exist(name):
    folder, _ = EVERY[name]
    missing = [file for file in FILES if not (folder / file).is_file()]
    assert not missing, f"{name}: no {', '.join(missing)}"
    assert (folder / "report.py").is_file() != (name in EXCEPTIONS), \
        f"{name}: report.py must exist, or the method be in EXCEPTIONS with the reason it has none (not both)"
    init = tree(folder / "__init__.py").body
    assert len(init) == 1 and isinstance(init[0], ast.Expr) and isinstance(init[0].value, ast.Constant), \
        f"{name}: __init__.py holds a docstring only"


@pytest.mark.parametrize("name", sorted(EVERY))
def test_validate_hands_plan_resolved_to_the_stages(name, template_on_path):
    folder, package = EVERY[name]
    plan = tree(folder / "plan.py")
    top = {node.name: node for node in plan.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    assert isinstance(top.get("Resolved"), ast.ClassDef) and isinstance(top.get("resolve"), ast.FunctionDef), \
        f"{name}: plan.py defines a dataclass Resolved and a function resolve"
    resolved = importlib.import_module(f"{package}.plan").Resolved
    assert dataclasses.is_dataclass(resolved) and resolved.__dataclass_params__.frozen, f"{name}: Resolved is frozen"
    strategy = tree(folder / "strategy.py")
    validate = [ast.unparse(s) for s in method_of(strategy, None, "validate").body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # the docstring aside
    assert validate == ["super().validate(run)", "return resolve(run, self.config)"], f"{name}: {validate}"
    assert "run.resolved" in ast.unparse(method_of(strategy, None, "stages")), f"{name}: stages reads run.resolved"


@pytest.mark.parametrize("name", sorted(EVERY))
def test_stages_py_holds_plain_configs_and_no_body_imports_the_plan(name):
    folder, package = EVERY[name]
    stages = tree(folder / "stages.py")
    overrides = sorted({node.name for node in ast.walk(stages)
                        if isinstance(node, ast.FunctionDef) and node.name in EXTENSION_POINTS})
    assert not overrides, f"{name}: stages.py overrides {overrides}; move the config beside the code it calls"
    bodies = [node.name for node in stages.body if isinstance(node, ast.FunctionDef) and node.name.endswith("_body")]
    assert not bodies, f"{name}: stage bodies {bodies} live beside the code they run, not in stages.py"
    for path in sorted(folder.glob("*.py")):
        if path.name in ("strategy.py", "plan.py"):
            continue
        module = f"{package}.{path.stem}" if path.stem != "__init__" else package
        found = [line for line, imported in imports(path, module, path.stem == "__init__")
                 if under(imported, f"{package}.plan")]
        assert not found, f"{path.relative_to(ROOT)}:{found[0]} imports plan.py (it would join a stage's key)"


def test_the_template_reaches_kinject_only_through_the_api_and_the_front_doors():
    doors = front_door_names()
    wrong = []
    for path in sorted(FOLDER.glob("*.py")):
        module = f"{PACKAGE}.{path.stem}" if path.stem != "__init__" else PACKAGE
        for line, name in imports(path, module, path.stem == "__init__"):
            if under(name, "kinject") and not (under(name, "kinject.api") or through_front_door(name, doors)):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not wrong


@pytest.mark.parametrize("name", sorted(EVERY))
def test_quick_stages_follow_the_naming_rule(name, tmp_path, tiny_model, template_on_path):
    from kinject.api import build_spec, prepare
    from kinject.training import EvaluateConfig, FinetuneConfig, evaluate_body, finetune_body

    spec = build_spec({"strategy": {"name": name}, "task": {"name": "hpo-isa"}, "model": {"name": "tiny"},
                       "protocol": "quick", "data_dir": str(tmp_path / "empty")})
    stages = prepare(spec).stages  # planned, none executed
    names = [stage.name for stage in stages]
    wrong = [n for n in names if n not in BASELINE | PROBE and not n.startswith(f"{name}-")]
    assert not wrong, f"{name}: stages {wrong} are not named {name}-..."
    for stage in stages:
        if stage.name == "finetune":  # the shared baseline: the finetune strategy's stage, from the base model
            assert (type(stage.config), stage.body, stage.inputs) == (FinetuneConfig, finetune_body, ()), name
        elif stage.name == "evaluate":
            assert (type(stage.config), stage.body, stage.inputs) == (EvaluateConfig, evaluate_body, ("finetune",))
    package = EVERY[name][1]
    reports = [stage.name for stage in stages if stage.body.__module__ == f"{package}.report"]
    assert reports == ([] if name in EXCEPTIONS else [f"{name}-report"]), f"{name}: report stages {reports}"
