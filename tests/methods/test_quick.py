"""Every registered strategy starts from `--quick` on a task it supports, on a fresh machine's footing: the tiny model,
no data dir, no extra setting (issue #35: a new user's first hour has no dead end)."""

from __future__ import annotations

import json

import pytest

from helpers import run_kinject as kinject

pytestmark = pytest.mark.slow


def _strategies() -> list[str]:
    from kinject.api import registry

    return registry("strategies").names()


@pytest.mark.parametrize("name", _strategies())
def test_every_strategy_starts_from_quick_with_no_other_setting(name, tmp_path, tiny_model):
    out = tmp_path / "run"
    assert kinject("run", name, "--task", "hpo-isa", "--model", "tiny", "--quick", "--set",
                   f"data_dir={tmp_path / 'empty'}", "-o", str(out)) == 0, name
    metrics = json.loads((out / "metrics.json").read_text())
    assert "test" in metrics or "comparison" in metrics, name


def test_a_strategy_on_a_task_shape_it_does_not_support_says_what_it_supports(capsys, tiny_model, data_dir):
    from helpers import one_line_error

    line = one_line_error(capsys, ["run", "doktra", "--task", "ncbi-disease", "--model", "tiny", "--quick",
                                   "--set", f"data_dir={data_dir}"])
    assert "supports sequence classification" in line and "token tagging" in line


def test_missing_required_choices_print_the_setting_to_add(capsys, tiny_model, tmp_path):
    from helpers import one_line_error

    line = one_line_error(capsys, ["run", "stilt", "--task", "hpo-isa", "--model", "tiny"])
    assert "--set strategy.intermediate=hpo-isa" in line
    line = one_line_error(capsys, ["run", "doktra", "--task", "hpo-isa", "--model", "tiny"])
    assert "--set strategy.teacher=minilm" in line


def test_pretrain_without_a_corpus_or_data_falls_back_to_the_tasks_own_text(tmp_path, tiny_model, caplog):
    data = tmp_path / "own"
    data.mkdir()
    for split, n in (("train", 60), ("dev", 8), ("test", 8)):
        rows = [{"text": f"the {split} sentence number {i} is about gene {i * 7} and protein {i * 3}",
                 "label": "bio" if i % 2 else "other"} for i in range(n)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    assert kinject("run", "pretrain", "--task", "textcls", "--set", f"task.path={data}", "--model", "tiny",
                   "--quick", "--set", f"data_dir={tmp_path / 'empty'}", "-o", str(out)) == 0
    assert "task-adaptive pretraining" in caplog.text
    corpus = json.loads((out / "corpus.json").read_text())
    assert corpus["train_texts"] > 0


def test_quick_keeps_the_last_weights_unless_the_user_sets_the_selection(tmp_path, tiny_model):
    """A quick try's epochs are a few steps each: dev selection would score dev after every one of them."""
    from kinject.api import build_spec, prepare_runs

    def selection(**training) -> tuple[str, set]:
        data = {"strategy": {"name": "kimera"}, "task": {"name": "hpo-isa"}, "model": {"name": "tiny"},
                "protocol": "quick", "training": {"limit": 64, **training}, "cache_dir": str(tmp_path / "c"),
                "data_dir": str(tmp_path / "empty")}
        run, = prepare_runs(build_spec(data), dry_run=True, announce=lambda line: None)
        return run.spec.training.selection, run.spec.training.model_fields_set

    chosen, set_fields = selection()
    assert chosen == "last" and "selection" in set_fields  # the protocol's, counted as set (recorded in run.json)
    assert selection(selection="best")[0] == "best"


def test_quick_context_adds_a_third_of_the_words_unless_the_user_sets_them(tmp_path, tiny_model):
    """Context's inputs carry up to 96 words of facts: a quick try on CAPR took 213 s on a 2-core AVX2 CPU."""
    from kinject.api import build_spec, prepare_runs

    def words(**strategy) -> int:
        data = {"strategy": {"name": "context", **strategy}, "task": {"name": "hpo-isa"}, "model": {"name": "tiny"},
                "protocol": "quick", "training": {"limit": 64}, "cache_dir": str(tmp_path / "c"),
                "data_dir": str(tmp_path / "empty")}
        run, = prepare_runs(build_spec(data), dry_run=True, announce=lambda line: None)
        return run.spec.strategy.max_words

    assert words() == 32
    assert words(max_words=64) == 64
