"""The pretrain strategy's fair-comparison options (issue #26): token-level masking beside whole-word masking,
the MLM controls (out-of-domain general text, word-shuffled domain text) at the same steps, and from-scratch
models at the base model's architecture."""

from __future__ import annotations

import platform
import re

import pytest

from helpers import write_corpus
from test_pretrain_strategy import prepare, spec


def plans(tmp_path, corpus, task=None, **strategy) -> tuple[dict, dict]:
    """(stages by name, keys by name) of a prepared run."""
    from kinject.keys import plan

    run = prepare(spec(tmp_path, corpus, task, **strategy))
    return {s.name: s for s in run.stages}, {p.stage.name: p.key for p in plan(run)}


def test_token_masking_is_keyed_on_the_mlm_stage_only(tmp_path, tiny_model, textcls_dir):
    corpus = write_corpus(tmp_path / "corpus.txt", 20)
    task = {"name": "textcls", "path": str(textcls_dir)}
    stages, keys = plans(tmp_path, corpus, task)
    token_stages, token_keys = plans(tmp_path, corpus, task, mask_unit="token")
    assert stages["pretrain-mlm"].config.masking.unit == "whole_word"
    assert token_stages["pretrain-mlm"].config.masking.unit == "token"
    assert token_stages["pretrain-head"].config.masking.unit == "whole_word"  # one head fit for both units
    assert token_keys["pretrain-head"] == keys["pretrain-head"] and token_keys["pretrain-pack"] == keys["pretrain-pack"]
    assert token_keys["pretrain-mlm"] != keys["pretrain-mlm"]
    assert token_stages["pretrain-compare"].config.labels[1] == "pretrain/token"
    assert stages["pretrain-compare"].config.labels[1] == "pretrain"


def test_control_plans_share_the_corpus_head_and_held_out_texts(tmp_path, tiny_model):
    corpus = write_corpus(tmp_path / "corpus.txt", 20)
    stages, keys = plans(tmp_path, corpus)
    general, general_keys = plans(tmp_path, corpus, mlm_corpus="general")
    assert list(general) == ["pretrain-corpus", "pretrain-general-texts", "pretrain-pack", "pretrain-pack-general",
                             "pretrain-head", "pretrain-mlm", "pretrain-evaluate"]
    for name in ("pretrain-corpus", "pretrain-pack", "pretrain-head"):  # the same start, on the domain corpus
        assert general_keys[name] == keys[name], name
    assert general["pretrain-mlm"].inputs == ("pretrain-pack-general", "pretrain-head")
    assert general["pretrain-general-texts"].config.python == platform.python_version()
    evaluate = general["pretrain-evaluate"].config  # held out: the domain corpus's texts, the same reference
    assert evaluate.corpus_stage == "pretrain-corpus" and evaluate.texts_stage == "pretrain-general-texts"
    assert evaluate.reference == stages["pretrain-evaluate"].config.reference
    assert general["pretrain-mlm"].config.training == stages["pretrain-mlm"].config.training  # the same budget
    # no head fit and no vocabulary: the domain corpus is not packed at all
    shuffled, _ = plans(tmp_path, corpus, mlm_corpus="shuffled", head_steps=0)
    assert list(shuffled) == ["pretrain-corpus", "pretrain-shuffled-texts", "pretrain-pack-shuffled", "pretrain-mlm",
                              "pretrain-evaluate"]
    assert shuffled["pretrain-shuffled-texts"].inputs == ("pretrain-corpus",)
    # an in-domain vocabulary packs the control's texts
    vocab, _ = plans(tmp_path, corpus, mlm_corpus="general", init="scratch", vocab_size=3000)
    assert vocab["pretrain-mlm"].inputs == ("pretrain-pack-vocab-general", "pretrain-vocab")


def test_options_are_checked_and_the_paper_protocol_masks_whole_words():
    from kinject.errors import SpecError
    from kinject.plugins.pretrain.strategy import PretrainStrategy
    from kinject.spec import PluginRef
    from kinject.spec_reading import validate_plugin_config

    assert PretrainStrategy.protocols["paper"]["strategy"]["mask_unit"] == "whole_word"
    config = validate_plugin_config(PretrainStrategy, PluginRef(name="pretrain"), "strategy")
    assert (config.mask_unit, config.mlm_corpus) == ("whole_word", "domain")  # the defaults: as before
    for field, value in (("mask_unit", "word"), ("mlm_corpus", "wikipedia")):
        with pytest.raises(SpecError, match=f"strategy.{field}"):
            validate_plugin_config(PretrainStrategy, PluginRef(name="pretrain", **{field: value}), "strategy")


@pytest.fixture(scope="module")
def general_texts() -> list[str]:
    from kinject.plugins.pretrain.control import python_docs_texts

    return list(python_docs_texts())


@pytest.fixture(scope="module")
def domain_run(tmp_path_factory, tiny_model):
    """(folder, corpus, metrics) of a tiny continual run on the domain corpus that the other runs share a cache with."""
    from kinject.engine import execute

    root = tmp_path_factory.mktemp("pretrain-controls")
    corpus = write_corpus(root / "corpus.txt", 300)
    return root, corpus, execute(prepare(spec(root, corpus, mlm_steps=STEPS)), root / "domain")


STEPS = 20


@pytest.mark.slow
def test_general_corpus_is_python_documentation(general_texts):
    texts = general_texts
    assert len(texts) > 5000 and sum(map(len, texts)) > 1_000_000 and len(set(texts)) == len(texts)
    assert all(len(t) >= 40 and "\n" not in t and not t.startswith(">>>") for t in texts)
    biomedical = re.compile(r"\b(proteins?|genes?|diseases?|patients?|clinical|cancer|tumou?rs?|drugs?|lymphoma)\b",
                            re.I)
    assert not [t for t in texts if biomedical.search(t)]


def test_shuffled_texts_keep_each_texts_words():
    from kinject.plugins.pretrain.control import shuffled_texts

    texts = [" ".join(f"w{i}x{j}" for j in range(30)) for i in range(20)]
    shuffled = list(shuffled_texts(iter(texts), seed=0))
    assert shuffled == list(shuffled_texts(iter(texts), seed=0)) != list(shuffled_texts(iter(texts), seed=1))
    assert all(sorted(a.split()) == sorted(b.split()) and a != b for a, b in zip(texts, shuffled))


@pytest.mark.slow
def test_general_control_trains_the_same_steps_from_the_same_start(domain_run, general_texts):
    import hashlib

    from kinject.engine import execute

    from kinject.keys import plan

    root, corpus, domain = domain_run
    run = prepare(spec(root, corpus, mlm_steps=STEPS, mlm_corpus="general"))
    assert {p.stage.name for p in plan(run) if p.cached} == {"pretrain-corpus", "pretrain-pack", "pretrain-head"}
    general = execute(run, root / "general")
    assert general["mlm"]["global_step"] == domain["mlm"]["global_step"] == STEPS
    assert general["mlm"]["architecture"] == domain["mlm"]["architecture"]
    control = general["mlm_corpus"]
    assert control["kind"] == "general" and control["texts"] == len(general_texts) and "Python" in control["provenance"]
    # the texts the stage wrote are the ones python_docs_texts gives in this process: deterministic
    assert control["sha256"] == hashlib.sha256("".join(t + "\n" for t in general_texts).encode()).hexdigest()
    assert "mlm_corpus" not in domain
    held, ref = general["heldout"], domain["heldout"]  # the same held-out words, the same reference
    assert held["texts"] == ref["texts"] and held["masked_tokens"] == ref["masked_tokens"]
    assert held["reference_perplexity"] == ref["reference_perplexity"]
    assert held["perplexity"] != ref["perplexity"]


@pytest.mark.slow
def test_scratch_defaults_to_the_base_architecture(domain_run, tiny_model):
    """init=scratch with no scratch.* is the base model's architecture, so scratch and continual compare at one
    architecture and budget; with the base vocabulary the parameter counts are equal too."""
    from transformers import AutoConfig

    from kinject.engine import execute

    root, corpus, continual = domain_run
    base = AutoConfig.from_pretrained(tiny_model)
    trained = {"vocab_size": 200, "vocab_alphabet_limit": 40}
    for vocab, extra in (("keep", {}), ("train", trained)):
        scratch = execute(prepare(spec(root, corpus, mlm_steps=STEPS, init="scratch", vocab=vocab, **extra)),
                          root / f"scratch-{vocab}")
        assert scratch["mlm"]["global_step"] == continual["mlm"]["global_step"] == STEPS
        shape = scratch["mlm"]["architecture"]
        assert (shape["layers"], shape["hidden"], shape["heads"], shape["intermediate"], shape["positions"]) == (
            base.num_hidden_layers, base.hidden_size, base.num_attention_heads, base.intermediate_size,
            base.max_position_embeddings)
        if vocab == "keep":
            assert shape == continual["mlm"]["architecture"]
        else:  # only the embeddings differ, by the trained vocabulary's size
            assert shape["encoder_parameters"] - continual["mlm"]["architecture"]["encoder_parameters"] == \
                (shape["vocab"] - base.vocab_size) * base.hidden_size
