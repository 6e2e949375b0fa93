"""Every method ends the same way (issue #54): one paired comparison against the same-named baseline, ``finetune``,
under the arm's own name (its strategy's ``label``), printed as one line of one shape."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from kinject.cli.sections import show_comparison

LINE = re.compile(r"^(?P<other>\S+) vs (?P<baseline>\S+) on (?P<split>\w+) (?P<metric>\S+): ")
BASELINE = "finetune"  # the finetune strategy's label: the baseline every method is compared with


def _strategies() -> list[str]:
    from kinject.api import registry

    return registry("strategies").names()


def quick_run(name: str, tmp_path, tiny_model):
    """``kinject run <name> --task hpo-isa --model tiny --quick`` prepared (no stage runs)."""
    from kinject.api import build_spec
    from kinject.defaults import prepare_runs

    spec = build_spec({"strategy": {"name": name}, "task": {"name": "hpo-isa"}, "model": {"name": "tiny"},
                       "protocol": "quick", "training": {"limit": 64}, "choose": False,
                       "output": str(tmp_path / "run"), "data_dir": str(tmp_path / "empty")})
    return prepare_runs(spec, dry_run=True)[0]


@pytest.mark.parametrize("name", _strategies())
def test_every_strategy_compares_itself_with_finetune_under_its_own_name(name, tmp_path, tiny_model):
    from kinject.evidence.stage import compare_body

    run = quick_run(name, tmp_path, tiny_model)
    compares = [stage for stage in run.stages if stage.body is compare_body]
    label = type(run.strategy).label(run.strategy.config)
    if label == BASELINE:  # the baseline itself: nothing to compare with
        assert not compares, name
        return
    assert len(compares) == 1, f"{name}: {[s.name for s in compares]}"
    config = compares[0].config
    assert config.labels == (BASELINE, label), name
    evaluated = {stage.name for stage in run.stages}
    assert {config.baseline, config.other} <= evaluated, name


def comparison(**changes) -> dict:
    return {"other_name": "kimera/no-mask", "baseline_name": "finetune", "split": "test", "metric": "accuracy",
            "other": 0.61, "baseline": 0.58, "difference": 0.03, "confidence": 0.95, "ci_low": 0.01,
            "ci_high": 0.05, "n": 1000, "verdict": "better", "identical": False, **changes}


def printed(section: dict) -> list[str]:
    console = Console(record=True, width=400, color_system=None)
    show_comparison(console, section)
    return console.export_text().splitlines()


@pytest.mark.parametrize("section", [
    comparison(),
    comparison(difference={"mean": 0.03, "std": 0.01, "n": 2, "values": [0.02, 0.04]}),  # --repeats: over seeds
])
def test_one_seed_and_over_seeds_print_the_same_shape_naming_both_systems(section):
    lines = printed(section)
    found = LINE.match(lines[0])
    assert found, lines[0]
    assert (found["other"], found["baseline"], found["split"], found["metric"]) == \
        ("kimera/no-mask", "finetune", "test", "accuracy")
    assert re.search(r"difference \+?0\.0300", lines[0]), lines[0]


def test_the_summary_over_seeds_keeps_the_names_every_seed_compared():
    from kinject.evidence import summarize_seeds

    seed = {"comparison": {"other_name": "mop", "baseline_name": "finetune", "split": "test", "metric": "f1",
                           "difference": 0.1}}
    summary = summarize_seeds({42: seed, 43: {"comparison": {**seed["comparison"], "difference": 0.3}}})
    assert summary["comparison"]["other_name"] == "mop" and summary["comparison"]["difference"]["n"] == 2
    other = {"comparison": {**seed["comparison"], "other_name": "mop/names"}}
    assert "other_name" not in summarize_seeds({42: seed, 43: other})["comparison"]  # names differ: none kept


@pytest.mark.slow
def test_stilt_quick_ends_with_its_comparison_line(tmp_path, tiny_model, capsys):
    from helpers import run_kinject

    out = tmp_path / "run"
    assert run_kinject("run", "stilt", "--task", "hpo-isa", "--model", "tiny", "--quick", "--set",
                       f"data_dir={tmp_path / 'empty'}", "-o", str(out)) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("stilt/hpo-isa vs finetune on test "), lines
    assert json.loads((out / "run.json").read_text())["arm"] == "stilt/hpo-isa"  # run.json names the arm too
