"""Import boundaries as a graph: kernel <- tasks <- the training library <- library plugins (knowledge, evidence)
<- methods.

* the kernel (core/ = ``kinject``) imports no task and no plugin;
* tasks, library plugins and methods reach the kernel only through ``kinject.api``;
* tasks import no plugin; the training library imports no plugin; another library plugin imports no plugin but
  the training library; a method imports no other method;
* a library (and the tasks package) is entered only through its front door: another plugin (and an outside one)
  imports the names its ``__init__`` exports (``from kinject.plugins.knowledge import build_kg_data``), never its
  modules.

Every import statement counts (also those inside functions), and so do ``importlib.import_module("...")`` /
``__import__("...")`` calls with a literal name."""

from __future__ import annotations

import ast
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """Source folder -> package name, from pyproject.toml [tool.setuptools] package-dir."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    return {folder: package for package, folder in config["tool"]["setuptools"]["package-dir"].items()}


def module_of(path: Path, folder: Path, package: str) -> tuple[str, bool]:
    """(dotted module name, is a package __init__) of a source file under ``folder`` (= ``package``)."""
    parts = path.relative_to(folder).as_posix().removesuffix(".py").split("/")
    init = parts[-1] == "__init__"
    return ".".join([package, *(parts[:-1] if init else parts)]), init


def imports(path: Path, module: str, package: bool) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file; ``from a import b`` yields a and a.b."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if package else module.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__"):
                out.append((node.lineno, node.args[0].value))
    return out


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


TRAINING = "kinject.plugins.training"  # the fine-tune and evaluate stages: the library the other libraries build on
LIBRARIES = (TRAINING, "kinject.plugins.knowledge", "kinject.plugins.evidence")
DOORS = (*LIBRARIES, "kinject.tasks")  # entered only through their front door by a plugin


def front_door_names(root: Path = ROOT) -> dict[str, set[str]]:
    """Library -> the names its front door exports (the strings of ``_EXPORTS`` in its ``__init__.py``)."""
    doors = {}
    for folder, package in package_dirs(root).items():
        init = root / folder / "__init__.py"
        if package not in DOORS:
            continue
        names = set()
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8") if init.exists() else "")):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
                names |= {c.value for value in node.value.values for c in ast.walk(value)
                          if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        doors[package] = names
    return doors


def through_front_door(name: str, doors: dict[str, set[str]]) -> bool:
    """``name`` is a library itself or a name its front door exports (not one of its modules)."""
    library, _, rest = name.rpartition(".")
    return name in doors or (library in doors and rest in doors[library])


def layer(package: str) -> str:
    if package == "kinject":
        return "kernel"
    if under(package, "kinject.tasks"):
        return "tasks"
    return "library" if package in LIBRARIES else "method"


def rule_broken(package: str, name: str, doors: dict[str, set[str]] | None = None) -> str | None:
    """Which rule ``package`` breaks by importing ``name`` (None: allowed); ``doors``: :func:`front_door_names`."""
    if not under(name, "kinject") or (package != "kinject" and under(name, package)):
        return None
    plugin = under(name, "kinject.plugins") and name != "kinject.plugins"
    kind = layer(package)
    if kind == "kernel":
        return "the kernel imports no task and no plugin" if plugin or under(name, "kinject.tasks") else None
    if not plugin and not under(name, "kinject.tasks") and name not in ("kinject", "kinject.api") \
            and not under(name, "kinject.api"):
        return "plugins and tasks reach the kernel only through kinject.api"
    if kind == "tasks" and plugin:
        return "tasks import no plugin"
    if kind == "library" and plugin and (package == TRAINING or not under(name, TRAINING)):
        return "a library plugin imports no other plugin but the training library"
    if kind == "method" and plugin and not any(under(name, lib) for lib in LIBRARIES):
        return "methods do not import each other"
    if kind in ("library", "method") and doors is not None and any(under(name, door) for door in DOORS) \
            and not through_front_door(name, doors):
        return "a library is entered through its front door"
    return None


def violations(root: Path = ROOT) -> list[str]:
    """One line per offending import: file:line, who imports what, which rule it breaks."""
    found, seen = [], set()
    doors = front_door_names(root)
    for folder, package in package_dirs(root).items():
        for path in sorted((root / folder).rglob("*.py")):
            module, is_package = module_of(path, root / folder, package)
            for line, name in imports(path, module, is_package):
                broken = rule_broken(package, name, doors)
                if broken is None or (path, line) in seen:  # one report per statement
                    continue
                found.append(f"{path.relative_to(root)}:{line}: {module} imports {name} ({broken})")
                seen.add((path, line))
    return found


def test_mapping_covers_every_source_folder():
    dirs = package_dirs()
    assert dirs["core"] == "kinject" and dirs["tasks"] == "kinject.tasks"
    for plugin in sorted(p for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists()):
        assert dirs.get(f"plugins/{plugin.name}") == f"kinject.plugins.{plugin.name}", plugin


def test_the_checker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from kinject.plugins.kimera import strategy\n"
                      "from ..stilt import matrix\nimport importlib\nimportlib.import_module('kinject.tasks.ner')\n")
    found = imports(source, "kinject.plugins.mop.mod", False)
    assert (2, "kinject.plugins.kimera.strategy") in found
    assert (3, "kinject.plugins.stilt.matrix") in found
    assert (5, "kinject.tasks.ner") in found


def test_the_checker_reports_each_rule(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "kinject" = "core", "kinject.tasks" = "tasks", '
        '"kinject.plugins.a" = "plugins/a", "kinject.plugins.b" = "plugins/b", '
        '"kinject.plugins.knowledge" = "plugins/knowledge", "kinject.plugins.evidence" = "plugins/evidence", '
        '"kinject.plugins.training" = "plugins/training" }\n')
    files = {"core/engine.py": "def f():\n    import kinject.tasks.ner\n",
             "core/plugins/__init__.py": "from kinject.plugins import a\n",
             "tasks/ner.py": "from kinject.api import Task\nfrom kinject.plugins.a import x\nfrom kinject import engine\n",
             "plugins/a/__init__.py": "from . import own\nfrom ..b import helper\nfrom kinject.plugins.knowledge import kg\n"
                                      "from kinject.plugins.knowledge import build_kg_data\n",
             "plugins/b/__init__.py": "from kinject.tasks import ner\nfrom kinject.plugins.b import y\n",
             "plugins/knowledge/__init__.py": "from kinject.plugins.evidence import stats\n"
                                              "from kinject.tasks import x\nfrom kinject.plugins.training import train\n"
                                              "_EXPORTS = {'.kg.data': ('build_kg_data',)}\n",
             "plugins/training/__init__.py": "from kinject.tasks import x\nfrom kinject.plugins.knowledge import kg\n"
                                             "_EXPORTS = {'.loop': ('train',)}\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = violations(tmp_path)
    assert [line.split(" (")[0] for line in found] == [
        "core/engine.py:2: kinject.engine imports kinject.tasks.ner",
        "core/plugins/__init__.py:1: kinject.plugins imports kinject.plugins.a",
        "tasks/ner.py:2: kinject.tasks.ner imports kinject.plugins.a",
        "tasks/ner.py:3: kinject.tasks.ner imports kinject.engine",
        "plugins/a/__init__.py:2: kinject.plugins.a imports kinject.plugins.b",
        "plugins/a/__init__.py:3: kinject.plugins.a imports kinject.plugins.knowledge.kg",
        "plugins/b/__init__.py:1: kinject.plugins.b imports kinject.tasks.ner",
        "plugins/knowledge/__init__.py:1: kinject.plugins.knowledge imports kinject.plugins.evidence",
        "plugins/knowledge/__init__.py:2: kinject.plugins.knowledge imports kinject.tasks.x",
        "plugins/training/__init__.py:1: kinject.plugins.training imports kinject.tasks.x",
        "plugins/training/__init__.py:2: kinject.plugins.training imports kinject.plugins.knowledge"]


def test_an_outside_plugin_needs_nothing_but_the_front_doors():
    """The example third-party plugins import the kernel only through kinject.api, a library only through its
    front door (but kinject-legacy, written against the previous release's paths on purpose: kinject.compat)."""
    doors = front_door_names()
    for path in sorted(p for p in (ROOT / "tests" / "third_party" / "plugins").rglob("*.py")
                       if "build" not in p.parts and "legacy" not in p.parts):
        for line, name in imports(path, "outside." + path.stem, path.name == "__init__.py"):
            assert not under(name, "kinject") or name in ("kinject", "kinject.api") or under(name, "kinject.api") \
                or through_front_door(name, doors), f"{path}:{line}: imports {name}"


def test_import_boundaries():
    found = violations()
    assert not found, "import boundary violations:\n" + "\n".join(found)
