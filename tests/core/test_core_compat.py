"""The compatibility promise (kinject.compat): every moved module and name keeps working for one release with a
warning naming its replacement, then fails as one line naming the move; a plugin's declared kinject requirement;
two distributions registering one name; plugin text printed as text; the shared builders take a TaskRef."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from helpers import fake_distribution, one_line_error, run_kinject

import kinject
from kinject import compat
from kinject.errors import PluginLoadError
from kinject.registry import registry


def _fresh(name: str) -> None:
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


@pytest.mark.parametrize("old", sorted(compat.MOVED))
def test_every_moved_module_and_name_still_resolves_with_a_warning_naming_its_replacement(old):
    module, _, name = old.partition(":")
    moved = compat.MOVED[old]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if "." in name:  # a moved method: the class's old method calls the new function
            owner, _, method = name.partition(".")
            instance = getattr(importlib.import_module(module), owner)()
            target, _, attr = moved.new[0].partition(":")
            assert getattr(instance, method)() == getattr(importlib.import_module(target), attr)(instance)
        elif name:
            value = getattr(importlib.import_module(module), name)
            target, _, attr = moved.new[0].partition(":")
            assert value is getattr(importlib.import_module(target), attr)
        else:
            _fresh(module)
            alias = importlib.import_module(module)
            assert alias.__path__ == []  # a package: its old submodules import under it
    # importing an old submodule warns of its old parent too: the warning naming ``old`` is the one checked
    found = [w for w in caught if issubclass(w.category, compat.KinjectDeprecationWarning)
             and str(w.message).startswith(f"{old.replace(':', '.')} moved")]
    assert found and issubclass(found[0].category, DeprecationWarning)
    text = str(found[0].message)
    assert f"{old.replace(':', '.')} moved in kinject {moved.since}" in text and moved.new[0].split(":")[0] in text
    assert f"goes in kinject {moved.removed_in}" in text


def test_the_docs_migration_table_names_every_move():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text(encoding="utf-8")
    section = docs.split("## Compatibility and migration", 1)[1].split("\n## ", 1)[0]
    for old, moved in compat.MOVED.items():
        module, _, name = old.partition(":")
        assert f"kinject {moved.since}** (old places served until {moved.removed_in})" in section
        shown = module.rpartition(".")[2] if module.startswith("kinject.sources.") else module
        assert shown in section and (not name or name in section or module == "kinject.api"), old


def test_the_old_modules_hand_out_the_names_last_release_had():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kinject.plugins.pretrain.masking import SEP_WORD, WholeWordMaskCollator
        from kinject.plugins.pretrain.mlm import load_mlm, masked_windows
        from kinject.sources.hpo import HpoSource
        from kinject.stages import finetune_stage, plain
        from kinject.training import HEAD_MODULES, train
    from kinject.plugins.knowledge import HpoSource as current

    assert HpoSource is current and SEP_WORD == -1 and "classifier" in HEAD_MODULES
    assert all(callable(f) for f in (WholeWordMaskCollator, load_mlm, masked_windows, finetune_stage, plain, train))


def test_a_name_that_never_existed_is_still_an_attribute_error():
    import kinject.api

    with pytest.raises(AttributeError):
        kinject.api.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from kinject.plugins.pretrain.stages import no_such_name  # noqa: F401


def test_after_the_removal_release_the_old_place_fails_as_one_line_naming_the_move(monkeypatch):
    monkeypatch.setattr(kinject, "__version__", "0.2.0")
    _fresh("kinject.stages")
    with pytest.raises(ModuleNotFoundError) as gone:
        importlib.import_module("kinject.stages")
    line = compat.explain_import_error(gone.value)
    assert line == ("imports kinject.stages, which kinject 0.2.0 does not have (moved to kinject.plugins.training (its "
                    "front door; docs/plugins.md lists every name) in kinject 0.1.0; see "
                    "docs/plugins.md#compatibility-and-migration)")
    import kinject.plugins.pretrain.stages as stages

    with pytest.raises(AttributeError):
        stages.MlmConfig  # noqa: B018
    error = ImportError("cannot import name 'MlmConfig' from 'kinject.plugins.pretrain.stages' (x.py)",
                        name="kinject.plugins.pretrain.stages")
    assert "moved to kinject.plugins.knowledge.mlm.MlmConfig in kinject 0.1.0" in compat.explain_import_error(error)
    assert compat.explain_import_error(ModuleNotFoundError("No module named 'torch9'", name="torch9")) is None


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """Three third-party distributions: two register the strategy `twin`; one needs a kinject that is not this one;
    one's strategy imports a kinject module that does not exist and documents itself with square brackets."""
    body = '''
        """{doc}"""
        from kinject.api import Strategy

        class Twin(Strategy):
            """{doc}"""

            def stages(self, run):
                {body}
        '''
    one = fake_distribution(tmp_path / "one", "kinject-twin-a", "[kinject.strategies]\ntwin = twin_a:Twin\n",
                            {"twin_a": body.format(doc="The first twin.", body="return []")})
    two = fake_distribution(tmp_path / "two", "kinject-twin-b", "[kinject.strategies]\ntwin = twin_b:Twin\n"
                            "future = future_plugin:Twin\nmarked = marked_plugin:Twin\n", {
                                "twin_b": body.format(doc="The second twin.", body="return []"),
                                "future_plugin": body.format(doc="Needs a later kinject.", body="return []"),
                                "marked_plugin": body.format(doc="Wraps mentions in [E] .. [/E] markers.",
                                                             body="import kinject.no_such_module  # noqa"),
                            })
    metadata = next(two.glob("*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text() + "Requires-Dist: numpy\n")
    future = fake_distribution(tmp_path / "three", "kinject-future",
                               "[kinject.strategies]\nlater = later_plugin:Twin\n", {"later_plugin": body.format(doc="Needs kinject 0.5.", body="return []")})
    metadata = next(future.glob("*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text() + "Requires-Dist: kinject>=0.5,<0.6\n")
    for root in (one, two, future):
        monkeypatch.syspath_prepend(str(root))
    registry("strategies").refresh()
    yield
    registry("strategies").refresh()


def test_two_distributions_registering_one_name_are_listed_and_refused_naming_both(outside, capsys):
    from rich.console import Console

    from kinject.plugins.cli.listing import print_plugins

    console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_plugins("strategies", console=console)
    row = next(line for line in console.export_text().splitlines() if " twin " in line)
    assert "broken" in row and "kinject-twin-a 1.2.3" in row and "kinject-twin-b 1.2.3" in row
    line = one_line_error(capsys, ["run", "twin", "--task", "textcls", "--set", "task.path=/nowhere"])
    assert "strategy 'twin': registered by 2 distributions: kinject-twin-a 1.2.3 (twin_a:Twin) and kinject-twin-b " \
           "1.2.3 (twin_b:Twin); uninstall one" in line


def test_a_plugin_declaring_another_kinject_gets_one_line(outside, capsys):
    with pytest.raises(PluginLoadError, match=r"^strategy 'later' from kinject-future 1.2.3 needs "
                                              r"kinject<0.6,>=0.5; this is kinject 0.1.0$"):
        registry("strategies").get("later")
    assert registry("strategies").refusal("later") == "needs kinject<0.6,>=0.5; this is kinject 0.1.0"
    assert registry("strategies").refusal("future") == ""  # no kinject requirement: nothing to check


def test_info_prints_square_brackets_as_text(outside, capsys):
    capsys.readouterr()
    assert run_kinject("info", "marked") == 0
    assert "Wraps mentions in [E] .. [/E] markers." in capsys.readouterr().out


def test_a_plugin_importing_a_kinject_module_that_does_not_exist_is_told_so(outside, tmp_path, textcls_dir,
                                                                             tiny_model, capsys):
    line = one_line_error(capsys, ["run", "marked", "--task", "textcls", "--model", "tiny", "--set",
                                   f"task.path={textcls_dir}", "-o", str(tmp_path / "out")])
    assert "strategy 'marked' from kinject-twin-b 1.2.3 imports kinject.no_such_module, which kinject 0.1.0 does " \
           "not have" in line and "docs/plugins.md#compatibility-and-migration" in line
    assert "a package it needs is missing" not in line


def test_the_shared_builders_take_a_task_ref_with_an_input_transform(tmp_path, textcls_dir, tiny_model):
    from kinject.api import InputTransform, build_spec, prepare
    from kinject.plugins.training import evaluate_stage, finetune_stage

    run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "finetune"},
                              "task": {"name": "textcls", "path": str(textcls_dir)},
                              "cache_dir": str(tmp_path / "cache")}))
    marked = run.task_ref().with_inputs(InputTransform(function="my_pkg.mark:add", options={"marker": "E"}))
    assert run.task_ref(marked) is marked
    for stage in (finetune_stage(run, "marked-finetune", task=marked), evaluate_stage(run, "marked-finetune",
                                                                                      task=marked)):
        assert stage.config.task.inputs.function == "my_pkg.mark:add" and stage.config.task.name == "textcls"
