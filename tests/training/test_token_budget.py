"""Token-budget batching (kinject.training.token_budget_batches) and KIMERA's ``kg_token_budget``: every row
once per epoch, no batch over its budget, seeded, and the retraining's dose still counts the rows it took."""

from __future__ import annotations

import numpy as np
import pytest

from kinject.training import length_grouped_batches, token_budget_batches


def test_every_row_once_and_no_batch_over_its_budget():
    lengths = np.random.default_rng(0).integers(8, 60, size=997)
    batches = token_budget_batches(lengths, 1024, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) * lengths[b].max() <= 1024 for b in batches)
    assert lengths[batches[0][0]] == lengths.max()  # the longest batch first: memory errors show at once
    # 1024 tokens hold ~30 rows of the mean length: fewer steps than fixed 16-row batches
    assert len(batches) < len(length_grouped_batches(lengths, 16, seed=3))
    sizes = [len(b) for b in batches]
    assert max(sizes) > 2 * min(sizes)  # the batch size follows the rows' length


def test_seeded_and_a_row_over_the_budget_stands_alone():
    lengths = [10, 20, 300, 15, 12, 40, 8]
    assert token_budget_batches(lengths, 64, seed=1) == token_budget_batches(lengths, 64, seed=1)
    many = np.arange(5, 500) % 37 + 5
    assert token_budget_batches(many, 128, seed=1) != token_budget_batches(many, 128, seed=2)
    batches = token_budget_batches(lengths, 64, seed=1)
    assert [2] in batches
    assert token_budget_batches([], 64, seed=0) == []
    with pytest.raises(ValueError, match="max_tokens"):
        token_budget_batches(lengths, 0)


def kimera_config(**options):
    from kinject.plugins.kimera.strategy import KimeraStrategy
    from kinject.spec import PluginRef
    from kinject.spec_reading import validate_plugin_config

    return validate_plugin_config(KimeraStrategy, PluginRef(name="kimera", **options), "strategy")


def test_kimera_token_budget_is_a_config_field_and_an_unset_one_keeps_the_keys():
    from kinject.api import SpecError
    from kinject.plugins.kimera.retrain import kg_batches

    assert kimera_config().kg_token_budget is None
    assert kimera_config(kg_token_budget=1536).kg_token_budget == 1536
    with pytest.raises(SpecError, match="kg_token_budget"):
        kimera_config(kg_token_budget=4)
    assert kg_batches(None) is length_grouped_batches
    lengths = np.full(64, 24)
    assert [len(b) for b in kg_batches(96)(lengths, 16, 0)] == [4] * 16  # 96 tokens / 24 per row


@pytest.mark.slow
def test_retraining_with_a_token_budget_counts_the_rows_it_took(tmp_path, tiny_model):
    """A short retraining under a token budget: fewer steps than 4-row batches, and the consumed rows (the dose)
    are exactly the rows of the batches the Trainer took."""
    from kinject.api import load_encoder, load_tokenizer
    from kinject.interfaces import Environment
    from kinject.plugins.kimera.multitask import KG_TASKS
    from kinject.plugins.kimera.retrain import kg_batches, retrain
    from kinject.knowledge.kg.data import KGDataConfig, build_kg_data
    from kinject.knowledge.sources.triples import TriplesSource
    from kinject.spec import TrainingSpec

    words = ["disease", "gene", "protein", "cell", "drug", "cancer", "chemical", "treatment", "dose", "patients"]
    rows = {(words[i], r, words[(i * 3 + k) % 10]) for i in range(10) for k, r in enumerate(["causes", "treats"], 1)}
    (tmp_path / "kg.tsv").write_text("".join("\t".join(r) + "\n" for r in sorted(rows) if r[0] != r[2]))
    tokenizer = load_tokenizer(tiny_model)
    data = build_kg_data(TriplesSource(path=str(tmp_path / "kg.tsv")),
                         Environment(data_dir=tmp_path, cache_dir=tmp_path / "cache"), tokenizer,
                         KGDataConfig(tasks=list(KG_TASKS), max_length=32))
    datasets = {t: getattr(data, t) for t in KG_TASKS}
    spec = TrainingSpec(epochs=1, max_steps=-1, learning_rate=1e-3, batch_size=4, save_steps=1000, logging_steps=100)
    plain = retrain(load_encoder(tiny_model), tokenizer, datasets, len(data.relations), spec, tmp_path / "a", 0)
    packed = retrain(load_encoder(tiny_model), tokenizer, datasets, len(data.relations), spec, tmp_path / "b", 0,
                     batches_of=kg_batches(256))
    assert packed["global_step"] < plain["global_step"]
    rows = sum(len(d) for d in datasets.values())
    for stats in (plain, packed):
        consumed, per_epoch = stats["_consumed"], stats["_rows_per_epoch"]
        assert per_epoch == rows and sum(len(v) for v in consumed.values()) == rows  # one epoch: every row once
