"""The traps an outside plugin author met (issue #35): --limit for every task, protocols checked, one file spelled
two ways, a header row of a triples file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_kinject as kinject


def test_the_engine_applies_limit_to_a_task_that_ignores_it(tmp_path):
    from kinject.api import Environment, Task

    class Careless(Task):
        name = "careless"

        def examples(self, split, env):  # never looks at env.limit
            return [{"id": f"{split}-{i}", "text": "x", "label": "a", "group": f"q{i // 3}"} for i in range(30)]

    task = Careless()
    env = Environment(data_dir=tmp_path, cache_dir=tmp_path, limit=4)
    rows = task.examples("test", env)
    assert len({r["group"] for r in rows}) == 4 and len(rows) == 12  # 4 units, each whole (a query's candidates)
    assert len(task.examples("test", Environment(data_dir=tmp_path, cache_dir=tmp_path))) == 30


def test_a_protocol_is_checked_and_quick_works_without_one(tmp_path):
    from kinject.api import PluginConfig, SpecError, Strategy
    from kinject.defaults import check_protocol

    class Mine(Strategy):
        name = "mine"

        class Config(PluginConfig):
            steps: int = 3

    check_protocol(Mine, "quick", {"strategy": {"steps": 1}, "training": {"max_steps": 5}})
    with pytest.raises(SpecError, match="sets strategy.kg_steps, which is no field"):
        check_protocol(Mine, "quick", {"strategy": {"kg_steps": 1}})
    with pytest.raises(SpecError, match="has a section 'strategy.steps'"):
        check_protocol(Mine, "quick", {"strategy.steps": 1})  # a --set-style key would silently do nothing
    from kinject.api import registry

    for name in registry("strategies").names():  # every built-in protocol names real fields
        cls = registry("strategies").get(name)
        for protocol, presets in cls.protocols.items():
            check_protocol(cls, protocol, presets)


def test_one_file_spelled_relative_or_absolute_makes_the_same_keys(tmp_path, textcls_dir, tiny_model, monkeypatch):
    from kinject.api import build_spec, plan, prepare

    monkeypatch.chdir(textcls_dir.parent)
    keys = []
    for path in (textcls_dir.name, f"./{textcls_dir.name}", str(textcls_dir), f"{textcls_dir}/../{textcls_dir.name}"):
        run = prepare(build_spec({"model": {"name": "tiny"}, "task": {"name": "textcls", "path": path},
                                  "hooks": {"knowledge-probe": {"enabled": False}}, "cache_dir": str(tmp_path / "cache")}))
        keys.append([p.key for p in plan(run)])
    assert all(k == keys[0] for k in keys)


def test_a_header_row_of_names_is_not_read_as_a_triple(tmp_path, capsys):
    kg = tmp_path / "kg.csv"
    kg.write_text("head,relation,tail\ngene a,causes,disease b\ndrug c,treats,disease b\n")
    capsys.readouterr()
    assert kinject("kg", "stats", str(kg), "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["triples"] == 2 and "head" not in stats["relation_counts"]
    assert kinject("kg", "stats", str(kg), "--set", "header=false", "--json") == 0
    assert json.loads(capsys.readouterr().out)["triples"] == 3  # asked to: the row is a triple
