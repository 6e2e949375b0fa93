"""Length-bucketed sampling: a permutation, full batches of similar length, seeded."""

from __future__ import annotations

import random

import torch

from kinject.training import PaddingCounter
from kinject.training.batching import LengthBucketSampler


def _batches(indices, size):
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def test_sampler_is_a_permutation_with_tight_batches():
    rng = random.Random(0)
    lengths = [rng.randint(5, 120) for _ in range(203)]
    torch.manual_seed(0)
    order = list(LengthBucketSampler(lengths, batch_size=16))
    assert sorted(order) == list(range(203))
    batches = _batches(order, 16)
    assert [len(b) for b in batches[:-1]] == [16] * 12 and len(batches[-1]) == 11  # partial batch last
    useful = sum(lengths)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert useful / padded > 0.9  # random batches would give ~0.6 here
    assert max(lengths[i] for i in batches[0]) == max(lengths)  # longest batch first
    torch.manual_seed(1)  # the global random state plays no part: a resumed run sees the same batches
    assert list(LengthBucketSampler(lengths, batch_size=16)) == order
    assert list(LengthBucketSampler(lengths, batch_size=16, seed=1)) != order
    later = LengthBucketSampler(lengths, batch_size=16)
    later.set_epoch(1)
    assert list(later) != order and sorted(later) == list(range(203))  # each epoch its own order
    later.set_epoch(0)
    assert list(later) == order


def test_padding_counter_counts_useful_tokens():
    def collate(features):
        width = max(len(f["input_ids"]) for f in features)
        mask = [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features]
        return {"attention_mask": torch.tensor(mask)}

    counter = PaddingCounter(collate)
    counter([{"input_ids": [1, 2, 3]}, {"input_ids": [1]}])
    assert (counter.useful, counter.total) == (4, 6)
    assert abs(counter.useful_fraction - 4 / 6) < 1e-12


def test_bf16_prediction_keeps_the_head_in_float32_and_stays_close(tiny_model, tmp_path):
    """bfloat16 autocast on the CPU: logits close to float32 ones, the head's own output float32 (scores that a
    ranking orders do not tie at bf16's ~3 digits), and the head's forward restored afterwards."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

    from kinject.training import float32_head, predict

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=3).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    features = [dict(tokenizer(text)) for text in ("fever and rash", "a short one", "x" * 40, "seizures")]
    collator = DataCollatorWithPadding(tokenizer)
    full = predict(model, features, collator, batch_size=2, work=tmp_path / "a")
    half = predict(model, features, collator, batch_size=2, work=tmp_path / "b", bf16=True)
    assert full.shape == half.shape == (4, 3)
    assert abs(full - half).max() < 0.05 and not (full == half).all()  # bf16 did run, and stays close

    seen = []
    model.classifier.register_forward_hook(lambda module, args, out: seen.append((args[0].dtype, out.dtype)))
    batch = collator(features)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch)
        with float32_head(model):
            model(**batch)
    assert seen == [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)]  # cast inside the head
    assert "forward" not in vars(model.classifier)  # the class's forward is back


def test_a_float32_trainer_after_a_bf16_one_does_not_autocast(tiny_model, tmp_path, monkeypatch):
    """TrainingArguments leaves ACCELERATE_MIXED_PRECISION=bf16 behind and accelerate keeps its state per process:
    a float32 prediction made after a bf16 one (kinject eval, --repeats, a sweep) must still be float32."""
    import copy

    import numpy as np
    from accelerate.state import AcceleratorState
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

    from kinject.training import predict

    AcceleratorState._reset_state()  # as in a fresh process whose first Trainer is a bf16 one
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=2).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(50)  # logits large enough that bf16 rounding shows
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    features = [dict(tokenizer(text)) for text in ("fever and rash", "a short one", "seizures")]
    collator = DataCollatorWithPadding(tokenizer)
    fresh = copy.deepcopy(model)  # a model the bf16 Trainer never saw
    with torch.no_grad():
        reference = model(**collator(features)).logits.numpy()
    half = predict(model, features, collator, batch_size=3, work=tmp_path / "b", bf16=True)
    after = predict(fresh, features, collator, batch_size=3, work=tmp_path / "c")
    assert not np.allclose(half, reference, atol=1e-4)  # bf16 did run
    assert np.allclose(after, reference, atol=1e-5)


def test_tokens_collated_in_worker_processes_are_counted_and_never_reach_the_model(tiny_model, tmp_path):
    """On a GPU kinject collates in DataLoader workers: the padding counts come back inside the batches, and the
    trainer takes them out before the forward; the same numbers as collating in the training process."""
    from transformers import DataCollatorWithPadding

    from kinject.api import Head, TrainingSpec
    from kinject.training import build_task_model, train
    from kinject.api import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    texts = [("gene " * (1 + i % 7)).strip() for i in range(24)]
    rows = [dict(tokenizer(t), labels=i % 2) for i, t in enumerate(texts)]
    training = TrainingSpec(epochs=1, batch_size=4, warmup_ratio=0, save_steps=100, selection="last")
    fractions = []
    for workers in (0, 2):
        model = build_task_model(tiny_model, Head(kind="sequence", num_labels=2), seed=0)
        stats = train(model, rows, DataCollatorWithPadding(tokenizer), training, tmp_path / f"w{workers}", 0,
                      dataloader_num_workers=workers)
        fractions.append(stats["useful_token_fraction"])
    assert fractions[0] == fractions[1] and 0.3 < fractions[0] < 1.0


def test_compile_reaches_the_trainer_and_does_not_outlive_it(tmp_path, monkeypatch):
    import os

    from kinject.api import TrainingSpec
    from kinject.training import training_arguments

    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND", raising=False)
    assert training_arguments(TrainingSpec(compile=True), tmp_path, 0).torch_compile
    assert os.environ.get("ACCELERATE_DYNAMO_BACKEND")  # transformers leaves it set for every later Trainer ...
    assert not training_arguments(TrainingSpec(), tmp_path, 0).torch_compile
    assert "ACCELERATE_DYNAMO_BACKEND" not in os.environ  # ... kinject's next arguments clear it
