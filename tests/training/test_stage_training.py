"""The training settings a stage holds (the training library's stage_training): a strategy's per-stage overrides, a
fine-tune's settings, a method stage's (the fine-tuning-only settings reset)."""

from __future__ import annotations

import pytest


def test_training_overrides_replace_only_the_fields_they_set():
    """A strategy's per-stage budget (STILT intermediates, DoKTra teacher/distillation): set fields win, the rest
    is the run's, and the result is held as a training stage holds it (no limit, no eval splits)."""
    import pydantic

    from kinject.api import TrainingSpec
    from kinject.training import TrainingOverrides, finetune_training

    base = TrainingSpec(epochs=1, learning_rate=1e-4, head_learning_rate=2e-2, limit=10, eval_splits=["test"])
    stage = TrainingOverrides(epochs=2, head_learning_rate=1e-3).apply(base)
    assert (stage.epochs, stage.learning_rate, stage.head_learning_rate) == (2, 1e-4, 1e-3)
    assert stage.limit is None and stage.eval_splits is None
    assert TrainingOverrides().apply(base) == finetune_training(base)
    with pytest.raises(pydantic.ValidationError):
        TrainingOverrides(learning_rate=-1)
    with pytest.raises(pydantic.ValidationError):
        TrainingOverrides(lr=1e-4)  # unknown field


def test_a_method_stage_resets_the_fine_tuning_only_settings_and_takes_its_own_budget():
    from kinject.api import TrainingSpec
    from kinject.training import FINETUNING_ONLY, method_stage_training

    base = TrainingSpec(head_learning_rate=1e-3, patience=2, min_steps=50, limit=10, learning_rate=1e-4)
    stage = method_stage_training(base, epochs=4, batch_size=8)
    assert {name: getattr(stage, name) for name in FINETUNING_ONLY} == FINETUNING_ONLY
    assert (stage.epochs, stage.batch_size, stage.learning_rate, stage.limit) == (4, 8, 1e-4, None)
