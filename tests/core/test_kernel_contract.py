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
    closure = set(every_stage["finetune/finetune"].record["code"])
    kernel = {m for m in closure if not m.startswith("kinject.tasks")}
    # the shared fine-tune body and what it computes with (the training library: the stage, task models, the
    # Trainer loop, dev selection, peft, model loading; the kernel's pooling and data readers) ...
    assert kernel == {"kinject.plugins.training.stages", "kinject.plugins.training.task_models",
                      "kinject.plugins.training.loop", "kinject.plugins.training.batching",
                      "kinject.plugins.training.prediction", "kinject.plugins.training.selection",
                      "kinject.plugins.training.peft_tuning", "kinject.plugins.training.models",
                      "kinject.plugins.training.records", "kinject.models", "kinject.io"}
    # ... and the task's own modules with its evaluators', nothing else
    assert closure - kernel == {"kinject.tasks.textcls", "kinject.tasks.sequence", "kinject.tasks.biencoder",
                                "kinject.tasks.evaluators", "kinject.tasks.evaluators.classification",
                                "kinject.tasks.readers", "kinject.tasks.pooling"}
    for name, planned in every_stage.items():
        if name.endswith(NOT_TRAINING):
            continue
        tools = [m for m in planned.record["code"] if any(t in m for t in TOOLS)]
        assert not tools, f"{name} is keyed by {tools}"


def _edited(monkeypatch, tmp_path: Path, module: str) -> None:
    """Make the fingerprint see ``module``'s source with one more line (the file itself is left alone)."""
    import kinject.fingerprint as fingerprint

    real = fingerprint._origin
    copy = tmp_path / "edited" / f"{module}.py"
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(real(module), copy)
    with open(copy, "a") as handle:
        handle.write("\n# an edit\n")
    monkeypatch.setattr(fingerprint, "_origin", lambda name: str(copy) if name == module else real(name))


@pytest.mark.parametrize("module", ["kinject.plugins.evidence.stats", "kinject.plugins.evidence.report",
                                    "kinject.plugins.kimera.report", "kinject.plugins.mop.report"])
def test_editing_statistics_or_a_plot_leaves_every_training_key(tmp_path, textcls_dir, tiny_model, monkeypatch,
                                                                 every_stage, module):
    _edited(monkeypatch, tmp_path, module)
    after = plans(tmp_path, textcls_dir)
    changed = [name for name, planned in every_stage.items()
               if not name.endswith(NOT_TRAINING) and after[name].key != planned.key]
    assert changed == []


def test_editing_the_training_body_changes_the_fine_tune_keys(tmp_path, textcls_dir, tiny_model, monkeypatch,
                                                              every_stage):
    _edited(monkeypatch, tmp_path, "kinject.plugins.training.loop")
    after = plans(tmp_path, textcls_dir)
    for name in ("finetune/finetune", "stilt/stilt-finetune", "mop/mop-finetune", "kimera/kimera-retrain"):
        assert after[name].key != every_stage[name].key, name


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
