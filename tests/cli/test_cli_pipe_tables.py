"""`kinject list` / `kinject info` piped (stdout not a terminal, no COLUMNS): one line per table row, descriptions
whole; a terminal's rendering is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rich.console import Console

from kinject.cli.describe import plugin_info
from kinject.cli.listing import pipe_console
from kinject.registry import GROUPS, registry


def _piped(*args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run([sys.executable, "-m", "kinject", *args], capture_output=True, text=True, env=env,
                            timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def _fresh_infos() -> dict[str, list[list[str]]]:
    """kind -> [name, description] as a fresh process sees the installed plugins (this test process may hold
    other tests' fake distributions)."""
    code = ("import json; from kinject.registry import GROUPS; from kinject.cli.describe import plugin_infos; "
            "print(json.dumps({k: [[i.name, i.description] for i in plugin_infos(k)] for k in GROUPS}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_list_piped_gives_each_plugin_one_line_with_its_whole_description():
    fresh = _fresh_infos()
    sections: dict[str, list[str]] = {}
    for line in _piped("list"):
        if line.strip() in GROUPS:  # a table's title
            current = sections.setdefault(line.strip(), [])
        else:
            current.append(line)
    assert set(sections) == set(GROUPS)
    for kind, lines in sections.items():
        infos = fresh[kind]
        for name, description in infos:
            assert description, f"{kind} {name} has no description"
            mine = [line for line in lines if line.startswith(f"│ {name} ")]
            assert len(mine) == 1, (kind, name, mine)
            assert description in mine[0] and mine[0].rstrip().endswith("│"), mine[0]
        # no row continues on a second line: one body line per plugin
        assert sum(line.startswith("│ ") for line in lines) == len(infos), (kind, lines)


def test_gad_has_a_description():
    assert plugin_info("tasks", "gad").description.startswith("GAD")


def test_info_piped_keeps_each_field_and_its_description_on_one_line():
    lines = _piped("info", "kimera")
    fields = registry("strategies").get("kimera").Config.model_fields
    for field, spec in fields.items():
        mine = [line for line in lines if line.startswith(f"│ {field} ")]
        assert len(mine) == 1, (field, mine)
        assert (spec.description or "") in mine[0]
    assert sum(line.startswith("│ ") for line in lines) == len(fields)  # no wrapped continuation rows
    assert lines[0].startswith("kimera (strategy, ") and registry("strategies").get("kimera").summary() in lines[0]


def test_terminal_console_is_kept_and_columns_is_honoured(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    terminal = Console(force_terminal=True, width=80)
    assert pipe_console(terminal) is terminal
    piped = Console(force_terminal=False, width=80)
    assert pipe_console(piped).width > 1000
    monkeypatch.setenv("COLUMNS", "120")
    assert pipe_console(piped) is piped
