"""Dependencies point one way: contract <- tasks <- training <- knowledge <- evidence <- engine <- methods <- front
ends (docs/architecture.md, "Layers").

* a module imports only its own layer and the layers below it (a library never a method, a front end or the engine;
  the contract never a library);
* a method imports no other method;
* a method (and an outside plugin) enters a library through its front door (``from kinject.knowledge import
  build_kg_data``), never one of its modules, and reaches the kernel through ``kinject.api``;
* a name imported from ``kinject.api`` counts as an import of the module that defines it.

Every import statement counts (also those inside functions, but not those under ``if TYPE_CHECKING:``), and so do
``importlib.import_module("...")`` calls with a literal name."""

from __future__ import annotations

import ast
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]

#: the kernel's modules, by layer (``kinject.<module>``); everything else is placed by its package
CONTRACT = {"api", "context", "deprecation", "distributed", "errors", "facts", "files", "fingerprint", "frontdoor",
            "hooks", "interfaces", "io", "machine", "models", "records", "refs", "registry", "spec", "spec_reading",
            "splits"}
ENGINE = {"cache", "choice", "defaults", "engine", "keys", "outputs", "preparation", "stage_runner", "worker"}
LAYERS = ("contract", "tasks", "training", "knowledge", "evidence", "engine", "methods", "front ends")
FRONT_ENDS = ("kinject.cli", "kinject.experiments", "kinject.tasks.cli", "kinject.knowledge.cli", "kinject.__main__")
LIBRARIES = ("kinject.tasks", "kinject.training", "kinject.knowledge", "kinject.evidence")  # entered by front door


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer(module: str) -> str | None:
    """The layer of a kinject module (None: not kinject's)."""
    if module == "kinject":
        return "front ends"  # the package's root: kinject.run / kinject.load, the program's Python side
    if not under(module, "kinject"):
        return None
    if any(under(module, f) for f in FRONT_ENDS):
        return "front ends"
    parts = module.split(".")
    if parts[1] in CONTRACT:
        return "contract"
    if parts[1] in ENGINE:
        return "engine"
    if parts[1] == "plugins":
        return "methods"
    return {"tasks": "tasks", "training": "training", "knowledge": "knowledge", "evidence": "evidence"}.get(parts[1])


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """Source folder -> package name, from pyproject.toml [tool.setuptools] package-dir."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    return {folder: package for package, folder in config["tool"]["setuptools"]["package-dir"].items()}


def module_of(path: Path, folder: Path, package: str) -> tuple[str, bool]:
    """(dotted module name, is a package __init__) of a source file under ``folder`` (= ``package``)."""
    parts = path.relative_to(folder).as_posix().removesuffix(".py").split("/")
    init = parts[-1] == "__init__"
    return ".".join([package, *(parts[:-1] if init else parts)]), init


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, inner.end_lineno + 1))
    return lines


def imports(path: Path, module: str, package: bool) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names imported from it) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skipped = _type_checking_lines(tree)
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if package else module.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.append((node.lineno, base, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value, ()))
    return out


def source_of(root: Path, module: str) -> Path:
    """The file of a module (a package: its __init__.py), by the longest package-dir prefix."""
    dirs = sorted(package_dirs(root).items(), key=lambda item: -len(item[1]))
    folder, package = next((f, p) for f, p in dirs if under(module, p))
    path = root / folder / Path(*module[len(package):].strip(".").split(".")) if module != package else root / folder
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def exports(root: Path, door: str) -> dict[str, str]:
    """A front door's name -> the module defining it (its ``_EXPORTS`` table, read, not imported)."""
    init = source_of(root, door)
    package = door if init.name == "__init__.py" else door.rpartition(".")[0]
    out: dict[str, str] = {}
    if not init.exists():
        return out
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
            for module, names in ast.literal_eval(node.value).items():
                target = package + module if module.startswith(".") else module
                out.update({name: target for name in names})
    return out


def front_doors(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """kinject.api and each library -> {name it exports: defining module}."""
    return {door: exports(root, door) for door in (*LIBRARIES, "kinject.api") if source_of(root, door).exists()}


def targets(name: str, names: tuple[str, ...], doors: dict[str, dict[str, str]]) -> list[str]:
    """The modules an import reaches: a front door's names count as their defining modules."""
    if name in doors:
        found = [doors[name].get(n) or f"{name}.{n}" for n in names]
        return found or [name]
    return [name, *(f"{name}.{n}" for n in names if f"{name}.{n}" in doors)] if names else [name]


def rule_broken(module: str, target: str, entered: str, doors: dict[str, dict[str, str]]) -> str | None:
    """Which rule ``module`` breaks by importing ``target`` (reached by the statement's module ``entered``)."""
    if not under(target, "kinject") or target == "kinject":
        return None
    mine, theirs = layer(module), layer(target)
    if mine is None or theirs is None:
        return None
    if mine == theirs == "methods":
        own = ".".join(module.split(".")[:3])
        return None if under(target, own) else "methods do not import each other"
    if LAYERS.index(theirs) > LAYERS.index(mine):
        return f"the {mine} layer imports nothing of the {theirs} layer"
    if mine == "methods" and any(under(entered, lib) for lib in LIBRARIES) and entered not in doors:
        return "a method enters a library through its front door"
    if mine == "methods" and theirs in ("contract", "engine") and "kinject.api" not in (entered, target):
        return "a method reaches the kernel through kinject.api"
    return None


def violations(root: Path = ROOT) -> list[str]:
    """One line per offending import: file:line, who imports what, which rule it breaks."""
    found, seen = [], set()
    doors = front_doors(root)
    for folder, package in package_dirs(root).items():
        for path in sorted((root / folder).rglob("*.py")):
            module, is_package = module_of(path, root / folder, package)
            for line, name, names in imports(path, module, is_package):
                for target in targets(name, names, doors):
                    broken = rule_broken(module, target, name, doors)
                    if broken is None or (path, line) in seen:  # one report per statement
                        continue
                    found.append(f"{path.relative_to(root)}:{line}: {module} imports {target} ({broken})")
                    seen.add((path, line))
    return found


def test_every_module_has_a_layer():
    for folder, package in package_dirs().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            module, _ = module_of(path, ROOT / folder, package)
            assert layer(module) is not None, module


def test_mapping_covers_every_source_folder():
    dirs = package_dirs()
    assert dirs["core"] == "kinject" and dirs["tasks"] == "kinject.tasks"
    for plugin in sorted(p for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists()):
        assert dirs.get(f"plugins/{plugin.name}") == f"kinject.plugins.{plugin.name}", plugin


def test_the_checker_sees_imports_inside_functions_and_relative_ones_but_not_type_checking_ones(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kinject.engine import x\n"
                      "def f():\n    from kinject.plugins.kimera import strategy\n"
                      "from ..stilt import matrix\nimport importlib\nimportlib.import_module('kinject.tasks.ner')\n")
    found = [(line, name) for line, name, _ in imports(source, "kinject.plugins.mop.mod", False)]
    assert (5, "kinject.plugins.kimera") in found and (6, "kinject.plugins.stilt") in found
    assert (8, "kinject.tasks.ner") in found and not any(name == "kinject.engine" for _, name in found)


def test_the_checker_reports_each_rule(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "kinject" = "core", "kinject.tasks" = "tasks", '
        '"kinject.plugins.a" = "plugins/a", "kinject.plugins.b" = "plugins/b" }\n')
    files = {"core/api.py": "_EXPORTS = {'kinject.engine': ('execute',), 'kinject.interfaces': ('Stage',)}\n",
             "core/refs.py": "def f():\n    import kinject.tasks.ner\n",
             "core/engine.py": "from kinject.knowledge import dose\nfrom kinject.cli import app\n",
             "tasks/ner.py": "from kinject.api import Stage\nfrom kinject.training import x\n"
                             "from kinject.api import execute\n",
             "plugins/a/__init__.py": "from . import own\nfrom ..b import helper\nfrom kinject.knowledge.kg import data\n"
                                      "from kinject.knowledge import build_kg_data\nfrom kinject.api import execute\n",
             "core/knowledge/__init__.py": "from kinject.evidence import stats\nfrom kinject.tasks import x\n"
                                           "_EXPORTS = {'.kg.data': ('build_kg_data',)}\n",
             "core/training/__init__.py": "from kinject.knowledge import kg\n_EXPORTS = {'.loop': ('train',)}\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path)
    assert [line.split(" (")[0] for line in found] == [
        "core/engine.py:2: kinject.engine imports kinject.cli",
        "core/knowledge/__init__.py:1: kinject.knowledge imports kinject.evidence",
        "core/refs.py:2: kinject.refs imports kinject.tasks.ner",
        "core/training/__init__.py:1: kinject.training imports kinject.knowledge.kg",
        "tasks/ner.py:2: kinject.tasks.ner imports kinject.training.x",
        "tasks/ner.py:3: kinject.tasks.ner imports kinject.engine",
        "plugins/a/__init__.py:2: kinject.plugins.a imports kinject.plugins.b",
        "plugins/a/__init__.py:3: kinject.plugins.a imports kinject.knowledge.kg"], found


def test_an_outside_plugin_needs_nothing_but_the_front_doors():
    """The example third-party plugins import kinject only through kinject.api and the libraries' front doors."""
    doors = front_doors()
    for path in sorted(p for p in (ROOT / "tests" / "third_party" / "plugins").rglob("*.py") if "build" not in p.parts):
        for line, name, _ in imports(path, "outside." + path.stem, path.name == "__init__.py"):
            assert not under(name, "kinject") or name in ("kinject", *doors), f"{path}:{line}: imports {name}"


def test_the_kernel_names_no_plugin():
    """No plugin module is named in the kernel's code, as an import or as a string."""
    for path in sorted((ROOT / "core").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "kinject.plugins." not in text, path.name


def test_dependencies_point_one_way():
    found = violations()
    assert not found, "dependency direction violations:\n" + "\n".join(found)
