"""The `kimera` strategy: config validation, the stage plan of every variant, one end-to-end tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import PROBE_STAGES

from kinject.errors import SpecError
from kinject.spec import PluginRef
from kinject.spec_reading import validate_plugin_config


def config(**options):
    from kinject.plugins.kimera.strategy import KimeraStrategy

    return validate_plugin_config(KimeraStrategy, PluginRef(name="kimera", **options), "strategy")


def test_variants_resolve_to_settings_and_bad_combinations_are_rejected():
    assert config().settings() == ("hard", False, False)
    assert config(variant="b+f").settings() == ("hard", True, False)
    assert config(variant="soft", forward_mask=True).settings() == ("soft", True, False)
    assert config(variant="from-scratch").settings() == ("none", False, True)
    with pytest.raises(SpecError, match="only apply to retraining variants"):
        config(variant="pruned", mask="soft")
    with pytest.raises(SpecError, match="forward_mask needs a mask"):
        config(variant="no-mask", forward_mask=True)
    with pytest.raises(SpecError, match="strategy.variant"):
        config(variant="hardmask")
    with pytest.raises(SpecError, match="strategy.tau"):
        config(tau=1.5)
    with pytest.raises(SpecError, match="every KG task is disabled"):
        config(alphas={"entity": 0, "relation": 0, "triplet": 0})


def prepared(tmp_path, textcls_dir, tiny_model, **strategy):
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    kg = tmp_path / "kg.tsv"
    kg.write_text("gene\tcauses\tdisease\ndrug\ttreatment\tcancer\ncell\tcauses\tcancer\n"
                  "protein\tassociated\tgene\ndose\teffect\tdrug\npatients\tassociated\tdisease\n")
    spec = build_spec({"model": {"name": "tiny", "max_length": 32},
                       "task": {"name": "textcls", "path": str(textcls_dir)},
                       "strategy": {"name": "kimera", **strategy}, "sources": [{"name": "triples", "path": str(kg)}],
                       "training": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3},
                       "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)})
    return prepare(spec)


@pytest.mark.parametrize("variant,names", [
    ("finetune", ["finetune", "evaluate"]),
    ("pruned", ["finetune", "evaluate", "kimera-mask-hard", "kimera-search-report", "kimera-pruned-encoder",
                "kimera-pruned-finetune", "kimera-pruned-evaluate", "kimera-compare"]),
    ("no-mask", ["finetune", "evaluate", "kimera-retrain", "kimera-finetune", "kimera-evaluate", "kimera-compare"]),
    ("soft", ["finetune", "evaluate", "kimera-mask-soft", "kimera-search-report", "kimera-retrain", "kimera-finetune",
              "kimera-evaluate", "kimera-report", "kimera-compare"]),
])
def test_stage_plan_per_variant(tmp_path, textcls_dir, tiny_model, variant, names):
    run = prepared(tmp_path, textcls_dir, tiny_model, variant=variant)
    assert [s.name for s in run.stages] == [*names, *PROBE_STAGES]  # the knowledge probe: every run


def test_mask_search_watches_the_task_selection_metric(tmp_path, textcls_dir, tiny_model):
    from kinject.tasks.capr import CaprTask

    assert CaprTask().selection_metric() == "mrr" and CaprTask().primary_metric() == "recall@1"
    run = prepared(tmp_path, textcls_dir, tiny_model, variant="hard")
    mask = next(s for s in run.stages if s.name == "kimera-mask-hard")
    assert mask.config.scoring.metric == run.task.primary_metric() == "accuracy"
    run = prepared(tmp_path, textcls_dir, tiny_model, variant="hard", search_metric="f1_macro")
    assert next(s for s in run.stages if s.name == "kimera-mask-hard").config.scoring.metric == "f1_macro"


def test_sampling_and_scoring_cap_reach_their_stages(tmp_path, textcls_dir, tiny_model):
    run = prepared(tmp_path, textcls_dir, tiny_model, variant="hard", task_sampling="uniform", score_examples=100)
    stages = {s.name: s for s in run.stages}
    assert stages["kimera-retrain"].config.task_sampling == "uniform"
    assert stages["kimera-mask-hard"].config.scoring.examples == 100
    assert stages["kimera-report"].config.scoring == stages["kimera-mask-hard"].config.scoring  # same set
    with pytest.raises(SpecError, match="strategy.task_sampling"):
        config(task_sampling="random")


def test_validate_resolves_the_kg_and_stages_name_their_inputs_in_their_configs(tmp_path, textcls_dir, tiny_model):
    from kinject.keys import plan
    from kinject.preparation import prepare
    from kinject.spec_reading import build_spec

    spec = build_spec({"model": {"name": "tiny", "max_length": 32},
                       "task": {"name": "textcls", "path": str(textcls_dir)},
                       "strategy": {"name": "kimera", "variant": "random", "kg_max_triples": 50},
                       "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)})
    run = prepare(spec)  # no source: the embedded HPO sample, resolved once by validate
    stages = {s.name: s for s in run.stages}
    assert run.resolved.source.name == "hpo" and run.resolved.masks is None
    assert stages["kimera-retrain"].config.source == run.resolved.source
    assert stages["kimera-mask-hard"].config.model_stage == "finetune"
    assert stages["kimera-mask-random"].config.mask_stage == "kimera-mask-hard"
    assert stages["kimera-retrain"].config.mask_stage == stages["kimera-report"].config.mask_stage == \
        "kimera-mask-random"
    assert stages["kimera-report"].config.model_stage == "kimera-finetune"
    for stage in run.stages:  # every stage a config names is an input of its stage
        named = {getattr(stage.config, f, None) for f in ("model_stage", "mask_stage")} - {None}
        assert named <= set(stage.inputs), stage.name
    # the search, the retraining and the random draw are keyed by what computes them: no statistics, plots or
    # planning; the rounds' bootstrap intervals are the search report's
    code = {p.stage.name: p.code_modules for p in plan(run)}
    tools = ("kinject.evidence", "kimera.report", "kimera.search_report", "kimera.strategy", "matplotlib")
    for name in ("kimera-mask-hard", "kimera-retrain", "kimera-mask-random"):
        assert not [m for m in code[name] if any(t in m for t in tools)], name
    assert not [m for name in ("kimera-retrain", "kimera-mask-random") for m in code[name] if "kimera.search" in m]
    assert stages["kimera-search-report"].inputs == ("kimera-mask-hard",)
    assert "kinject.evidence.comparison" in code["kimera-search-report"]


def test_the_retraining_reads_typed_kg_settings_and_a_misspelt_one_fails_when_the_stage_is_built(tmp_path,
                                                                                                  textcls_dir,
                                                                                                  tiny_model):
    from pydantic import ValidationError

    from kinject.fingerprint import keyed_dump
    from kinject.plugins.kimera.retrain import KGSettings, RetrainConfig

    run = prepared(tmp_path, textcls_dir, tiny_model, variant="no-mask", kg_steps=7, kg_batch_size=4, kg_heldout=2)
    config = next(s for s in run.stages if s.name == "kimera-retrain").config
    assert config.kg == KGSettings(steps=7, epochs=None, batch_size=4, token_budget=None, learning_rate=5e-5,
                                   max_length=64, max_triples=20000, heldout=2)
    assert keyed_dump(config)["kg"]["token_budget"] is None  # an unset budget is keyed like any other value
    data = config.model_dump()
    with pytest.raises(ValidationError, match=r"kg\.stepz\n  Extra inputs are not permitted"):
        RetrainConfig.model_validate({**data, "kg": {**data["kg"], "stepz": 7}})
    with pytest.raises(ValidationError, match=r"kg\.heldout\n  Field required"):
        RetrainConfig.model_validate({**data, "kg": {k: v for k, v in data["kg"].items() if k != "heldout"}})


def test_loading_the_strategy_imports_no_torch():
    """``kinject info`` loads every strategy: the stage bodies (and torch) are imported when a stage is built."""
    import subprocess
    import sys

    code = ("import sys, kinject.plugins.kimera.strategy; "
            "print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_finetune_variant_shares_its_cache_key_with_the_finetune_strategy(tmp_path, textcls_dir, tiny_model):
    from kinject.keys import plan
    from kinject.plugins.finetune.strategy import FinetuneStrategy

    run = prepared(tmp_path, textcls_dir, tiny_model, variant="hard")
    kimera_keys = {p.stage.name: p.key for p in plan(run)}
    run.strategy = FinetuneStrategy()
    run.stages = run.strategy.stages(run)
    plain = {p.stage.name: p.key for p in plan(run)}
    assert plain["finetune"] == kimera_keys["finetune"] and plain["evaluate"] == kimera_keys["evaluate"]


@pytest.mark.slow
def test_end_to_end_hard_mask_run_writes_masks_model_metrics_and_analysis(tmp_path, textcls_dir, tiny_model):
    import torch
    from transformers import AutoModel

    from kinject.engine import execute

    run = prepared(tmp_path, textcls_dir, tiny_model, variant="hard", kg_steps=4, kg_batch_size=4,
                   score_examples=16, rho=0.25, tau=0.5)
    metrics = execute(run, tmp_path / "run")
    assert set(metrics) >= {"dev", "test"} and 0.0 <= metrics["test"]["accuracy"] <= 1.0
    comparison = metrics["comparison"]  # the headline question: KIMERA vs the phase-1 baseline, paired
    assert comparison["metric"] == "accuracy" and comparison["n"] == 16
    assert comparison["ci_low"] <= comparison["difference"] <= comparison["ci_high"]
    assert comparison["difference"] == pytest.approx(comparison["other"] - comparison["baseline"])
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    dirs = {s["name"]: s["dir"] for s in info["stages"]}
    masks = json.loads((Path(dirs["kimera-mask-hard"]) / "masks.json").read_text())
    search = json.loads((Path(dirs["kimera-search-report"]) / "search.json").read_text())
    assert search["examples"] == 16 and all("ci_low" in r for r in search["rounds"][1:])
    assert json.loads((tmp_path / "run" / "search.json").read_text()) == search  # the report's, with intervals
    assert search["no_redundant_heads"] == (search["masked_heads"] == 0)
    retrained = json.loads((Path(dirs["kimera-retrain"]) / "retrain.json").read_text())
    assert retrained["mlm_head"] == "random"  # the tiny model ships no MLM head
    hard = torch.tensor(masks["hard"])
    assert hard.shape == (2, 4) and set(hard.unique().tolist()) <= {0.0, 1.0}
    analysis = json.loads((Path(dirs["kimera-report"]) / "analysis.json").read_text())
    assert analysis["table3"]["frozen"]["heads"] + analysis["table3"]["retrained"]["heads"] == 8
    for png in ("1-mask", "2-importance-before", "3-importance-after", "4-importance-per-layer"):
        assert (Path(dirs["kimera-report"]) / "plots" / f"{png}.png").stat().st_size > 1000
        assert (tmp_path / "run" / "plots" / f"{png}.png").exists()  # exported into the run directory
    assert json.loads((tmp_path / "run" / "analysis.json").read_text()) == analysis
    assert json.loads((tmp_path / "run" / "masks.json").read_text()) == masks
    # the retrained encoder: frozen heads equal the pre-trained model's, the model loads with AutoModel
    retrained = AutoModel.from_pretrained(Path(dirs["kimera-retrain"]) / "model")
    base = AutoModel.from_pretrained(tiny_model)
    for layer in range(2):
        for head in range(4):
            rows = slice(head * 8, head * 8 + 8)
            same = torch.equal(retrained.encoder.layer[layer].attention.self.query.weight[rows],
                               base.encoder.layer[layer].attention.self.query.weight[rows])
            assert same == bool(hard[layer, head] == 1)
