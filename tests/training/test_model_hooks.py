"""The model catalogue is the training library's hook plugin ``models`` (#43): a plugin adds a model name with its
own ``kinject_resolve_model`` / ``kinject_model_fingerprint``; the kernel still refuses an unsafe local folder, whoever
named it; a name nobody knows is a local folder or a hub id."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kinject.api import KinjectError, hookimpl, model_fingerprint, plugin_manager, resolve_model


class _Named:
    """A plugin naming one folder ``mine``."""

    def __init__(self, folder):
        self.folder = folder

    @hookimpl(tryfirst=True)
    def kinject_resolve_model(self, name, cache_dir):
        return str(self.folder) if name == "mine" else None

    @hookimpl(tryfirst=True)
    def kinject_model_fingerprint(self, name, path, revision):
        return "mine:v7" if name == "mine" else None


@pytest.fixture
def named(tmp_path, tiny_model):
    folder = tmp_path / "mine"
    shutil.copytree(tiny_model, folder)
    plugin = _Named(folder)
    plugin_manager().register(plugin, name="test-mine")
    yield folder
    plugin_manager().unregister(plugin)


def test_a_plugin_adds_a_model_name_and_the_catalogue_still_answers(named, cache_dir, tiny_model):
    assert resolve_model("mine", cache_dir) == str(named)
    assert model_fingerprint("mine", str(named), None) == "mine:v7"
    assert resolve_model("tiny", cache_dir) == tiny_model and model_fingerprint("tiny", tiny_model, None) == "tiny:v1"
    assert model_fingerprint(str(named), str(named), None).startswith("dir:")  # a folder by path: its files
    assert resolve_model("org/some-model", cache_dir) == "org/some-model"  # nobody's name: a hub id


def test_the_kernel_refuses_pickled_weights_in_a_folder_a_plugin_named(named, cache_dir):
    import torch

    (named / "model.safetensors").unlink()
    torch.save({"weights": torch.zeros(2), "hook": subprocess.Popen}, named / "pytorch_model.bin")
    with pytest.raises(KinjectError, match="safe loader"):
        resolve_model("mine", cache_dir)
