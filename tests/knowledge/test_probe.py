"""The knowledge probe every run gets (kinject.knowledge.probe, added by the knowledge library's hook): in
every built-in strategy's plan, keyed without tools, one cached base-model stage shared by strategies, switched off by
``hooks.knowledge-probe.enabled=false``, and shown by `kinject compare` / `kinject report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import fake_distribution
from helpers import run_kinject as kinject
from helpers import TOOLS, plans

STRATEGIES = ("finetune", "kimera", "mop", "doktra", "stilt", "pretrain")
SMALL = ["--set", "training.epochs=1", "--set", "training.batch_size=8"]


@pytest.fixture(scope="module")
def every_stage(tmp_path_factory, tiny_model):
    from conftest import write_textcls

    tmp = tmp_path_factory.mktemp("probe-plans")
    return plans(tmp, write_textcls(tmp / "textcls"))


def test_every_built_in_strategy_gets_the_probe_after_its_last_evaluate_stage(every_stage):
    from kinject.training import EvaluateConfig

    for name in STRATEGIES:
        stages = [key.split("/", 1)[1] for key in every_stage if key.startswith(f"{name}/")]
        assert stages[-2:] == ["probe-base", "probe"], name
        probe = every_stage[f"{name}/probe"].stage
        evaluates = [every_stage[f"{name}/{s}"].stage for s in stages
                     if isinstance(every_stage[f"{name}/{s}"].stage.config, EvaluateConfig)]
        assert probe.config.evaluate == evaluates[-1].config  # the model the run's last evaluate stage scores
        assert probe.inputs == (evaluates[-1].config.model_stage, "probe-base"), name
        assert probe.artifacts == ("probe.json", "probe-predictions.jsonl")
    # MoP's fused model is loaded by its own evaluate config
    assert type(every_stage["mop/probe"].stage.config.evaluate).__name__ == "FusedEvaluateConfig"
    assert "kinject.plugins.mop.fusion" in every_stage["mop/probe"].code_modules


def test_the_probe_is_keyed_without_tools_and_the_base_stage_by_the_base_model_only(every_stage):
    # one cached base stage per probed graph: the strategies that inject kg.tsv are probed on it, the others on the
    # HPO is-a graph (the probe follows the knowledge)
    base_keys = {name: every_stage[f"{name}/probe-base"].key for name in STRATEGIES}
    assert base_keys["kimera"] == base_keys["mop"] != base_keys["finetune"]
    assert len({base_keys[n] for n in ("finetune", "doktra", "stilt", "pretrain")}) == 1
    assert every_stage["kimera/probe"].stage.config.probe.source.name == "triples"
    assert every_stage["finetune/probe"].stage.config.probe.source.options["include"] == ["isa"]
    base = every_stage["finetune/probe-base"].record
    assert set(base["config"]) == {"model", "probe"} and base["inputs"] == {}
    for name in STRATEGIES:
        for stage in ("probe-base", "probe"):
            code = every_stage[f"{name}/{stage}"].code_modules
            assert not [m for m in code if any(t in m for t in TOOLS)], (name, stage)
            assert "kinject.knowledge.probe" in code
            hpo = every_stage[f"{name}/{stage}"].stage.config.probe.source.name == "hpo"
            assert ("kinject.knowledge.sources.hpo" in code) == hpo  # the graph asked about is keyed
            assert "kinject.knowledge.probe_hook" not in code  # where the stages are planned: no part of them


def test_knowledge_probe_false_leaves_it_out_and_a_run_without_evaluation_gets_none(tmp_path, textcls_dir,
                                                                                     tiny_model):
    from kinject.api import build_spec, prepare

    spec = {"model": {"name": "tiny", "max_length": 32}, "task": {"name": "textcls", "path": str(textcls_dir)},
            "cache_dir": str(tmp_path / "cache")}
    assert [s.name for s in prepare(build_spec(spec)).stages] == ["finetune", "evaluate", "probe-base", "probe"]
    off = prepare(build_spec({**spec, "hooks": {"knowledge-probe": {"enabled": False}}}))
    assert [s.name for s in off.stages] == ["finetune", "evaluate"]
    kg = tmp_path / "kg.tsv"
    kg.write_text("gene\tcauses\tdisease\ndrug\ttreatment\tcancer\ncell\tcauses\tcancer\n")
    search = prepare(build_spec({**spec, "strategy": {"name": "kimera", "until": "mask"},
                                 "sources": [{"name": "triples", "path": str(kg)}]}))
    assert "probe" not in [s.name for s in search.stages]  # no evaluate stage: nothing to probe


def test_a_third_party_strategy_gets_the_probe_on_its_own_model_stage(tmp_path, textcls_dir, tiny_model,
                                                                      monkeypatch):
    root = fake_distribution(tmp_path / "site", "kinject-probed", """
        [kinject.strategies]
        mine = probed_strategy:Mine
        """, {"probed_strategy": '''
            """A third party's method: its own fine-tune and evaluate stage names."""
            from kinject.api import Strategy
            from kinject.training import evaluate_stage, finetune_stage

            class Mine(Strategy):
                """Mine."""

                def stages(self, run):
                    return [finetune_stage(run, "mine-finetune"), evaluate_stage(run, "mine-finetune", name="mine-eval")]
            '''})
    monkeypatch.syspath_prepend(str(root))
    from kinject.api import build_spec, prepare, registry

    registry("strategies").refresh()
    try:
        run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "mine"},
                                  "task": {"name": "textcls", "path": str(textcls_dir)},
                                  "cache_dir": str(tmp_path / "cache")}))
    finally:
        registry("strategies").refresh()
    probe = run.stages[-1]
    assert probe.name == "probe" and probe.inputs == ("mine-finetune", "probe-base")


@pytest.fixture(scope="module")
def probed_runs(tmp_path_factory, tiny_model):
    """finetune and STILT on textcls (tiny model, one cache): two strategies, one base model."""
    from conftest import write_textcls

    tmp = tmp_path_factory.mktemp("probed")
    data = write_textcls(tmp / "textcls")
    common = ["--task", "textcls", "--model", "tiny", "--set", f"task.path={data}", "--set", "model.max_length=32",
              *SMALL, "--cache-dir", str(tmp / "cache")]
    assert kinject("run", "finetune", *common, "-o", str(tmp / "finetune")) == 0
    assert kinject("run", "stilt", *common, "--set", f"strategy.intermediate=[{{name: textcls, path: {data}}}]",
                   "-o", str(tmp / "stilt")) == 0
    return tmp


def _stages(run: Path) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads((run / "run.json").read_text())["stages"]}


@pytest.mark.slow
def test_runs_write_the_probe_and_share_the_base_model_s_score(probed_runs):
    first, second = (json.loads((probed_runs / name / "probe.json").read_text()) for name in ("finetune", "stilt"))
    for probe in (first, second):
        assert probe["chance"] == 0.5 and set(probe["model"]) >= {"auroc", "accuracy"}
        for measure in ("auroc", "accuracy"):
            assert 0 <= probe["model"][measure] <= 1
            assert probe["gain"][measure] == pytest.approx(probe["model"][measure] - probe["base"][measure])
        assert probe["model"]["test_pairs"] == 400 and probe["model"]["train_pairs"] == 400
    assert first["base"] == second["base"]  # the base model's score, the same for both strategies ...
    a, b = _stages(probed_runs / "finetune"), _stages(probed_runs / "stilt")
    assert a["probe-base"]["key"] == b["probe-base"]["key"] and b["probe-base"]["cached"]  # ... from one stage
    assert a["probe"]["key"] != b["probe"]["key"]
    metrics = json.loads((probed_runs / "finetune" / "metrics.json").read_text())
    assert "test" in metrics  # the task's metrics stay the run's


@pytest.mark.slow
def test_compare_and_report_show_each_run_s_probe(probed_runs, tmp_path, capsys):
    runs = [str(probed_runs / "finetune"), str(probed_runs / "stilt")]
    capsys.readouterr()
    assert kinject("compare", *runs, "--json") == 0
    rows = json.loads(capsys.readouterr().out)["metrics"][0]["rows"]
    probes = [json.loads((Path(r) / "probe.json").read_text()) for r in runs]
    for row, probe in zip(rows, probes):
        assert row["probe"]["model"] == pytest.approx(probe["model"]["auroc"])
        assert row["probe"]["base"] == pytest.approx(probe["base"]["auroc"]) and row["probe"]["chance"] == 0.5
    assert kinject("compare", *runs) == 0
    assert "probe AUROC (base; gain)" in capsys.readouterr().out
    assert kinject("report", *runs, "-o", str(tmp_path / "report")) == 0
    page = (tmp_path / "report" / "report.md").read_text()
    assert "probe AUROC, base model" in page and f"{probes[0]['model']['auroc']:.4f}" in page


def test_the_probe_is_a_section_of_the_run_s_metrics(probed_runs):
    probe = json.loads((probed_runs / "finetune" / "probe.json").read_text())
    section = json.loads((probed_runs / "finetune" / "metrics.json").read_text())["probe"]
    assert section["auroc"] == probe["model"]["auroc"] and section["base_auroc"] == probe["base"]["auroc"]
    assert section["gain_auroc"] == pytest.approx(probe["model"]["auroc"] - probe["base"]["auroc"])
    assert section["chance"] == 0.5


@pytest.mark.slow
def test_the_probe_gain_interval_is_sklearn_s_auroc_on_every_resample():
    """The vectorised bootstrap (all replicates at once, ties counted half) gives what roc_auc_score gives on each
    replicate's examples, so the interval is the one the per-replicate loop gave, in a fraction of the time."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from kinject.knowledge.probe import RESAMPLES, gain_interval
    from kinject.tasks import weighted_auroc

    rng = np.random.default_rng(3)
    rows = [{"label": "yes" if i % 2 == 0 else "no", "group": f"h{i // 2}"} for i in range(60)]
    y = np.array([r["label"] == "yes" for r in rows])
    model, base = np.round(rng.random(60), 1) + 0.2 * y, np.round(rng.random(60), 1)  # ties on purpose
    draws = np.random.default_rng(0).integers(0, 30, (RESAMPLES, 30))
    names = sorted({r["group"] for r in rows})  # a draw names the g-th group in sorted order, as the loop did
    expected = []
    for row in draws:
        take = np.concatenate([[2 * int(names[g][1:]), 2 * int(names[g][1:]) + 1] for g in row])
        expected.append(roc_auc_score(y[take], model[take]) - roc_auc_score(y[take], base[take]))
    low, high = gain_interval({"test": rows}, model.tolist(), base.tolist())
    assert np.allclose([low, high], np.quantile(expected, [0.025, 0.975]), atol=1e-12)
    assert low < high
    counts = np.bincount(rng.integers(0, 60, 60), minlength=60)
    assert weighted_auroc(model, y, counts[None])[0] == pytest.approx(roc_auc_score(np.repeat(y, counts),
                                                                                    np.repeat(model, counts)))


@pytest.mark.parametrize("protocol, pairs, expected", [("quick", None, 100), ("quick", 40, 40), (None, None, 400)])
def test_a_quick_try_probes_a_quarter_of_the_pairs_and_says_so(tmp_path, tiny_model, protocol, pairs, expected):
    from conftest import write_textcls
    from kinject.api import build_spec, plan, prepare

    spec = {"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "finetune"},
            "task": {"name": "textcls", "path": str(write_textcls(tmp_path / "textcls"))},
            "cache_dir": str(tmp_path / "cache"), **({"protocol": protocol} if protocol else {}),
            **({"hooks": {"knowledge-probe": {"pairs": pairs}}} if pairs else {})}
    run = prepare(build_spec(spec))
    probe = {p.stage.name: p.stage for p in plan(run)}["probe"].config.probe
    assert (probe.train_pairs, probe.test_pairs) == (expected, expected)
    decided = "hooks.knowledge-probe.pairs" in run.defaults  # announced (and recorded) only where kinject chose it
    assert decided == (protocol == "quick" and pairs is None) and ("probe" in run.decided_by) == decided
