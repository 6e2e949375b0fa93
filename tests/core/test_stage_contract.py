"""The declared-stage contract: keys hold every field a body reads and the code that implements it; every
user error surfaces in prepare, before any stage starts; --dry-run says why a stage misses."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import PROBE_STAGES

from helpers import run_kinject as kinject


def spec_for(data: Path, cache: Path, **training) -> dict:
    return {"task": {"name": "textcls", "path": str(data)}, "model": {"name": "tiny"},
            "training": {"epochs": 1, "batch_size": 8, **training}, "cache_dir": str(cache)}


def planned(spec: dict) -> dict:
    from kinject import keys, preparation
    from kinject.spec_reading import build_spec

    run = preparation.prepare(build_spec(spec))
    return {p.stage.name: p for p in keys.plan(run)}


def run_spec(spec: dict, out: Path) -> dict:
    from kinject import engine, preparation
    from kinject.spec_reading import build_spec

    engine.execute(preparation.prepare(build_spec(spec)), out)
    return {s["name"]: s for s in json.loads((out / "run.json").read_text())["stages"]}


@pytest.fixture
def finished(tmp_path, textcls_dir, tiny_model):
    cache = tmp_path / "cache"
    spec = spec_for(textcls_dir, cache)
    first = run_spec(spec, tmp_path / "first")
    assert not first["finetune"]["cached"]
    return spec, cache


def test_every_field_a_body_reads_is_in_its_key(finished, tmp_path):
    spec, _ = finished
    # fields each stage body reads: changing one re-runs that stage and what follows
    from kinject.defaults import native_bf16

    for path, value in (("training.learning_rate", 1e-3), ("training.warmup_ratio", 0.0),
                        ("training.bf16", not native_bf16()), ("model.max_length", 32), ("seed", 7)):
        changed = json.loads(json.dumps(spec))
        node = changed
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
        plan = planned(changed)
        assert not plan["finetune"].cached and not plan["evaluate"].cached, path
    # a task option changes the data, hence both stages
    changed = json.loads(json.dumps(spec))
    changed["task"]["label_field"] = "label"
    changed["training"]["limit"] = 10
    plan = planned(changed)
    assert not plan["finetune"].cached and not plan["evaluate"].cached
    # an unset bf16 is resolved before keys are made: the same keys as the machine's value written out
    explicit = json.loads(json.dumps(spec))
    explicit["training"]["bf16"] = native_bf16()
    assert all(p.cached for p in planned(explicit).values())
    # a field no output depends on is a hit
    quiet = json.loads(json.dumps(spec))
    quiet["training"].update(eval_batch_size=3, logging_steps=1, save_steps=2, eval_steps=None)
    assert all(p.cached for p in planned(quiet).values())


def test_editing_the_data_reruns(finished, textcls_dir):
    spec, _ = finished
    with open(textcls_dir / "train.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"text": "one more line", "label": "bio"}) + "\n")
    plan = planned(spec)
    assert not plan["finetune"].cached


def test_copied_or_touched_data_keeps_its_keys(finished, textcls_dir, tmp_path):
    """Data files are identified by their bytes: a restore that gives every file a new time (or a copy of the
    data dir elsewhere: names are relative to the data dir, which is not keyed) reuses the cache; a same-size
    edit does not."""
    import os
    import shutil

    from kinject.refs import files_fingerprint

    spec, _ = finished
    train = textcls_dir / "train.jsonl"
    os.utime(train, ns=(train.stat().st_atime_ns, train.stat().st_mtime_ns + 10**9))
    assert all(p.cached for p in planned(spec).values())
    copy = Path(shutil.copytree(textcls_dir, tmp_path / "elsewhere" / "textcls"))
    assert (files_fingerprint(sorted(copy.iterdir()), copy.parent)
            == files_fingerprint(sorted(textcls_dir.iterdir()), textcls_dir.parent))
    text = train.read_text(encoding="utf-8")
    swapped = text.replace('"bio"', '"xyz"', 1) if '"bio"' in text else text[::-1]
    assert len(swapped) == len(text) and swapped != text
    train.write_text(swapped, encoding="utf-8")
    os.utime(train, ns=(train.stat().st_atime_ns, train.stat().st_mtime_ns + 2 * 10**9))
    assert not planned(spec)["finetune"].cached


PROBE = '''
"""A third-party strategy whose stage body lives in this file."""
from kinject.interfaces import PluginConfig, Stage, Strategy
from kinject.training.stages import StageConfig


class ProbeConfig(StageConfig):
    text: str


def write_body(cfg, ctx):
    (ctx.out / "out.txt").write_text(cfg.text + " v1")


class ProbeStrategy(Strategy):
    """Writes a file."""

    class Config(PluginConfig):
        text: str = "hi"

    def stages(self, run):
        return [Stage(name="probe-write", body=write_body, config=ProbeConfig(text=self.config.text))]
'''


def test_editing_a_stage_s_code_reruns_it(tmp_path, textcls_dir, tiny_model, monkeypatch):
    from kinject.registry import registry

    pkg = tmp_path / "site"
    pkg.mkdir()
    module = pkg / "kinject_probe_strategy.py"
    module.write_text(textwrap.dedent(PROBE))
    monkeypatch.syspath_prepend(str(pkg))
    import kinject_probe_strategy

    registry("strategies").register("probe", kinject_probe_strategy.ProbeStrategy)
    spec = {**spec_for(textcls_dir, tmp_path / "cache"), "strategy": {"name": "probe"}}
    assert not run_spec(spec, tmp_path / "a")["probe-write"]["cached"]
    assert run_spec(spec, tmp_path / "b")["probe-write"]["cached"]
    module.write_text(module.read_text().replace('" v1"', '" v2"'))  # the body's code changes
    plan = planned(spec)["probe-write"]
    assert not plan.cached
    from kinject.cli.misses import explain_miss

    why = explain_miss(plan, tmp_path / "cache")
    assert "code changed: " in why and "(kinject_probe_strategy)" in why, why


def test_a_closure_is_not_a_stage_body(tmp_path, textcls_dir, tiny_model, capsys):
    from kinject.interfaces import Stage, Strategy
    from kinject.registry import registry
    from kinject.training.stages import StageConfig

    class Leaky(Strategy):
        """Reads the run from a closure."""

        def stages(self, run):
            def body(cfg, ctx):
                (ctx.out / "x").write_text(str(run.spec.training.learning_rate))

            return [Stage(name="leaky", body=body, config=StageConfig())]

    registry("strategies").register("leaky", Leaky)
    with pytest.raises(TypeError, match="module-level function"):
        planned({**spec_for(textcls_dir, tmp_path / "cache"), "strategy": {"name": "leaky"}})


def test_dry_run_says_which_field_changed(finished, tmp_path, textcls_dir, capsys):
    spec, cache = finished
    args = ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
            "--set", "training.epochs=1", "--set", "training.batch_size=8", "--cache-dir", str(cache)]
    capsys.readouterr()
    assert kinject(*args, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.count("cache hit") == 2 + len(PROBE_STAGES)
    assert kinject(*args, "--set", "training.learning_rate=0.001", "--dry-run") == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("stage finetune"))
    assert "miss" in line and "training.learning_rate" in line and "0.001" in line
    line = next(x for x in out.splitlines() if x.startswith("stage evaluate"))
    assert "input finetune changed" in line


@pytest.mark.parametrize("extra, message", [
    (["--set", 'sources=[{"name": "hpo"}]'], "sources.0: strategy 'finetune' does not use a triples source"),
    (["--set", "model.revision=abc123"], "model.revision"),
    (["--set", "training.eval_splits=[nope]"], "training.eval_splits: nope"),
])
def test_user_errors_fail_before_any_stage(tmp_path, textcls_dir, tiny_model, capsys, extra, message):
    cache = tmp_path / "cache"
    code = kinject("run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--cache-dir", str(cache), "-o", str(tmp_path / "out"), *extra)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (cache / "stages").exists() and not (tmp_path / "out").exists()


def test_kimera_misspelt_search_metric_fails_before_phase_one(tmp_path, textcls_dir, tiny_model, capsys):
    cache = tmp_path / "cache"
    code = kinject("run", "kimera", "--task", "textcls", "--model", "tiny", "--set", f"task.path={textcls_dir}",
                   "--set", "strategy.search_metric=acuracy", "--cache-dir", str(cache), "-o", str(tmp_path / "o"))
    assert code == 2
    err = capsys.readouterr().err
    assert "strategy.search_metric" in err and "accuracy" in err
    assert not (cache / "stages").exists()


def test_model_revision_reaches_from_pretrained(monkeypatch):
    import transformers

    from kinject.api import load_encoder

    seen = {}

    def fake(path, **kwargs):
        seen.update(kwargs, path=path)
        raise OSError("offline")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", fake)
    from kinject.errors import KinjectError

    with pytest.raises(KinjectError, match="cannot load"):
        load_encoder("org/model", revision="v1.2", layers=None)
    assert seen["revision"] == "v1.2" and seen["path"] == "org/model"


def test_layers_keeps_the_first_n_encoder_layers(tmp_path, textcls_dir, tiny_model):
    out = tmp_path / "small"
    spec = spec_for(textcls_dir, tmp_path / "cache")
    spec["model"]["layers"] = 1
    run_spec(spec, out)
    from transformers import AutoModel

    assert AutoModel.from_pretrained(out / "model").config.num_hidden_layers == 1
    with pytest.raises(Exception, match="model.layers"):
        bad = spec_for(textcls_dir, tmp_path / "cache")
        bad["model"]["layers"] = 5
        run_spec(bad, tmp_path / "bad")


def test_eval_steps_announce_dev_scores_without_changing_the_key(finished, tmp_path):
    from kinject.hooks import hookimpl, plugin_manager

    spec, _ = finished
    seen: list[tuple[int, dict]] = []

    class Listener:
        @hookimpl
        def kinject_metrics_logged(self, stage, metrics, step):
            if any(k.startswith("eval/") for k in metrics):
                seen.append((step, metrics))

    listener = Listener()
    plugin_manager().register(listener)
    try:
        changed = json.loads(json.dumps(spec))
        changed["training"]["eval_steps"] = 2
        changed["cache_dir"] = str(tmp_path / "fresh")  # force training to happen
        run_spec(changed, tmp_path / "evalsteps")
    finally:
        plugin_manager().unregister(listener)
    assert [step for step, _ in seen] == [2, 4, 6]
    assert all("eval/accuracy" in m and 0 <= m["eval/accuracy"] <= 1 for _, m in seen)
    assert planned({**changed, "cache_dir": spec["cache_dir"]})["finetune"].cached


def test_broken_command_plugin_says_why(monkeypatch, capsys):
    from importlib.metadata import EntryPoint

    import kinject.cli.app as cli
    import kinject.registry as registry_module

    broken = EntryPoint(name="brokencmd", value="kinject_no_such_module:app", group="kinject.commands")
    real = registry_module.entry_points
    monkeypatch.setattr(registry_module, "entry_points",
                        lambda group: [*real(group=group), *([broken] if group == "kinject.commands" else [])])
    registry_module.registry("commands").refresh()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["brokencmd", "anything"])
    registry_module.registry("commands").refresh()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "brokencmd" in err and "failed to import" in err and "kinject_no_such_module" in err
    sys.modules.pop("kinject_no_such_module", None)


def test_task_recommended_settings_apply_unless_set(tmp_path, textcls_dir, tiny_model, monkeypatch):
    from kinject import engine, preparation
    from kinject.registry import registry
    from kinject.spec_reading import build_spec

    cls = registry("tasks").get("textcls")
    monkeypatch.setattr(cls, "recommended", {"training": {"learning_rate": 3e-4, "min_steps": 20},
                                             "model": {"pooling": "mean"}})
    base = {"task": {"name": "textcls", "path": str(textcls_dir)}, "model": {"name": "tiny"},
            "cache_dir": str(tmp_path)}
    run = preparation.prepare(build_spec(base))
    assert run.spec.training.learning_rate == 3e-4 and run.spec.model.pooling == "mean"
    assert run.recommended == {"training.learning_rate": 3e-4, "training.min_steps": 20, "model.pooling": "mean"}
    mine = preparation.prepare(build_spec({**base, "training": {"learning_rate": 1e-5}}))
    assert mine.spec.training.learning_rate == 1e-5 and mine.spec.training.min_steps == 20
    off = preparation.prepare(build_spec({**base, "recommended": False}))
    assert off.spec.training.learning_rate == 5e-5 and off.recommended == {}
    # min_steps: 48 examples, batch 16, 1 epoch = 3 steps -> 20 steps
    metrics = engine.execute(preparation.prepare(build_spec({**base, "training": {"epochs": 1}})), tmp_path / "run")
    assert metrics["train"]["global_step"] == 20
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["recommended"]["applied"]["training.min_steps"] == 20
