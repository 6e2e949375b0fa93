"""The plugin registry: entry points found without importing a plugin; a plugin that fails to load, or is not of
its kind, refused in one line naming its distribution; where a plugin comes from; did-you-mean."""

from __future__ import annotations

import pytest

from kinject.errors import PluginLoadError, UnknownNameError
from kinject.registry import Registry


def test_loading_refuses_a_broken_plugin_in_one_line_and_breaks_no_other(broken_dist):
    reg = Registry("strategies")
    assert reg.origin("needs_missing") == ("broken_needs:Strategy", "kinject-broken-plugins", "1.2.3")
    assert reg.origin("finetune")[1] == "kinject" and reg.refusal("needs_missing") == ""
    with pytest.raises(PluginLoadError, match=r"'needs_missing' from kinject-broken-plugins 1.2.3 failed to import: "
                                              r"ModuleNotFoundError: No module named 'package_that_is_not_installed'"):
        reg.get("needs_missing")
    with pytest.raises(PluginLoadError, match=r"'raises_on_import' from kinject-broken-plugins 1.2.3 failed "
                                              r"to import: RuntimeError: boom at import"):
        reg.get("raises_on_import")
    with pytest.raises(PluginLoadError, match="is not a Strategy"):
        reg.get("not_a_strategy")
    assert reg.get("finetune").__name__ == "FinetuneStrategy"


def test_did_you_mean():
    with pytest.raises(UnknownNameError, match=r"unknown strategy 'fintune'. Did you mean 'finetune'\?"):
        Registry("strategies").get("fintune")
