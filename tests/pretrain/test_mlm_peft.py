"""``mlm_stage(..., peft=)``: a knowledge stage trains LoRA adapters on the frozen model through the same resumable
Trainer loop; ``model/`` is the merged masked-LM (what ``init_from`` loads) and ``peft-adapter/`` the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kinject.api import PeftSpec, SpecError, Stage, StageConfig, Strategy, is_main_process
from kinject.testing import registered
from kinject.training import evaluate_stage, finetune_stage

TEXTS = ["gene expression increased in tumor cells", "the drug dose reduced symptoms", "a cat sat on the mat"]


class TextsConfig(StageConfig):
    copies: int = 20


def texts_body(cfg, ctx):
    if is_main_process():
        (ctx.out / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS * cfg.copies))


class LoraMlm(Strategy):
    """Texts -> a fitted MLM head -> LoRA continued MLM -> fine-tune from it."""

    def stages(self, run):
        from kinject.knowledge.mlm import mlm_stage, pack_stage

        pack = pack_stage(run, "lora-pack", texts_stage="lora-texts")
        head = mlm_stage(run, "lora-head", pack_stage=pack, mode="head", steps=2, learning_rate=1e-3, batch_size=8)
        mlm = mlm_stage(run, "lora-mlm", pack_stage=pack, start_stage=head, steps=3, learning_rate=1e-2,
                        batch_size=8, peft=PeftSpec(method="lora", r=4))
        return [Stage(name="lora-texts", body=texts_body, config=TextsConfig()), pack, head, mlm,
                finetune_stage(run, "lora-finetune", init_from="lora-mlm"), evaluate_stage(run, "lora-finetune")]


def stage_dir(out: Path, name: str) -> Path:
    return Path(next(s["dir"] for s in json.loads((out / "run.json").read_text())["stages"] if s["name"] == name))


@pytest.mark.slow
def test_an_mlm_stage_trains_lora_adapters_and_saves_the_merged_model(tmp_path, textcls_dir, tiny_model):
    import torch
    from safetensors.torch import load_file

    import kinject

    out = tmp_path / "run"
    with registered("strategies", "lora-mlm", LoraMlm):
        kinject.run("lora-mlm", task="textcls", model="tiny", output=out,
                    overrides={"task.path": textcls_dir, "model.max_length": 32, "training.max_steps": 2,
                               "hooks.knowledge-probe.enabled": False})
    mlm, head = stage_dir(out, "lora-mlm"), stage_dir(out, "lora-head")
    train = json.loads((mlm / "train.json").read_text())
    assert train["global_step"] == 3 and 0 < train["trainable_parameters"] < train["architecture"]["parameters"] / 10
    adapter = json.loads((mlm / "peft-adapter" / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["r"] == 4
    merged, before = load_file(mlm / "model" / "model.safetensors"), load_file(head / "model" / "model.safetensors")
    assert not any("lora" in key for key in merged) and set(before) <= set(merged)  # a plain masked-LM
    changed = {key for key in before if not torch.equal(before[key], merged[key])}
    assert changed and all(".query." in key or ".value." in key for key in changed), changed  # only where LoRA was
    assert {"dev", "test"} <= set(json.loads((out / "metrics.json").read_text()))  # init_from loaded it


def test_peft_applies_to_continued_training_only(tmp_path, textcls_dir, tiny_model):
    from kinject.api import build_spec, prepare
    from kinject.knowledge.mlm import mlm_stage, pack_stage

    run = prepare(build_spec({"model": {"name": "tiny", "max_length": 32}, "strategy": {"name": "finetune"},
                              "task": {"name": "textcls", "path": str(textcls_dir)},
                              "cache_dir": str(tmp_path / "cache")}))
    pack, lora = pack_stage(run, "p", texts_stage="t"), PeftSpec(method="lora")
    budget = dict(steps=2, learning_rate=1e-3, batch_size=4, peft=lora)
    assert mlm_stage(run, "m", pack, allow_random_head=True, **budget).config.peft == lora
    for mode, why in (("head", "the head alone"), ("scratch", "every weight from random ones")):
        with pytest.raises(SpecError, match=f"^m: peft applies to mode 'continual' only \\(mode '{mode}' trains {why}"):
            mlm_stage(run, "m", pack, mode=mode, **budget)
