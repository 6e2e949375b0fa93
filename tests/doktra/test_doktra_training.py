"""DoKTra training on tiny models: both encodings of the same text in every batch (two different tokenizers),
cached teacher outputs equal the live teacher's, the switch at gamma happens at the right step, ABD trains only
the encoder, and the teacher never changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from doktra_helpers import build_word_teacher
from kinject.interfaces import Environment, Head
from kinject.spec import TrainingSpec

SINGLE = "single_label_classification"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model):
    """textcls task, its train features for the tiny student, and a word-level teacher (hidden 48)."""
    from conftest import write_textcls
    from kinject.training import build_task_model
    from kinject.api import load_tokenizer
    from kinject.tasks.textcls import TextClassificationTask

    root = tmp_path_factory.mktemp("doktra-training")
    task = TextClassificationTask(path=write_textcls(root / "data", n_train=16))
    env = Environment(data_dir=root, cache_dir=root)
    head = task.head(env)
    teacher_dir = build_word_teacher(root / "teacher")
    student_tok, teacher_tok = load_tokenizer(tiny_model), load_tokenizer(str(teacher_dir))
    examples = task.examples("train", env)
    teacher = build_task_model(teacher_dir, head, seed=0).eval()
    return dict(task=task, env=env, head=head, root=root, examples=examples, student_tok=student_tok,
                teacher_tok=teacher_tok, teacher=teacher, tiny=tiny_model,
                student=task.featurize(student_tok, examples, 64, env),
                teacher_features=task.featurize(teacher_tok, examples, 64, env))


def test_every_batch_carries_both_encodings_of_the_same_text(setup):
    from kinject.plugins.doktra.features import PairedCollator, pair_features

    features = pair_features(setup["student"], teacher=setup["teacher_features"])
    batch = PairedCollator(setup["student_tok"], setup["teacher_tok"])([dict(f, length=9) for f in features[:4]])
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "teacher_input_ids",
                          "teacher_attention_mask", "teacher_token_type_ids"}
    assert batch["input_ids"].shape[1] > batch["teacher_input_ids"].shape[1]  # characters vs words
    for i, example in enumerate(setup["examples"][:4]):
        words = "".join(example["text"].split())
        for tok, prefix in ((setup["student_tok"], ""), (setup["teacher_tok"], "teacher_")):
            ids = batch[prefix + "input_ids"][i][batch[prefix + "attention_mask"][i].bool()]
            assert "".join(tok.decode(ids, skip_special_tokens=True).replace("##", "").split()) == words
    assert batch["labels"].tolist() == [f["labels"] for f in features[:4]]


def test_cached_teacher_outputs_equal_the_live_teachers_on_a_padded_batch(setup):
    from kinject.plugins.doktra.features import (PairedCollator, cls_and_logits, encoder_inputs, model_outputs,
                                                 pair_features)

    teacher = setup["teacher"]
    cls, logits = model_outputs(teacher, setup["teacher_features"], setup["task"].collator(setup["teacher_tok"]), 3)
    cached = pair_features(setup["student"], cached={"teacher_cls": cls, "teacher_logits": logits})
    live = pair_features(setup["student"], teacher=setup["teacher_features"])
    rows = [0, 5, 2, 7]  # texts of different lengths: the live batch pads, the cache did not
    cached_batch = PairedCollator(setup["student_tok"])([cached[i] for i in rows])
    live_batch = PairedCollator(setup["student_tok"], setup["teacher_tok"])([live[i] for i in rows])
    with torch.no_grad():
        live_cls, live_logits = cls_and_logits(teacher, encoder_inputs(live_batch, "teacher_"))
    assert cached_batch["teacher_cls"].shape == (4, 48)
    torch.testing.assert_close(cached_batch["teacher_cls"], live_cls, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(cached_batch["teacher_logits"], live_logits, atol=1e-5, rtol=1e-4)


def distil(setup, work, gamma, objective="abd", live=False, projection_kind="random", **training):
    """Train a fresh tiny student with the distillation trainer; returns (model, record)."""
    from kinject.plugins.doktra.features import PairedCollator, make_projection, model_outputs, pair_features
    from kinject.plugins.doktra.trainers import DistillRecord, DistillSettings, distill_trainer
    from kinject.training import build_task_model, train

    model = build_task_model(setup["tiny"], setup["head"], seed=0)
    if live:
        features, teacher_tok = pair_features(setup["student"], teacher=setup["teacher_features"]), setup["teacher_tok"]
    else:
        cls, logits = model_outputs(setup["teacher"], setup["teacher_features"],
                                    setup["task"].collator(setup["teacher_tok"]), 8)
        features, teacher_tok = pair_features(setup["student"], cached={"teacher_cls": cls,
                                                                         "teacher_logits": logits}), None
    projection = make_projection(48, 32, projection_kind, 0)
    model.add_module("doktra_projection", projection)
    record = DistillRecord()
    spec = TrainingSpec(**{"epochs": 4, "batch_size": 4, "learning_rate": 1e-3, "warmup_ratio": 0.0,
                           "save_steps": 1000, "logging_steps": 1000, **training})
    settings = DistillSettings(objective, SINGLE, beta=0.5, gamma=gamma, projection=projection_kind)
    trainer_cls = distill_trainer(settings, record, projection, setup["teacher"] if live else None)
    train(model, features, PairedCollator(setup["student_tok"], teacher_tok), spec, work, 0, trainer_cls=trainer_cls,
          remove_unused_columns=False)
    return model, record


@pytest.mark.parametrize("gamma,training,switch", [(0.5, {}, 8), (0.9, {"epochs": 3}, 10),
                                                   (0.35, {"max_steps": 10}, 3)])
def test_the_switch_to_refinement_happens_at_gamma_of_the_steps(setup, tmp_path, gamma, training, switch):
    _, record = distil(setup, tmp_path, gamma, **training)  # 16 examples, batch 4: 4 steps per epoch
    steps = 10 if "max_steps" in training else 4 * training.get("epochs", 4)
    assert record.switch_step == switch
    assert record.phases == [(s, "distill") for s in range(switch)] + [(s, "refine") for s in range(switch, steps)]


def test_activation_boundary_phase_trains_the_encoder_not_the_head(setup, tmp_path):
    from kinject.training import build_task_model

    before = build_task_model(setup["tiny"], setup["head"], seed=0).state_dict()
    model, record = distil(setup, tmp_path, 1.0, epochs=2)
    assert {p for _, p in record.phases} == {"distill"}
    after = model.state_dict()
    assert torch.equal(after["classifier.weight"], before["classifier.weight"])  # no gradient reaches the head
    assert not torch.equal(after["bert.encoder.layer.1.output.dense.weight"],
                           before["bert.encoder.layer.1.output.dense.weight"])
    assert after["doktra_projection.weight"].equal(model.doktra_projection.weight)  # frozen, random


def test_the_live_teacher_never_changes_during_distillation(setup, tmp_path):
    teacher = setup["teacher"]
    snapshot = {k: v.clone() for k, v in teacher.state_dict().items()}
    projection_before = None
    for objective in ("abd", "kd"):
        model, record = distil(setup, tmp_path / objective, 0.5, objective=objective, live=True, epochs=2)
        projection_before = projection_before if projection_before is not None else model.doktra_projection.weight.clone()
        assert record.phases[0][1] == "distill" and record.loss["distill"] > 0
    assert not teacher.training and all(not p.requires_grad for p in teacher.parameters())
    for name, value in teacher.state_dict().items():
        assert torch.equal(value, snapshot[name]), name
    assert torch.equal(model.doktra_projection.weight, projection_before)
    assert np.isfinite(float(record.loss["refine"]))


def test_a_learned_projection_is_trained_with_the_student(setup, tmp_path):
    from kinject.plugins.doktra.features import make_projection

    initial = make_projection(48, 32, "learned", 0).weight.detach().clone()
    assert initial.shape == (48, 32)  # the student's 32-wide [CLS] -> the teacher's 48 (Heo et al.'s connector)
    model, _ = distil(setup, tmp_path, 1.0, projection_kind="learned", epochs=1)
    assert model.doktra_projection.weight.requires_grad
    assert not torch.equal(model.doktra_projection.weight.detach(), initial)
