"""CLI: user errors are one line with exit code 2, no traceback (unless --debug), nothing half-written."""

from __future__ import annotations

import json

import pytest

from helpers import assert_user_error, cli


def test_unknown_strategy_and_task_suggest(tmp_path):
    assert_user_error(cli("run", "fintune", "--task", "textcls", "-o", str(tmp_path / "o")),
                      "strategy.name", "Did you mean 'finetune'")
    assert_user_error(cli("run", "finetune", "--task", "txtcls", "-o", str(tmp_path / "o")),
                      "task.name", "'textcls'")
    assert not (tmp_path / "o").exists()


def test_bad_config_values_name_the_field(tmp_path, textcls_dir):
    result = cli("run", "finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}",
                 "--set", "training.batch_size=0", "-o", str(tmp_path / "o"))
    assert_user_error(result, "training.batch_size", "greater than or equal to 1")
    config = tmp_path / "run.yaml"
    config.write_text("task:\n  name: textcls\n  path: x\nmodel:\n  name: tiny\n  max_lenght: 64\n")
    assert_user_error(cli("run", "finetune", "--config", str(config), "-o", str(tmp_path / "o")),
                      "model.max_lenght: unknown field", "max_length")
    assert not (tmp_path / "o").exists()


def test_malformed_data_names_file_and_line_and_writes_nothing(tmp_path, textcls_dir, tiny_model):
    bad = textcls_dir / "dev.jsonl"
    lines = bad.read_text().splitlines()
    lines[2] = '{"text": "broken json'
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    result = cli("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                 "--set", "training.epochs=1", "-o", str(out))
    assert_user_error(result, f"{bad}:3", "invalid JSON")
    assert not out.exists() and not list(tmp_path.glob(".o*"))


@pytest.mark.slow
def test_unknown_label_and_missing_data(tmp_path, textcls_dir, tiny_model):
    dev = textcls_dir / "dev.jsonl"
    dev.write_text(dev.read_text() + json.dumps({"text": "x", "label": "nonsense"}) + "\n")
    result = cli("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                 "--set", "training.epochs=1", "-o", str(tmp_path / "o"))
    assert_user_error(result, "dev.jsonl:17", "unknown label 'nonsense'")
    result = cli("run", "finetune", "--task", "textcls", "--set", f"task.path={tmp_path / 'nowhere'}")
    assert_user_error(result, "no train.jsonl or train.tsv", "nowhere")


def test_debug_shows_traceback():
    result = cli("run", "fintune", "--task", "textcls", "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_info_and_doctor():
    info = cli("info", "textcls")
    assert info.returncode == 0 and "multi_label" in info.stdout and "label_separator" in info.stdout
    assert_user_error(cli("info", "textclz"), "Did you mean 'textcls'")
    relation = cli("info", "chemprot")  # a description with "[E1]..[/E1]" is text, not rich markup
    assert relation.returncode == 0 and "entity_style" in relation.stdout, relation.stderr
    command = cli("info", "eval")  # a command (no config): its description, read without importing it
    assert command.returncode == 0 and command.stdout.startswith("eval (command, kinject ") and "Evaluate a saved" \
        in command.stdout, command.stderr
    hook = cli("info", "runlog")
    assert hook.returncode == 0 and hook.stdout.startswith("runlog (hook plugin, kinject ") and "run log" in hook.stdout
    doctor = cli("doctor")
    assert doctor.returncode == 0
    for needle in ("transformers", "offline", "data dir", "finetune", "device"):
        assert needle in doctor.stdout


@pytest.mark.slow
def test_eval_command(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "run"
    run = cli("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
              "--set", "training.epochs=1", "-o", str(out))
    assert run.returncode == 0, run.stderr
    console, log = run.stdout + run.stderr, (out / "kinject.log").read_text()
    for detail in ("textcls dev: accuracy=", "textcls test: accuracy=", "run end: {", "step None:"):
        assert detail not in console and detail in log  # the metrics reach the console once: as the table
    rows = [line for line in console.splitlines() if "accuracy" in line and line.lstrip("│| ").startswith("test ")]
    assert len(rows) == 1, console  # the table's row (a warning line may name the metric too)
    result = cli("eval", str(out / "model"), "--task", "textcls", "--set", f"task.path={textcls_dir}",
                 "-o", str(tmp_path / "eval"))
    assert result.returncode == 0, result.stderr
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    trained = json.loads((out / "metrics.json").read_text())
    assert evaluated["test"] == pytest.approx(trained["test"])
    assert_user_error(cli("eval", str(tmp_path), "--task", "textcls"), "not a model directory")
