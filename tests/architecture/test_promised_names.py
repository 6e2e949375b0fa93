"""docs/plugins.md lists every public name: each listed name exists in its front door, each name a front door exports
is listed, and the docs import from nothing but the front doors."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT_DOORS = ("kinject.api", "kinject.tasks", "kinject.training", "kinject.knowledge",
               "kinject.evidence")


def listed() -> dict[str, set[str]]:
    """Front door -> the names docs/plugins.md's "Every public name" lists under it."""
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8").split("## Every public name", 1)[1]
    found: dict[str, set[str]] = {}
    for door, body in re.findall(r"^### `([\w.]+)`\n(.*?)(?=^### |\Z)", text, re.S | re.M):
        found[door] = set(re.findall(r"`(\w+)`", body))
    return found


def test_the_promise_names_the_same_front_doors():
    from kinject.deprecation import PUBLIC

    assert set(PUBLIC) - {"kinject"} == set(FRONT_DOORS) == set(listed())


@pytest.mark.parametrize("door", FRONT_DOORS)
def test_every_exported_name_is_listed_and_every_listed_name_exists(door):
    module = importlib.import_module(door)
    promised = listed()[door]
    assert promised == set(module.__all__), (sorted(set(module.__all__) - promised),
                                             sorted(promised - set(module.__all__)))
    for name in promised:
        assert getattr(module, name) is not None or name == "__version__", name


def test_a_name_from_a_front_door_is_its_defining_modules_object():
    import kinject.api as api
    from kinject.interfaces import Stage
    from kinject.knowledge.kg.data import build_kg_data

    import kinject.knowledge as knowledge

    assert api.Stage is Stage and knowledge.build_kg_data is build_kg_data
    with pytest.raises(AttributeError):
        api.not_a_promised_name  # noqa: B018


def test_the_docs_import_from_front_doors_only():
    offenders = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for module in re.findall(r"^\s*(?:from|import) (kinject[\w.]*)", line):
                if module not in (*FRONT_DOORS, "kinject"):
                    offenders.append(f"{path.name}:{line_no}: {module}")
    assert not offenders, offenders
