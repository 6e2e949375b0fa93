"""Reliability: a stage interrupted right after a checkpoint (or while writing one) and resumed ends bit for bit
where an uninterrupted run ends, for every kind of training stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_textcls
from helpers import run_kinject as kinject
from reliability_helpers import Killed, identical, killed_after_checkpoint, stage_dirs
from helpers import write_kg
from helpers import write_corpus

pytestmark = pytest.mark.reliability

FAST = ["--set", "training.warmup_ratio=0", "--set", "training.logging_steps=1"]


def finetune_args(tmp_path: Path, data: Path) -> list[str]:
    return ["run", "finetune", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "training.epochs=3", "--set", "training.batch_size=8", "--set", "training.save_steps=4"]


def stilt_args(tmp_path: Path, data: Path) -> list[str]:
    other = write_textcls(tmp_path / "intermediate", n_train=40, n_eval=8, seed=5)
    return ["run", "stilt", *finetune_args(tmp_path, data)[2:],
            "--set", f"strategy.intermediate=[{{name: textcls, path: {other}}}]"]


def kimera_args(tmp_path: Path, data: Path) -> list[str]:
    kg = tmp_path / "kg.tsv"
    kg.write_text("gene\tcauses\tdisease\ndrug\ttreatment\tcancer\ncell\tcauses\tcancer\n"
                  "protein\tassociated\tgene\ndose\teffect\tdrug\npatients\tassociated\tdisease\n")
    return ["run", "kimera", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "model.max_length=32", "--set", "training.epochs=1", "--set", "training.batch_size=8",
            "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]', "--set", "strategy.kg_steps=14",
            "--set", "strategy.kg_batch_size=4", "--set", "strategy.score_examples=16",
            "--set", "training.save_steps=5"]


def mop_args(tmp_path: Path, data: Path) -> list[str]:
    kg = write_kg(tmp_path / "kg.tsv")
    return ["run", "mop", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "model.max_length=32", "--set", "training.epochs=1", "--set", "training.batch_size=8",
            "--set", f'sources=[{{"name": "triples", "path": "{kg}"}}]', "--set", "strategy.partitions=2",
            "--set", "strategy.adapter_epochs=3", "--set", "strategy.adapter_batch_size=8",
            "--set", "training.save_steps=5"]


def doktra_args(tmp_path: Path, data: Path) -> list[str]:
    return ["run", "doktra", "--task", "textcls", "--model", "tiny", "--set", f"task.path={data}",
            "--set", "strategy.teacher=tiny", "--set", "training.epochs=3", "--set", "training.batch_size=8",
            "--set", "training.save_steps=5"]


def pretrain_args(tmp_path: Path, data: Path) -> list[str]:
    corpus = write_corpus(tmp_path / "corpus.txt", 24)
    return ["run", "pretrain", "--model", "tiny", "--set", "model.max_length=64",
            "--set", f'sources=[{{"name": "corpus", "paths": ["{corpus}"]}}]', "--set", "strategy.mlm_steps=14",
            "--set", "strategy.mlm_batch_size=4", "--set", "strategy.head_steps=4",
            "--set", "strategy.eval_max_texts=10", "--set", "training.save_steps=5"]


CASES = {  # stage type -> (arguments, the stage interrupted)
    "finetune": (finetune_args, "finetune"),
    "stilt-intermediate": (stilt_args, "stilt-intermediate-1-textcls"),
    "kimera-retrain": (kimera_args, "kimera-retrain"),
    "mop-adapter": (mop_args, "mop-adapter-1"),
    "doktra-distill": (doktra_args, "doktra-distill"),
    "pretrain-mlm": (pretrain_args, "pretrain-mlm"),
}


# a torn checkpoint is handled where every stage resumes (kinject.training.last_checkpoint): two types cover it
PARAMS = [pytest.param(kind, False, id=f"{kind}-at-a-checkpoint") for kind in CASES] + \
    [pytest.param(kind, True, id=f"{kind}-while-writing-one") for kind in ("finetune", "kimera-retrain")]


@pytest.mark.parametrize("kind, torn", PARAMS)
def test_a_resumed_stage_ends_bit_for_bit_where_a_clean_run_ends(tmp_path, textcls_dir, tiny_model, kind, torn):
    make_args, stage = CASES[kind]
    args = [*make_args(tmp_path, textcls_dir), *FAST]
    clean, cut, resumed = tmp_path / "clean", tmp_path / "cut", tmp_path / "resumed"
    assert kinject(*args, "--cache-dir", str(tmp_path / "clean-cache"), "-o", str(clean)) == 0
    cache = tmp_path / "cache"
    with killed_after_checkpoint(stage, torn=torn) as killed, pytest.raises(Killed):
        kinject(*args, "--cache-dir", str(cache), "-o", str(cut))
    step = killed.steps[0]
    assert not cut.exists()
    checkpoints = sorted(p.name for p in cache.glob(f"stages/{stage}/*.partial/work/checkpoint-*"))
    assert f"checkpoint-{step}" in checkpoints
    if torn:
        assert len(checkpoints) == 2, checkpoints  # the torn one and the complete one before it
    assert kinject(*args, "--cache-dir", str(cache), "--resume", "-o", str(resumed)) == 0
    a, b = stage_dirs(clean)[stage], stage_dirs(resumed)[stage]
    assert identical(a, b) == []
    train = next((p for p in ("train.json", "retrain.json", "adapter.json") if (b / p).exists()), None)
    if train is not None:
        stats = json.loads((b / train).read_text())
        stats = stats.get("train", stats)
        started = stats.get("resumed_from_step")
        if started is not None:
            assert 0 < started <= step and (started < step) == torn
    metrics = [json.loads((d / "metrics.json").read_text()) for d in (clean, resumed)]
    for split in ("dev", "test"):
        if split in metrics[0]:
            assert metrics[0][split] == metrics[1][split]
