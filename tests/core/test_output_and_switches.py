"""What kinject prints and reads at its edges (issue #54): names and paths never reach the terminal as control
sequences, nor a model card's markdown as markup; KINJECT_PROBE is read strictly; a grid file is bounded before it is
parsed; every name kinject takes from transformers is resolved once when a run starts (two threads)."""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import pytest

from conftest import write_textcls
from helpers import one_line_error, run_kinject

ROOT = Path(__file__).resolve().parents[2]
ESCAPE = "\x1b[2J\x1b[31m"  # clear the screen, then red


# -- control characters in names and paths ------------------------------------------------------------------- #
def test_printable_shows_control_characters_as_their_escapes():
    from kinject.cli.printing import printable

    assert printable(f"a{ESCAPE}b\rc\x07\u2028") == "a\\x1b[2J\\x1b[31mb\\rc\\x07\\u2028"
    assert printable("two\nlines\tand a tab", lines=True) == "two\nlines\tand a tab"
    assert printable("two\nlines") == "two\\nlines" and printable("plain path/é") == "plain path/é"


def test_a_plugin_name_with_an_escape_is_listed_as_text(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from helpers import installed
    from kinject.cli.listing import print_plugins

    with installed(monkeypatch, tmp_path / "site", "kinject-loud", f"""
            [kinject.strategies]
            loud{ESCAPE} = loud_strategy:Strategy
            """, {"loud_strategy": f'"""Shouts{ESCAPE} at the terminal."""\nclass Strategy:\n    """x"""\n'},
                   "strategies"):
        out = io.StringIO()
        print_plugins("strategies", console=Console(file=out, width=400))
    text = out.getvalue()
    assert "\x1b" not in text and "loud\\x1b[2J\\x1b[31m" in text, text


def test_a_task_path_with_an_escape_prints_as_text_in_run(tmp_path, tiny_model, capsys):
    data = write_textcls(tmp_path / f"data{ESCAPE}")
    capsys.readouterr()
    assert run_kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
                       "--set", "hooks.knowledge-probe.enabled=false", "--cache-dir", str(tmp_path / "cache"),
                       "--dry-run") == 0
    said = capsys.readouterr()
    # no raw ESC anywhere; the escaped path may be cropped at the console's width (a longer tmp path under xdist),
    # so its text form is checked in the one-line error below, which is never cropped
    assert "\x1b" not in said.out + said.err and "test_a_task_path_with_an_escap" in said.out
    (data / "train.jsonl").write_text("not json\n")
    line = one_line_error(capsys, ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set",
                                   f"task.path={data}", "--cache-dir", str(tmp_path / "cache"), "--dry-run"])
    assert "\x1b" not in line and "data\\x1b[2J" in line


def test_every_console_of_the_program_escapes_control_characters():
    from kinject.cli import app, evidence_commands, run
    from kinject.experiments import commands

    for console in (app.err_console, run.console, evidence_commands.console, evidence_commands.err_console,
                    commands.console, commands.err_console):
        assert console.escapes_control_characters
    with run.console.capture() as captured:
        run.console.print(f"run{ESCAPE} vs baseline", markup=False)
    assert captured.get() == "run\\x1b[2J\\x1b[31m vs baseline\n"


# -- the model card's markdown ------------------------------------------------------------------------------------ #
def test_markup_and_line_breaks_from_a_run_stay_text_in_the_card():
    from kinject.plugins.hub.card import code, comparison_section, results_section, setup_section

    evil = "f1|x\n# Heading <script>alert(1)</script> [link](http://x) **bold** `tick`"
    metrics = {"test": {evil: 0.5, "accuracy": 0.75}}
    comparison = {"comparison": {"split": "test\n## injected", "metric": evil, "baseline_name": "finetune",
                                 "other_name": "kimera|x", "baseline": 0.5, "other": 0.6, "difference": 0.1,
                                 "ci_low": 0.0, "ci_high": 0.2, "n": 16, "verdict": "gain"}}
    info = {"spec": {"model": {"name": "tiny"}, "task": {"name": "textcls"}, "training": {"lr\n# x": 1},
                     "strategy": {"name": "kimera`\n", evil: "v\n> quote"}}}
    for text in (results_section(metrics), comparison_section(comparison), setup_section(info)):
        rows = [line for line in text.splitlines() if line.startswith("|")]
        headings = ("## Setup", "### Strategy settings", "### Training settings", "## Results", "## Compared")
        assert all(line.startswith(headings) for line in text.splitlines() if line.startswith(("#", ">"))), text
        bare = re.sub(r"(`+).*?\1", "", re.sub(r"\\.", "", text))  # what markdown reads as markup
        assert "<script>" not in bare and "**bold**" not in bare and "](http" not in bare, text
        assert all(line.count("|") - line.count("\\|") == rows[0].count("|") - rows[0].count("\\|") for line in rows), text
    assert "accuracy" in results_section(metrics) and "| 0.7500 |" in results_section(metrics)
    assert code("a`b") == "``a`b``" and code("`x") == "`` `x ``" and code("a|b\nc") == "`a\\|b\\nc`"


# -- KINJECT_PROBE, read as KINJECT_CHOOSE ------------------------------------------------------------------------ #
@pytest.mark.parametrize("value, on", [("off", False), ("0", False), ("FALSE", False), ("no", False), ("on", True),
                                       ("1", True), ("true", True), (" yes ", True), (None, True)])
def test_kinject_probe_is_read_strictly(monkeypatch, value, on):
    from kinject.knowledge.probe_hook import Config

    if value is None:
        monkeypatch.delenv("KINJECT_PROBE", raising=False)
    else:
        monkeypatch.setenv("KINJECT_PROBE", value)
    assert Config().enabled is on


def test_kinject_probe_that_is_no_switch_is_one_line(tmp_path, textcls_dir, tiny_model, capsys, monkeypatch):
    monkeypatch.setenv("KINJECT_PROBE", "maybe")
    line = one_line_error(capsys, ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set",
                                   f"task.path={textcls_dir}", "--cache-dir", str(tmp_path / "cache"), "--dry-run"])
    assert line == "error: KINJECT_PROBE='maybe': expected 0/false/no/off or 1/true/yes/on"


# -- a grid file is bounded before it is parsed ------------------------------------------------------------------- #
def test_a_grid_file_too_large_for_its_cap_is_refused_before_parsing(tmp_path):
    from kinject.api import SpecError
    from kinject.experiments.grid import GRID_FILE_BYTES, load_grid

    path = tmp_path / "grid.yaml"
    with open(path, "w") as handle:  # 6 M seeds, 47 MB: parsed in full it took minutes
        handle.write("strategies: [finetune]\ntasks: [textcls]\nseeds: [")
        handle.write(", ".join(str(seed) for seed in range(6_000_000)))
        handle.write("]\n")
    started = time.perf_counter()
    with pytest.raises(SpecError) as refused:
        load_grid(path)
    assert time.perf_counter() - started < 5
    assert str(refused.value).startswith(f"{path}: {path.stat().st_size:,} bytes, more than the {GRID_FILE_BYTES:,}")
    path.write_text("strategies: [finetune]\ntasks: [textcls]\nseeds: {start: 0, count: 20000}\n")
    with pytest.raises(SpecError, match="1 to 10,000 seeds"):
        load_grid(path)  # a small file naming too many cells is the cap's one line, as before
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="a FIFO, not a regular file"):
        load_grid(fifo)


# -- transformers, resolved once per process -------------------------------------------------------------------- #
def test_every_name_kinject_imports_from_transformers_is_resolved_when_a_run_starts():
    from kinject.preparation import TRANSFORMERS_NAMES

    used = set()
    for folder in ("core", "plugins", "tasks"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "transformers" and not node.level:
                    used |= {alias.name for alias in node.names}
    assert used and used <= set(TRANSFORMERS_NAMES), sorted(used - set(TRANSFORMERS_NAMES))


def test_the_run_folder_reader_is_one_line_per_damaged_file(tmp_path):
    from kinject.api import DataError, read_run

    (tmp_path / "run.json").write_text(json.dumps({"spec": {"task": {"name": "x"}}, "seed": 3, "stages": []}))
    assert read_run(tmp_path) == ({"spec": {"task": {"name": "x"}}, "seed": 3, "stages": []}, {})
    (tmp_path / "run.json").write_text(json.dumps({"stages": [{"name": 3}]}))
    with pytest.raises(DataError, match=r"run.json: stages.0.name: input should be a valid string \(found 3\)"):
        read_run(tmp_path)
    (tmp_path / "run.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(DataError, match="not UTF-8 text"):
        read_run(tmp_path)
