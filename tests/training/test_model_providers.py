"""Model names are the plugin kind ``kinject.models``: a provider adds a name (where its weights are, what identifies
them); the kernel still refuses an unsafe local folder, whoever named it; a name nobody registers is a local folder
or a hub id; a provider that fails to load stops ``prepare`` with one line naming it, before any stage."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kinject.api import KinjectError, ModelProvider, model_fingerprint, registry, resolve_model


@pytest.fixture
def named(tmp_path, tiny_model):
    """A provider of the name ``mine``: one folder, identified as ``mine:v7``."""
    folder = tmp_path / "mine"
    shutil.copytree(tiny_model, folder)

    class Mine(ModelProvider):
        def resolve(self, cache_dir: Path) -> str:
            return str(folder)

        def fingerprint(self, path, revision):
            return "mine:v7"

    models = registry("models")
    models.register("mine", Mine)
    yield folder
    models._extra.pop("mine", None)
    models.refresh()


def test_a_provider_adds_a_model_name_and_the_built_in_names_still_answer(named, cache_dir, tiny_model):
    assert resolve_model("mine", cache_dir) == str(named)
    assert model_fingerprint("mine", str(named), None) == "mine:v7"
    assert resolve_model("tiny", cache_dir) == tiny_model and model_fingerprint("tiny", tiny_model, None) == "tiny:v1"
    assert model_fingerprint(str(named), str(named), None).startswith("dir:")  # a folder by path: its files
    assert resolve_model("org/some-model", cache_dir) == "org/some-model"  # nobody's name: a hub id
    assert model_fingerprint("org/some-model", "org/some-model", "abc") == "hub:org/some-model@abc"


def test_the_kernel_refuses_pickled_weights_in_a_folder_a_provider_named(named, cache_dir):
    import torch

    (named / "model.safetensors").unlink()
    torch.save({"weights": torch.zeros(2), "hook": subprocess.Popen}, named / "pytorch_model.bin")
    with pytest.raises(KinjectError, match="safe loader"):
        resolve_model("mine", cache_dir)


def test_a_broken_built_in_provider_stops_prepare_in_one_line_before_any_stage(tmp_path, textcls_dir, monkeypatch):
    """The failure the hooks had: with the `tiny` provider broken, `prepare` used to pass (taking `tiny` for a hub id,
    every key changed) and the run failed inside its first stage. Now it is a load error naming the provider."""
    from importlib.metadata import EntryPoint

    from helpers import prepare_stops_in_one_line

    models = registry("models")
    models.refresh()
    real = models._entry_points()
    broken = EntryPoint(name="tiny", value="kinject.training.no_such_module:TinyModel", group="kinject.models")
    monkeypatch.setattr(models, "_eps", {**real, "tiny": broken})
    prepare_stops_in_one_line(textcls_dir, tmp_path, "model 'tiny'", "no_such_module")
    models.refresh()


def test_a_near_miss_of_a_model_name_is_a_did_you_mean_before_it_is_taken_for_a_hub_id(cache_dir, tmp_path, capsys,
                                                                                         monkeypatch):
    """``--model minilmm`` offline: one line naming the field and the name meant, not "not in the local Hugging Face
    cache"; a hub id with an owner, a far name, and a near miss that is in the local hub cache stay hub ids."""
    from helpers import one_line_error

    import huggingface_hub.constants

    line = one_line_error(capsys, ["run", "finetune", "--task", "hpo-isa", "--model", "minilmm", "--quick"])
    assert line.startswith("error: model.name: 'minilmm'") and line.endswith("Did you mean 'minilm'?"), line
    with pytest.raises(KinjectError, match="Did you mean 'tiny'"):
        resolve_model("tinyy", cache_dir)
    assert resolve_model("org/minilmm", cache_dir) == "org/minilmm"
    assert resolve_model("bert-base-uncased", cache_dir) == "bert-base-uncased"
    snapshot = tmp_path / "hub" / "models--minilmm" / "snapshots" / "abc123"  # the hub cache's layout
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--minilmm" / "refs").mkdir()
    (tmp_path / "hub" / "models--minilmm" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model("minilmm", cache_dir) == "minilmm"  # a model of that name is cached: it is meant
