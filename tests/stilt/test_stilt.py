"""STILT: config validation, encoder carry-over, fresh heads, intermediate-stage reuse, the transfer matrix."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from helpers import PROBE_STAGES
from conftest import write_textcls

from kinject.errors import DataMissingError, SpecError, UnknownNameError

FAST = {"max_steps": 3, "learning_rate": 1e-3, "batch_size": 8, "logging_steps": 1}


def write_three_class(folder: Path, n_train: int = 24, n_eval: int = 9) -> Path:
    """A second task type for the head: three labels (the 2-label intermediate's head cannot fit)."""
    rng = random.Random(7)
    texts = {"gene": "gene expression in cells", "drug": "the drug dose and risk", "other": "a cat on the mat"}
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for i in range(n):
                label = list(texts)[i % 3]
                handle.write(json.dumps({"text": texts[label] + " " + rng.choice("abc"), "label": label}) + "\n")
    return folder


def spec_data(target: Path, intermediate: list, cache_dir: Path, tiny_model: str, **strategy) -> dict:
    """A STILT run's spec; without its own baseline unless ``baseline=True`` (these tests follow the chain)."""
    return {"model": {"name": tiny_model, "max_length": 32}, "task": {"name": "textcls", "path": str(target)},
            "strategy": {"name": "stilt", "intermediate": intermediate, "baseline": False, **strategy},
            "training": dict(FAST), "seed": 42, "cache_dir": str(cache_dir)}


def execute(data: dict, output: Path) -> dict:
    from kinject import engine, preparation
    from kinject.spec_reading import build_spec

    engine.execute(preparation.prepare(build_spec(data)), output)
    return json.loads((output / "run.json").read_text())


@pytest.fixture(scope="module")
def stilt_runs(tmp_path_factory, cache_dir, tiny_model):
    """A -> B, then A -> C (3 labels), with kinject.training.train spied on: each training's start weights."""
    import kinject.training.loop

    root = tmp_path_factory.mktemp("stilt")
    a, b = write_textcls(root / "a", n_train=24, n_eval=8, seed=0), write_textcls(root / "b", 24, 8, seed=1)
    c = write_three_class(root / "c")
    real_train, started = kinject.training.train, []

    def spy(model, *args, stage="train", **kwargs):
        started.append((stage, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        return real_train(model, *args, stage=stage, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(kinject.training.loop, "train", spy)
    try:
        inter = [{"name": "textcls", "path": str(a)}]
        first = execute(spec_data(b, inter, cache_dir, tiny_model), root / "run-b")
        trained_first = [stage for stage, _ in started]
        second = execute(spec_data(c, inter, cache_dir, tiny_model), root / "run-c")
    finally:
        patch.undo()
    return {"first": first, "second": second, "started": started, "trained_first": trained_first,
            "paths": (a, b, c), "root": root}


def test_config_accepts_names_and_mappings_and_names_bad_fields(tmp_path, tiny_model):
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    folder = write_textcls(tmp_path / "d", n_train=4, n_eval=2)

    def strategy(intermediate, **extra):
        data = {"task": {"name": "textcls", "path": str(folder)}, "model": {"name": "tiny"},
                "strategy": {"name": "stilt", "intermediate": intermediate, **extra},
                "cache_dir": str(tmp_path / "cache")}
        return prepare(build_spec(data))  # the intermediate tasks are resolved and checked before any stage

    chained = strategy([{"name": "textcls", "path": str(folder)}] * 2)
    assert [t.name for t in chained.resolved.tasks] == ["textcls", "textcls"]
    one = strategy([{"name": "textcls", "path": str(folder), "training": {"epochs": 1}}])
    assert str(one.resolved.tasks[0].config.path) == str(folder)
    assert one.strategy.config.intermediate[0].training.epochs == 1
    from kinject.plugins.stilt.strategy import StiltConfig

    assert [i.name for i in StiltConfig.model_validate({"intermediate": "textcls, ner"}).intermediate] == \
        ["textcls", "ner"]  # names, comma-separated
    with pytest.raises(UnknownNameError, match=r"strategy\.intermediate\.1\.name: .*Did you mean 'textcls'"):
        strategy(["textcls", "textcl"])
    with pytest.raises(SpecError, match=r"strategy\.intermediate\.0\.pth: unknown field"):
        strategy([{"name": "textcls", "pth": "x"}])
    with pytest.raises(SpecError, match=r"strategy\.intermediate\.0\.training\.epochs"):
        strategy([{"name": "textcls", "training": {"epochs": -1}}])
    with pytest.raises(SpecError, match=r"strategy\.intermediate: "):
        strategy([])


def test_missing_intermediate_data_fails_before_any_stage(tmp_path, cache_dir, tiny_model):
    from kinject import engine, preparation
    from kinject.spec_reading import build_spec

    target = write_textcls(tmp_path / "t", n_train=4, n_eval=2)
    data = spec_data(target, [{"name": "textcls", "path": str(tmp_path / "absent")}], cache_dir, tiny_model)
    with pytest.raises(DataMissingError, match=r"strategy\.intermediate\.0 \(textcls\): no train\.jsonl"):
        engine.execute(preparation.prepare(build_spec(data)), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_training_overrides_reach_only_the_intermediate_stage(tmp_path, tiny_model, cache_dir):
    from kinject import keys, preparation
    from kinject.spec_reading import build_spec

    folder = write_textcls(tmp_path / "e", n_train=4, n_eval=2)
    inter = [{"name": "textcls", "path": str(folder), "training": {"learning_rate": 0.5, "head_learning_rate": 0.25}}]
    run = preparation.prepare(build_spec(spec_data(folder, inter, cache_dir, tiny_model, baseline=True,
                                                   training={"epochs": 2})))
    stages = {p.stage.name: p.stage for p in keys.plan(run)}
    assert list(stages) == ["finetune", "evaluate", "stilt-intermediate-1-textcls", "stilt-finetune", "stilt-evaluate",
                            "stilt-compare", *PROBE_STAGES]
    assert stages["stilt-intermediate-1-textcls"].config.training.learning_rate == 0.5
    assert stages["finetune"].config.training.learning_rate != 0.5  # the baseline trains at the run's rate
    assert stages["stilt-intermediate-1-textcls"].config.training.head_learning_rate == 0.25  # its own head's rate
    assert stages["stilt-intermediate-1-textcls"].config.training.epochs == 2
    assert stages["stilt-finetune"].config.training.learning_rate == FAST["learning_rate"]
    assert stages["stilt-finetune"].config.training.head_learning_rate != 0.25
    assert stages["stilt-finetune"].inputs == ("stilt-intermediate-1-textcls",)


@pytest.mark.slow
def test_target_starts_from_the_intermediate_encoder_with_a_fresh_head(stilt_runs, tiny_model):
    import torch
    from safetensors.torch import load_file

    from kinject.interfaces import Head
    from kinject.training import build_task_model

    assert stilt_runs["trained_first"] == ["stilt-intermediate-1-textcls", "stilt-finetune"]
    first = {r["name"]: r for r in stilt_runs["first"]["stages"]}
    saved = load_file(str(Path(first["stilt-intermediate-1-textcls"]["dir"]) / "model" / "model.safetensors"))
    stage, start = stilt_runs["started"][1]
    assert stage == "stilt-finetune"
    encoder = [k for k in start if k.startswith("bert.")]
    assert encoder and all(torch.equal(start[k], saved[k]) for k in encoder)
    # ... and the intermediate stage really trained (else equality with the base model would be trivial)
    base = stilt_runs["started"][0][1]
    assert any(not torch.equal(base[k], saved[k]) for k in encoder)
    # the head is new: not the intermediate's trained head, but exactly a fresh seeded one
    assert start["classifier.weight"].shape == saved["classifier.weight"].shape
    assert not torch.equal(start["classifier.weight"], saved["classifier.weight"])
    fresh = build_task_model(tiny_model, Head("sequence", 2, labels=("bio", "other")), seed=42).state_dict()
    assert torch.equal(start["classifier.weight"], fresh["classifier.weight"])
    assert torch.equal(start["classifier.bias"], fresh["classifier.bias"])


@pytest.mark.slow
def test_second_target_reuses_the_cached_intermediate(stilt_runs):
    first = {r["name"]: r for r in stilt_runs["first"]["stages"]}
    second = {r["name"]: r for r in stilt_runs["second"]["stages"]}
    inter = "stilt-intermediate-1-textcls"
    assert first[inter]["cached"] is False and second[inter]["cached"] is True
    assert second[inter]["key"] == first[inter]["key"]
    target = "stilt-finetune"
    assert second[target]["cached"] is False and second[target]["key"] != first[target]["key"]
    retrained = [stage for stage, _ in stilt_runs["started"][len(stilt_runs["trained_first"]):]]
    assert retrained == ["stilt-finetune"]  # the 3-label target only
    _, start = stilt_runs["started"][-1]
    assert start["classifier.weight"].shape[0] == 3
    metrics = json.loads((stilt_runs["root"] / "run-c" / "metrics.json").read_text())
    assert set(metrics["test"]) >= {"accuracy", "f1_macro"}


@pytest.mark.slow
def test_matrix_writes_grid_and_resumes_only_missing_cells(stilt_runs, tmp_path, cache_dir, tiny_model):
    from typer.testing import CliRunner

    from kinject.plugins.stilt import matrix as mx
    from kinject.plugins.stilt.cli import app

    a, b, c = stilt_runs["paths"]
    d = write_textcls(tmp_path / "d", n_train=24, n_eval=8, seed=3)
    defines = [f"{label}={{name: textcls, path: {path}}}" for label, path in zip("abcd", (a, b, c, d))]
    args = ["matrix", "--targets", "b,c", "--intermediates", "a,d", "--seeds", "1", "--model", tiny_model,
            "--output", str(tmp_path / "mx"), "--cache-dir", str(cache_dir), "--set", "model.max_length=32"]
    args += [f"--set=training.{k}={v}" for k, v in FAST.items()]
    for item in defines:
        args += ["--define", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "mx"
    rows = list(csv.DictReader(open(out / "matrix.csv")))
    assert [(r["target"], r["intermediate"]) for r in rows] == [
        (t, i) for t in "bc" for i in ("baseline", "a", "d")]
    summary = json.loads((out / "matrix.json").read_text())
    for row in rows:
        cell = json.loads((out / "cells" / row["target"] / row["intermediate"] / "seed-42.json").read_text())
        stats = summary["rows"][row["target"]]["cells"][row["intermediate"]]
        assert float(row["mean"]) == pytest.approx(cell["value"]) == pytest.approx(stats["mean"])
        assert row["n"] == "1" and row["std"] == "" and stats["std"] == 0.0  # one seed: no spread (csv blank)
        baseline = summary["rows"][row["target"]]["cells"]["baseline"]["mean"]
        if row["intermediate"] == "baseline":
            assert row["delta"] == "" and stats["delta"] is None
        else:
            assert float(row["delta"]) == pytest.approx(cell["value"] - baseline)
    assert summary["rows"]["c"]["metric"] == "accuracy" and summary["rows"]["c"]["split"] == "test"
    assert (out / "matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the A intermediate stage was trained by the fixture: the matrix reused it
    a_run = json.loads((out / "runs" / "b" / "a" / "seed-42" / "run.json").read_text())
    assert a_run["stages"][0]["cached"] is True

    removed = out / "cells" / "c" / "d" / "seed-42.json"
    before = {p: p.stat().st_mtime_ns for p in (out / "cells").rglob("*.json") if p != removed}
    removed.unlink()
    targets = mx.parse_task_list("b,c", mx.parse_defines(defines), "--targets")
    inters = mx.parse_task_list("a,d", mx.parse_defines(defines), "--intermediates")
    sets = ["model.max_length=32", *[f"training.{k}={v}" for k, v in FAST.items()]]
    base = {"seed": 42, "model": {"name": tiny_model}, "cache_dir": str(cache_dir)}
    partial = mx.run_matrix(targets, inters, 1, base, sets, out, run_missing=False)  # summarise, run nothing
    assert partial.executed == [] and not removed.exists()
    assert partial.summary["rows"]["c"]["cells"]["d"] is None and partial.summary["rows"]["c"]["cells"]["a"]
    rerun = mx.run_matrix(targets, inters, 1, base, sets, out)
    assert [(cell.target.label, cell.column) for cell in rerun.executed] == [("c", "d")]
    assert len(rerun.skipped) == 5 and removed.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())

    # a cell of an earlier release, named by seed position, is still read when its spec matches
    legacy = out / "cells" / "b" / "a" / "seed-0.json"
    (out / "cells" / "b" / "a" / "seed-42.json").rename(legacy)
    assert mx.run_matrix(targets, inters, 1, base, sets, out).executed == []
    # more seeds grow the matrix: seed 43 gets its own cells and run dirs, seed 42's stay as they were
    kept = {p: p.stat().st_mtime_ns for p in out.rglob("*.json") if "seed-42" in str(p) or p == legacy}
    grown = mx.run_matrix(targets[:1], inters[:1], 1, {**base, "seed": 43}, sets, out)
    assert [(cell.target.label, cell.column) for cell in grown.executed] == [("b", "baseline"), ("b", "a")]
    assert json.loads((out / "cells" / "b" / "a" / "seed-43.json").read_text())["seed"] == 43
    assert json.loads((out / "runs" / "b" / "baseline" / "seed-43" / "run.json").read_text())["spec"]["seed"] == 43
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())
    cell = mx.Cell(targets[0], inters[0], 0)  # what --dry-run lists: the legacy record holds seed 42, not 44
    assert mx.is_done(cell, out, 42) and mx.is_done(cell, out, 43) and not mx.is_done(cell, out, 44)
    # --dry-run lists the seeds a real run would use, --set seed= included
    listing = CliRunner().invoke(app, [*args, "--targets", "b", "--intermediates", "a", "--dry-run",
                                       "--set", "seed=43", "--seeds", "2"])
    assert listing.exit_code == 0, listing.output
    lines = [" ".join(line.split()) for line in listing.output.splitlines()]
    assert "b <- a seed 43 done" in lines and "b <- a seed 44 to run" in lines
    assert not any("seed 42" in line for line in lines)


def test_matrix_rejects_unknown_tasks_before_running(tmp_path, tiny_model):
    from kinject.plugins.stilt import matrix as mx

    folder = write_textcls(tmp_path / "t", n_train=4, n_eval=2)
    defines = mx.parse_defines([f"t={{name: textcls, path: {folder}}}"])
    with pytest.raises(UnknownNameError, match="chemprt.*Did you mean 'chemprot'"):
        mx.run_matrix(mx.parse_task_list("t", defines, "--targets"), mx.parse_task_list("chemprt", defines, "x"),
                      1, {"model": {"name": tiny_model}}, [], tmp_path / "mx")
    assert not (tmp_path / "mx").exists()
    with pytest.raises(SpecError, match="--define"):
        mx.parse_defines(["t=notamapping"])


def test_cli_module_is_light_at_import():
    import subprocess
    import sys

    code = ("import sys, kinject.plugins.stilt.cli as c; assert c.app is not None; "
            "print(sorted(m for m in ('torch', 'transformers', 'kinject.engine', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_token_level_intermediate_keeps_the_base_pooler_for_a_sequence_target(tmp_path, cache_dir, tiny_model):
    """NER has no pooler: without carrying it, the target would start from a random pooler, the baseline from
    the pre-trained one."""
    import torch
    from transformers import AutoModel

    import kinject.training.loop

    ner = tmp_path / "data" / "ncbi_disease"
    ner.mkdir(parents=True)
    sentence = "Familial\tO\nadenomatous\tB-Disease\npolyposis\tI-Disease\nis\tO\na\tO\ncancer\tB-Disease\n.\tO\n"
    for name in ("train.tsv", "devel.tsv", "test.tsv"):
        (ner / name).write_text((sentence + "\n") * 8)
    target = write_textcls(tmp_path / "target", n_train=16, n_eval=4)
    real_train, started = kinject.training.train, {}

    def spy(model, *args, stage="train", **kwargs):
        started[stage] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return real_train(model, *args, stage=stage, **kwargs)

    data = spec_data(target, ["ncbi-disease"], cache_dir, tiny_model)
    data["data_dir"] = str(tmp_path / "data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kinject.training.loop, "train", spy)
        run = execute(data, tmp_path / "run")
    assert list(started) == ["stilt-intermediate-1-ncbi-disease", "stilt-finetune"]
    assert not any("pooler" in k for k in started["stilt-intermediate-1-ncbi-disease"])  # the token model has none
    base = AutoModel.from_pretrained(tiny_model).pooler.dense
    start = started["stilt-finetune"]
    assert torch.equal(start["bert.pooler.dense.weight"], base.weight)
    assert torch.equal(start["bert.pooler.dense.bias"], base.bias)
    # ... while the encoder the target starts from is the intermediate's (trained), not the base model's
    assert not torch.equal(start["bert.encoder.layer.0.attention.self.query.weight"],
                           AutoModel.from_pretrained(tiny_model).encoder.layer[0].attention.self.query.weight)
    # the intermediate model on disk carries the pooler, so plain AutoModel.from_pretrained loads it as well
    inter = Path(next(s["dir"] for s in run["stages"] if s["name"] == "stilt-intermediate-1-ncbi-disease")) / "model"
    torch.testing.assert_close(AutoModel.from_pretrained(inter).pooler.dense.weight, base.weight, rtol=0, atol=0)
