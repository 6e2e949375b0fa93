"""What `kinject list` / `info` / `doctor` say of a plugin without importing it (kinject.cli.describe): its
description from the source text, broken plugins reported without breaking the others, no plugin or torch import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kinject.cli.describe import plugin_infos, static_inspect


def test_listing_reports_broken_plugins_without_breaking_others(broken_dist):
    infos = {i.name: i for i in plugin_infos("strategies")}
    assert infos["finetune"].health == "ok" and infos["finetune"].distribution == "kinject"
    assert infos["needs_missing"].health == "broken"
    assert "package_that_is_not_installed" in infos["needs_missing"].error
    assert infos["needs_missing"].distribution == "kinject-broken-plugins" and infos["needs_missing"].version == "1.2.3"
    # static inspection cannot see a raise at import time or a class of the wrong kind (loading does: the registry's
    # tests), so those two read ok here; `kinject list --check` imports them (below)
    assert infos["raises_on_import"].health == "ok" and infos["not_a_strategy"].health == "ok"


def test_an_unparsable_plugin_is_listed_broken_and_others_still_run(tmp_path, monkeypatch):
    from helpers import installed
    from kinject.cli.describe import plugin_info

    with installed(monkeypatch, tmp_path / "site", "kinject-unparsable", """
            [kinject.strategies]
            unparsable = outside_broken:Strategy
            """, {"outside_broken": "class Strategy(:\n    pass\n"}, "strategies"):
        info = plugin_info("strategies", "unparsable")
        assert info.health == "broken" and "SyntaxError" in info.error and "outside_broken.py:1" in info.error
        assert plugin_info("strategies", "finetune").health == "ok"


def test_list_imports_no_plugin_and_no_torch():
    code = ("import sys\nfrom kinject.cli.app import main\n"
            "try:\n    main(['list'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('kinject.tasks.', 'kinject.plugins.',"
            " 'transformers')) and not m.startswith('kinject.cli.')"  # the list command itself
            " and not hasattr(sys.modules[m], '__path__')]\nprint('IMPORTED', bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "finetune" in out.stdout
    assert "IMPORTED []" in out.stdout, out.stdout[-500:]


def test_list_health_check_in_cli(broken_dist, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    from kinject.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(["list", "strategies", "--check"])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert "needs_missing" in out and "missing dependency" in out
    assert "boom at import" in out and "is not a Strategy" in out


def test_listing_describes_commands_without_importing_them(tmp_path, monkeypatch):
    """A command's description comes from its source text: a function's docstring after a signature over several
    lines, or a typer app's help; nothing is imported (the module would raise)."""
    (tmp_path / "listed_cmds.py").write_text(
        'import typer\nraise RuntimeError("imported")\n\n'
        'def hello(name: str = typer.Option("x", "--name",\n'
        '                                   help="who"),\n'
        '          loud: bool = typer.Option(False)) -> None:\n'
        '    """Say hello to NAME."""\n\n'
        'app = typer.Typer(add_completion=False,\n'
        '                  help="Greetings: hello, bye.")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert static_inspect("listed_cmds:hello") == ("Say hello to NAME.", "")
    assert static_inspect("listed_cmds:app") == ("Greetings: hello, bye.", "")
    assert static_inspect("listed_cmds:missing")[1] == "listed_cmds defines no 'missing'"
    assert "listed_cmds" not in sys.modules
