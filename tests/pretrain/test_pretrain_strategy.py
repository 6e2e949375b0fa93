"""The `pretrain` strategy: validation before any stage, stage plans, tiny end-to-end runs (continual without a
task, from scratch with an in-domain vocabulary and a task), and DDP under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import free_port, write_corpus
from helpers import run_kinject as kinject

def spec(tmp_path: Path, corpus: Path, task: dict | None = None, **strategy) -> dict:
    strategy = {"name": "pretrain", "mlm_steps": 30, "mlm_batch_size": 8, "mlm_learning_rate": 2e-3,
                "head_steps": 10, "heldout_fraction": 0.1, "eval_max_texts": 30, **strategy}
    return {"model": {"name": "tiny", "max_length": 64}, "task": task, "strategy": strategy,
            "sources": [{"name": "corpus", "paths": [str(corpus)]}],
            "training": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "save_steps": 1000},
            "cache_dir": str(tmp_path / "cache"), "data_dir": str(tmp_path)}


def prepare(data: dict):
    from kinject.preparation import prepare as engine_prepare
    from kinject.spec_reading import build_spec

    return engine_prepare(build_spec(data))


def test_config_rejects_inconsistent_settings():
    from kinject.errors import SpecError
    from kinject.plugins.pretrain.strategy import PretrainStrategy
    from kinject.spec import PluginRef
    from kinject.spec_reading import validate_plugin_config

    def config(**options):
        return validate_plugin_config(PretrainStrategy, PluginRef(name="pretrain", **options), "strategy")

    assert config().vocabulary() == "keep" and config(init="scratch").vocabulary() == "train"
    for options, message in (({"mask_replace": 0.95, "random_replace": 0.1}, "mask_replace \\+ random_replace"),
                             ({"until": "vocab"}, "until=vocab needs vocab=train"),
                             ({"scratch": {"layers": 2}}, "scratch.\\* only applies to init=scratch"),
                             ({"init": "scratch", "scratch": {"hidden": 30, "heads": 4}}, "not a multiple"),
                             ({"mlm_probability": 0}, "strategy.mlm_probability")):
        with pytest.raises(SpecError, match=message):
            config(**options)


@pytest.mark.parametrize("name, content, extra, message", [
    ("empty", b"short\n\n", [], "empty corpus"),
    ("latin1", b"a first line that is long enough\nna\xefve caf\xe9 text here\n", [], "corpus.txt:2: invalid UTF-8"),
    ("vocab", None, ["--set", "strategy.init=scratch", "--set", "strategy.vocab_size=500"], "strategy.vocab_size: 500"),
    ("positions", None, ["--set", "model.max_length=1024"], "model.max_length: 1024 is beyond the 512 positions"),
    ("length", None, ["--set", "strategy.max_length=600"], "strategy.max_length: 600 is beyond the 512 positions"),
    ("scratch-positions", None, ["--set", "strategy.init=scratch", "--set", "strategy.vocab_size=3000",
                                 "--set", "strategy.scratch.positions=32"], "strategy.scratch.positions"),
    ("kind", None, ["--set", 'sources=[{"name": "hpo"}]'], "sources.0: strategy 'pretrain' does not use a triples"),
])
def test_bad_input_fails_before_any_stage(tmp_path, tiny_model, capsys, name, content, extra, message):
    corpus = tmp_path / "corpus.txt"
    if content is None:
        write_corpus(corpus, 20)
    else:
        corpus.write_bytes(content)
    cache = tmp_path / "cache"
    code = kinject("run", "pretrain", "--model", "tiny", "--set", f'sources=[{{"name": "corpus", "paths": '
                   f'["{corpus}"]}}]', "--cache-dir", str(cache), "-o", str(tmp_path / "out"), *extra)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (cache / "stages").exists() and not (tmp_path / "out").exists()


def test_stage_plans(tmp_path, tiny_model, textcls_dir):
    from kinject.keys import plan

    corpus = write_corpus(tmp_path / "corpus.txt", 20)
    names = lambda **kw: [s.name for s in prepare(spec(tmp_path, corpus, **kw)).stages]  # noqa: E731
    assert names() == ["pretrain-corpus", "pretrain-pack", "pretrain-head", "pretrain-mlm", "pretrain-evaluate"]
    assert names(head_steps=0) == ["pretrain-corpus", "pretrain-pack", "pretrain-mlm", "pretrain-evaluate"]
    assert names(vocab="train", vocab_size=3000, until="vocab") == ["pretrain-corpus", "pretrain-vocab"]
    assert names(until="corpus") == ["pretrain-corpus"]
    task = {"name": "textcls", "path": str(textcls_dir)}
    data = spec(tmp_path, corpus, task, init="scratch", vocab_size=3000)
    data["hooks"] = {"knowledge-probe": {"enabled": False}}  # the strategy's own stages (the probe hook adds its own to a run with a task)
    run = prepare(data)
    assert [s.name for s in run.stages] == [
        "pretrain-corpus", "pretrain-vocab", "pretrain-pack", "pretrain-pack-vocab", "pretrain-head", "pretrain-mlm",
        "pretrain-evaluate", "finetune", "evaluate", "pretrain-finetune", "pretrain-task-evaluate",
        "pretrain-compare", "pretrain-report"]
    stages = {s.name: s for s in run.stages}
    assert [n for n, s in stages.items() if s.produces_model] == ["pretrain-mlm"]  # the run's model/ is the encoder
    assert stages["pretrain-mlm"].inputs == ("pretrain-pack-vocab", "pretrain-vocab")  # scratch: no start model
    # the head fit (the base vocabulary) is one stage whatever the run's vocabulary and init
    continual = {p.stage.name: p.key for p in plan(prepare(spec(tmp_path, corpus, task)))}
    assert {p.stage.name: p.key for p in plan(run)}["pretrain-head"] == continual["pretrain-head"]
    # ... and whatever the pretraining seed: another mlm_seed is another MLM stage on the same head fit
    reseeded = {p.stage.name: p.key for p in plan(prepare(spec(tmp_path, corpus, task, mlm_seed=1)))}
    assert reseeded["pretrain-head"] == continual["pretrain-head"]
    assert reseeded["pretrain-mlm"] != continual["pretrain-mlm"]
    # ... and runs that differ only in their seed (--repeats) share every pretraining stage: the task's held-out
    # text does not depend on the seed, so the corpus is keyed without it; only the fine-tune differs
    seeded = {p.stage.name: p.key for p in plan(prepare({**spec(tmp_path, corpus, task), "seed": 43}))}
    for name in ("pretrain-corpus", "pretrain-pack", "pretrain-head", "pretrain-mlm", "pretrain-evaluate"):
        assert seeded[name] == continual[name], name
    assert seeded["pretrain-finetune"] != continual["pretrain-finetune"]
    assert stages["pretrain-finetune"].config.init_from == "pretrain-mlm"
    exclude = stages["pretrain-corpus"].config.exclude
    assert [ref.name for ref in exclude] == ["textcls"] and exclude[0].limit is None

    keys = lambda data: {p.stage.name: p.key for p in plan(prepare(data))}  # noqa: E731
    ours = keys(spec(tmp_path, corpus, task))
    data = spec(tmp_path, corpus, task)
    data["strategy"], data["sources"] = {"name": "finetune"}, []
    baseline = keys(data)
    assert ours["finetune"] == baseline["finetune"] and ours["evaluate"] == baseline["evaluate"]
    # a source that already holds the task's test text out: pretraining does not depend on the task, nor on
    # fine-tuning-only settings, so runs on other tasks share it
    data = spec(tmp_path, corpus, task)
    data["sources"][0]["tasks"] = [task]
    data["training"].update(head_learning_rate=1e-2, min_steps=5)  # as a task's recommended settings set them
    covered = keys(data)
    data["task"], data["model"]["pooling"] = None, "mean"
    del data["training"]["head_learning_rate"], data["training"]["min_steps"]
    alone = keys(data)
    assert all(covered[name] == alone[name] for name in alone)
    data["strategy"]["max_length"] = 32
    assert keys(data)["pretrain-mlm"] != alone["pretrain-mlm"]


def test_continual_without_a_task_lowers_perplexity_and_loads(tmp_path, tiny_model):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from kinject.engine import execute

    corpus = write_corpus(tmp_path / "corpus.txt", 300)
    run = prepare(spec(tmp_path, corpus, mlm_steps=40))
    assert run.task is None
    metrics = execute(run, tmp_path / "run")
    heldout = metrics["heldout"]
    assert heldout["same_vocabulary"] and heldout["reference_head"] == "trained"  # fitted: tiny ships no MLM head
    assert heldout["masked_tokens"] == heldout["reference_masked_tokens"] > 50  # the same masked words
    assert heldout["perplexity"] < heldout["reference_perplexity"]  # positive control: the corpus went in
    assert metrics["mlm"]["global_step"] == 40 and metrics["mlm"]["useful_token_fraction"] >= 0.95
    assert metrics["corpus"]["train_texts"] + metrics["corpus"]["heldout_texts"] == 300
    model_dir = tmp_path / "run" / "model"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["heldout"]["perplexity"] == heldout["perplexity"]
    mlm, info = AutoModelForMaskedLM.from_pretrained(model_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]  # the MLM head loads: nothing newly initialised
    encoder, info = AutoModel.from_pretrained(model_dir, output_loading_info=True)
    assert not info["missing_keys"]  # the pooler is saved too
    assert AutoTokenizer.from_pretrained(model_dir).get_vocab() == AutoTokenizer.from_pretrained(tiny_model).get_vocab()


@pytest.mark.slow
def test_scratch_with_in_domain_vocabulary_and_a_task(tmp_path, tiny_model, textcls_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from kinject.engine import execute

    from kinject.keys import plan

    test_text = json.loads((textcls_dir / "test.jsonl").read_text().splitlines()[0])["text"]
    corpus = write_corpus(tmp_path / "corpus.txt", 200, extra=(f"Some prefix here. {test_text}. And a suffix.",))
    task = {"name": "textcls", "path": str(textcls_dir)}
    data = spec(tmp_path, corpus, task, init="scratch", vocab_size=200, vocab_alphabet_limit=40,
                scratch={"layers": 1, "hidden": 32, "heads": 2})
    metrics = execute(prepare(data), tmp_path / "run")
    out = tmp_path / "run"
    assert {"dev", "test", "heldout", "corpus", "comparison"} <= set(metrics)
    assert metrics["comparison"]["other_name"] == "pretrain/scratch" and metrics["comparison"]["split"] == "test"
    assert metrics["corpus"]["held_out_overlap"] == 1  # the run's own test text never reaches the corpus
    assert not metrics["heldout"]["same_vocabulary"]
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    assert len(tokenizer) <= 200 and tokenizer.get_vocab() == AutoTokenizer.from_pretrained(out / "tokenizer").get_vocab()
    model = AutoModelForMaskedLM.from_pretrained(out / "model")
    assert model.config.num_hidden_layers == 1 and model.config.vocab_size == len(tokenizer)
    # a fine-tuning setting re-runs the task stages only; pretraining comes from the cache
    data["training"]["learning_rate"] = 5e-4
    cached = {p.stage.name: p.cached for p in plan(prepare(data))}
    assert all(cached[n] for n in ("pretrain-corpus", "pretrain-vocab", "pretrain-pack-vocab", "pretrain-mlm",
                                   "pretrain-evaluate"))
    assert not cached["finetune"] and not cached["pretrain-finetune"]


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path, tiny_model):
    corpus = write_corpus(tmp_path / "corpus.txt", 200)
    out = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1", KINJECT_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port(),
           "-m", "kinject", "run", "pretrain", "--model", "tiny", "--set", "model.max_length=64",
           "--set", f'sources=[{{"name": "corpus", "paths": ["{corpus}"]}}]', "--set", "strategy.mlm_steps=6",
           "--set", "strategy.mlm_batch_size=4", "--set", "strategy.head_steps=4", "--set", "strategy.eval_max_texts=10",
           "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["mlm"]["world_size"] == 2 and metrics["mlm"]["global_step"] == 6
    assert metrics["heldout"]["masked_tokens"] > 0
    assert (out / "model" / "model.safetensors").exists()
