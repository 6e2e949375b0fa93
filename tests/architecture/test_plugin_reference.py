"""docs/plugin-reference.md documents what an outside author meets: every field of ``Triple``, every method of a
knowledge source with its signature, ``FILE_PATH``, what ``init_from`` loads, how an instance is built, and every
fixture of ``kinject.testing``; docs/plugins.md links it."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "plugin-reference.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    return PAGE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_page_has_each_section_and_plugins_md_links_it():
    for title in ("How a plugin instance is built", "`FILE_PATH`", "`Triple`", "A knowledge source's methods",
                  "What `init_from` loads", "Testing a plugin package"):
        assert f"\n## {title}" in PAGE, title
    assert "(plugin-reference.md)" in (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")


def test_every_field_of_triple_is_in_its_table_with_its_type():
    from kinject.api import Triple

    rows = dict(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", section("`Triple`"), re.M))
    assert rows == {f.name: f.type if isinstance(f.type, str) else f.type.__name__ for f in dataclasses.fields(Triple)}


def test_every_method_of_a_source_is_documented_with_its_signature():
    from kinject.api import KnowledgeSource

    text = section("A knowledge source's methods")
    methods = [name for name, _ in inspect.getmembers(KnowledgeSource, inspect.isfunction)
               if not name.startswith("_") and name != "summary"]
    assert methods
    for name in methods:
        shown = inspect.signature(getattr(KnowledgeSource, name))
        written = re.sub(r"['\"]", "", f"`{name}{shown}`")  # postponed annotations are strings
        assert written in text, (name, written)


def test_every_fixture_of_kinject_testing_is_documented_and_every_documented_one_exists():
    import kinject.testing as testing

    fixtures = {name for name, value in vars(testing).items() if hasattr(value, "_pytestfixturefunction")
                or type(value).__name__ == "FixtureFunctionDefinition"}
    documented = set(re.findall(r"^\| `(kinject_\w+)` \|", section("Testing a plugin package"), re.M))
    assert fixtures == documented and len(fixtures) == 4, (fixtures, documented)
    for name in testing.__all__:
        assert f"`{name}" in section("Testing a plugin package") or name == "OFFLINE", name
