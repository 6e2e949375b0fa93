"""An estimate a user can plan by: ``--dry-run`` on a fresh cache gives a time for every stage (fixed costs + the
stage's FLOPs at the machine's measured speeds), computed stages record what the estimate learns from, and later
estimates are scaled only by earlier runs of the same stage of a similar size."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.common import write_kg
from helpers import run_kinject

STAGE_LINE = re.compile(r"^stage (\S+)\s+\w{12}\s+(.*)$")


def dry_run(capsys, *args: str) -> tuple[dict[str, str], str]:
    capsys.readouterr()
    assert run_kinject("run", *args, "--dry-run") == 0
    out = capsys.readouterr().out
    stages = {m.group(1): m.group(2) for m in map(STAGE_LINE.match, out.splitlines()) if m}
    total = next(line for line in out.splitlines() if line.startswith("estimated time:"))
    return stages, total


def test_a_fresh_cache_gets_a_time_for_every_stage(tmp_path, tiny_model, textcls_dir, capsys):
    kg = write_kg(tmp_path / "kg.tsv")
    fresh = tmp_path / "fresh-cache"
    stages, total = dry_run(capsys, "kimera", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model",
                            "tiny", "--set", "sources.0.name=triples", "--set", f"sources.0.path={kg}",
                            "--cache-dir", str(fresh))
    assert {"finetune", "evaluate", "kimera-retrain", "kimera-finetune", "kimera-evaluate"} <= set(stages)
    for name, state in stages.items():
        assert re.match(r"miss \(~\d+ (s|min|h)", state), (name, state)
    for name in ("finetune", "evaluate", "kimera-retrain"):  # stated arithmetic and the fixed part
        assert "TFLOP at" in stages[name] and " s fixed" in stages[name], stages[name]
    assert "reading knowledge" in stages["kimera-retrain"]  # its graph is read (parsed: nothing kept yet)
    assert "model alone" in total and "nan" not in total
    speed = json.loads((fresh / "machine-speed.json").read_text())
    assert {"scoring" in key for key in speed} == {True, False}  # a training and a scoring speed
    assert all(value["flops_per_s"] > 0 and "load_average" in value for value in speed.values())


@pytest.mark.slow
def test_stages_record_their_costs_and_later_estimates_learn_from_them(tmp_path, tiny_model, textcls_dir, capsys):
    cache = tmp_path / "cache"
    common = ("finetune", "--task", "textcls", "--set", f"task.path={textcls_dir}", "--model", "tiny", "--set",
              "training.epochs=1", "--set", "choose=false", "--cache-dir", str(cache))
    assert run_kinject("run", *common, "-o", str(tmp_path / "run")) == 0
    records = {p.parent.parent.name: json.loads(p.read_text()) for p in cache.glob("stages/*/*/stage.json")}
    assert records["finetune"]["flops"] > records["evaluate"]["flops"] > 0  # training: 3x a forward, more data
    assert records["finetune"]["fixed_s"] > 0 and records["evaluate"]["scoring_flops"] == records["evaluate"]["flops"]
    assert records["finetune"]["scoring_flops"] < records["finetune"]["flops"]  # dev scored, the rest trained
    stages, total = dry_run(capsys, *common, "--seed", "7")  # another seed: every stage misses
    assert "as 1 earlier run(s) of it here" in stages["finetune"]
    assert re.search(r"\d+ stage\(s\) scaled by their earlier runs of a similar size here \(actual / model "
                     r"[\d.]+\.\.[\d.]+, median [\d.]+\)", total), total


def test_finetune_arithmetic_scales_with_epochs(tmp_path, tiny_model, textcls_dir):
    from kinject.api import build_spec, prepare

    def flops(epochs: int) -> float:
        run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "finetune"},
                                  "task": {"name": "textcls", "path": str(textcls_dir)},
                                  "training": {"epochs": epochs, "selection": "last"},
                                  "cache_dir": str(tmp_path / "cache")}))
        stage = next(s for s in run.stages if s.name == "finetune")
        return stage.config.cost(run)

    assert flops(4) == pytest.approx(2 * flops(2), rel=1e-6)


def past(cache, name: str, key: str, **record) -> None:
    folder = cache / "stages" / name / key
    folder.mkdir(parents=True)
    (folder / "stage.json").write_text(json.dumps(record))


def test_only_earlier_runs_of_the_same_stage_and_a_similar_size_scale_an_estimate(tmp_path, monkeypatch):
    """The x4.85 of #52: one small unrelated stage must not scale a large stage's estimate."""
    from kinject.cli import estimate

    monkeypatch.setattr(estimate.Estimator, "speed", lambda self, shape=None, scoring=False: 1e10)
    cache = tmp_path / "cache"
    past(cache, "finetune", "a" * 64, seconds=500.0, flops=1e11, scoring_flops=0.0, fixed_s=3.0)  # 100x smaller
    past(cache, "evaluate", "b" * 64, seconds=900.0, flops=1e13, scoring_flops=1e13, fixed_s=3.0)  # another stage
    estimator = estimate.Estimator(cache, bf16=False)
    alone = estimator("finetune", {"flops": 1e13, "scoring_flops": 0.0, "fixed_s": 3.0})
    assert alone.seconds == pytest.approx(estimate.STAGE_S + 3.0 + 1e13 / 1e10) and "earlier" not in alone.how
    past(cache, "finetune", "c" * 64, seconds=2 * (estimate.STAGE_S + 3.0 + 2e3), flops=2e13, scoring_flops=0.0,
         fixed_s=3.0)  # the same stage at twice the size, twice as slow as its model said
    scaled = estimate.Estimator(cache, bf16=False)("finetune", {"flops": 1e13, "scoring_flops": 0.0, "fixed_s": 3.0})
    assert scaled.seconds == pytest.approx(2 * alone.seconds) and "x2.00 as 1 earlier run(s)" in scaled.how


def test_fixed_costs_are_noted_by_the_cost_helpers(tmp_path, tiny_model, textcls_dir):
    from kinject.api import build_spec, prepare
    from kinject.stage_runner import stage_cost

    run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "finetune"},
                              "task": {"name": "textcls", "path": str(textcls_dir)},
                              "training": {"selection": "best"}, "cache_dir": str(tmp_path / "cache")}))
    cost = {s.name: stage_cost(s.config, run) for s in run.stages}
    assert cost["finetune"]["fixed_s"] > 0 and cost["evaluate"]["fixed_s"] > 0  # featurizing, loading the model
    assert 0 < cost["finetune"]["scoring_flops"] < cost["finetune"]["flops"]  # dev selection scores, training trains
    assert cost["evaluate"]["scoring_flops"] == cost["evaluate"]["flops"]
