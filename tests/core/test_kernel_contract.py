"""The kernel's contract with plugins: narrow cache keys, one registry for every kind, one metric-name contract,
plugin errors as one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import TOOLS, fake_distribution, plans
from helpers import run_kinject as kinject

NOT_TRAINING = ("-compare", "-report")  # tools


@pytest.fixture
def every_stage(tmp_path, textcls_dir, tiny_model):
    return plans(tmp_path, textcls_dir)


def test_training_keys_cover_the_code_that_computes_and_no_tool(every_stage):
    planned = every_stage["finetune/finetune"]
    names, modules = set(planned.record["code"]), planned.code_modules
    # the definitions the fine-tune body runs, by name: the body, its config, the loop, the task model, the task
    assert {"finetune_body", "FinetuneConfig", "train", "build_task_model", "TextClassificationTask",
            "Accuracy"} <= names
    # found in the libraries it computes with, never in the kernel (kinject.<module>: the contract) or a tool
    assert {"kinject.training.stages", "kinject.training.loop", "kinject.training.task_models",
            "kinject.tasks.textcls"} <= set(modules)
    assert all(m.split(".")[1] in ("training", "tasks", "models") for m in modules), sorted(modules)
    assert "kinject.training.cost" not in modules  # the library declares it unkeyed (--dry-run's FLOPs)
    for name, stage in every_stage.items():
        if name.endswith(NOT_TRAINING):
            continue
        tools = [m for m in stage.code_modules if any(t in m for t in TOOLS)]
        assert not tools, f"{name} is keyed by {tools}"


def _edited(monkeypatch, tmp_path: Path, edits: dict[str, str]) -> None:
    """Make the fingerprint see each module of ``edits`` with that text instead (the files themselves are left
    alone)."""
    import kinject.fingerprint as fingerprint

    real = fingerprint._origin
    copies = {}
    for module, text in edits.items():
        copy = tmp_path / "edited" / f"{module}.py"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
        copies[module] = str(copy)
    monkeypatch.setattr(fingerprint, "_origin", lambda name: copies.get(name) or real(name))


def _source(module: str) -> str:
    import kinject.fingerprint as fingerprint

    return Path(fingerprint._origin(module)).read_text()


def _redefined(module: str, name: str) -> dict[str, str]:
    """``module`` with its definition ``name`` changed (a line bound to the same name appended)."""
    return {module: _source(module) + f"\n{name} = {name}  # an edit\n"}


@pytest.mark.parametrize("module, name", [("kinject.evidence.stats", "seed_tests"),
                                          ("kinject.evidence.report", "build_report"),
                                          ("kinject.plugins.kimera.report", "report_body"),
                                          ("kinject.plugins.mop.report", "report_body")])
def test_editing_statistics_or_a_plot_leaves_every_training_key(tmp_path, textcls_dir, tiny_model, monkeypatch,
                                                                 every_stage, module, name):
    _edited(monkeypatch, tmp_path, _redefined(module, name))
    after = plans(tmp_path, textcls_dir)
    changed = [stage for stage, planned in every_stage.items()
               if not stage.endswith(NOT_TRAINING) and after[stage].key != planned.key]
    assert changed == []


def test_editing_the_training_loop_changes_the_keys_of_the_stages_that_train(tmp_path, textcls_dir, tiny_model,
                                                                             monkeypatch, every_stage):
    loop = _source("kinject.training.loop")
    _edited(monkeypatch, tmp_path, _redefined("kinject.training.loop", "train"))
    after = plans(tmp_path, textcls_dir)
    for name in ("finetune/finetune", "stilt/stilt-finetune", "mop/mop-finetune", "kimera/kimera-retrain"):
        assert after[name].key != every_stage[name].key, name
    assert after["finetune/evaluate"].key != every_stage["finetune/evaluate"].key  # its input's key changed
    # a comment, or code no stage names, re-runs nothing
    _edited(monkeypatch, tmp_path / "again", {"kinject.training.loop": loop + "\n# a note\ndef unused():\n    pass\n"})
    assert {n: p.key for n, p in plans(tmp_path, textcls_dir).items()} == {n: p.key for n, p in every_stage.items()}


def test_moving_a_definition_to_another_file_keeps_every_key(tmp_path, textcls_dir, tiny_model, monkeypatch,
                                                             every_stage):
    """`plain` (kinject.training.records) moved into kinject.training.stages, its front door pointing there: the
    compare stages that use it keep their keys; so does everything else."""
    records, stages = _source("kinject.training.records"), _source("kinject.training.stages")
    start = records.index("def plain(")
    moved = records[start:]
    door = _source("kinject.training").replace('    ".records": ("plain",),\n', "").replace(
        '".stages": ("EvaluateConfig",', '".stages": ("plain", "EvaluateConfig",')
    assert '"plain"' in door and '".records"' not in door
    _edited(monkeypatch, tmp_path, {"kinject.training.records": records[:start],
                                    "kinject.training.stages": stages + "\n\n" + moved,
                                    "kinject.training": door})
    after = plans(tmp_path, textcls_dir)
    assert "kinject.training.stages" in after["kimera/kimera-compare"].code_modules
    assert "plain" in after["kimera/kimera-compare"].code_modules["kinject.training.stages"]
    assert {n: p.key for n, p in after.items()} == {n: p.key for n, p in every_stage.items()}


# -- registry ------------------------------------------------------------------------------------------------ #
@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A third party's distribution: an evaluator, a command and a strategy whose validate needs a missing package."""
    root = fake_distribution(tmp_path / "site", "kinject-outside", """
        [kinject.evaluators]
        brier = outside_eval:Brier
        [kinject.commands]
        hello = outside_cmd:hello
        [kinject.strategies]
        needs_torch9 = outside_strategy:NeedsTorch9
        """, {
        "outside_eval": '''
            """A third party's evaluator."""
            from kinject.api import Evaluator, PluginConfig

            class Brier(Evaluator):
                """Mean squared distance between a 0/1 label and a 0/1 prediction."""

                class Config(PluginConfig):
                    positive: str = "bio"

                def metric_names(self):
                    return ["brier"]

                def compute(self, references, predictions, **kwargs):
                    p = self.config.positive
                    pairs = list(zip(references, predictions))
                    return {"brier": sum(((r == p) - (q == p)) ** 2 for r, q in pairs) / max(len(pairs), 1)}
            ''',
        "outside_cmd": '''
            """A third party's command."""
            import typer

            def hello(name: str = typer.Argument("world")):
                """Say hello."""
                print(f"hello {name}")
            ''',
        "outside_strategy": '''
            """A strategy whose validate imports a package that is not installed."""
            from kinject.api import Strategy

            class NeedsTorch9(Strategy):
                """Needs torch9."""

                def validate(self, run):
                    import torch9  # noqa: F401
            ''',
    })
    monkeypatch.syspath_prepend(str(root))
    from kinject.registry import GROUPS, registry

    for kind in GROUPS:
        registry(kind).refresh()
    yield root
    for kind in GROUPS:
        registry(kind).refresh()


def test_an_import_error_in_a_plugin_s_code_is_one_line(outside, tmp_path, textcls_dir, tiny_model, capsys):
    capsys.readouterr()
    code = kinject("run", "needs_torch9", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "-o", str(tmp_path / "run"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0]
    assert "strategy 'needs_torch9' from kinject-outside 1.2.3" in err[0] and "torch9" in err[0]


def test_a_command_plugin_is_a_command(outside, capsys):
    capsys.readouterr()
    assert kinject("hello", "kinject") == 0
    assert "hello kinject" in capsys.readouterr().out


@pytest.mark.slow
def test_a_third_party_evaluator_scores_runs_and_compare_recomputes_it(outside, tmp_path, textcls_dir, tiny_model,
                                                                       capsys):
    metrics = '[{name: brier}, {name: accuracy}]'
    for seed in ("1", "2"):
        assert kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                       "--set", f"task.metrics={metrics}", "--set", "training.epochs=1", "--seed", seed,
                       "-o", str(tmp_path / f"run-{seed}")) == 0
    reported = json.loads((tmp_path / "run-1" / "metrics.json").read_text())["test"]
    assert "brier" in reported
    capsys.readouterr()
    assert kinject("compare", str(tmp_path / "run-1"), str(tmp_path / "run-2"), "--metric", "brier", "--json") == 0
    rows = json.loads(capsys.readouterr().out)["metrics"][0]["rows"]
    assert rows[0]["value"] == pytest.approx(reported["brier"])  # recomputed from the predictions
