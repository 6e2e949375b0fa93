"""DoKTra cost ratios, measured in one process on the same batches (figures in docs/benchmarks.md, docs/doktra.md).

One optimiser step (forward, backward, AdamW step) of the student with
  plain      - the task loss (what the `finetune` stage does; measured twice, the second copy shows the noise),
  abd-cached - the AB hinge on [CLS] against cached teacher vectors (what `doktra-distill` does),
  refine     - CE - beta2 H(p) (the refinement phase),
  abd-live   - the AB hinge with the teacher run on every batch (strategy.teacher_cache: false).
Target: abd-cached / plain <= 1.3. Also: the one-time teacher pass that fills the cache, per example, as a
fraction of one plain training epoch.

Usage: .venv/bin/python -m benchmarks.bench_doktra [--student-layers 3] [--batch 16] [--length 128] [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    import torch
    from transformers import Trainer

    from kinject.interfaces import Head
    from kinject.api import resolve_model
    from kinject.plugins.doktra.features import model_outputs
    from kinject.plugins.doktra.trainers import DistillRecord, DistillSettings, calibrated_trainer, distill_trainer
    from kinject.spec import TrainingSpec
    from kinject.training import build_task_model, training_arguments

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--student-layers", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-doktra-"))
    path = resolve_model(args.model, work)
    head = Head("sequence", 6, labels=tuple("abcdef"))
    teacher = build_task_model(path, head, seed=1).eval().requires_grad_(False)
    torch.manual_seed(0)
    vocab = teacher.config.vocab_size
    batches = []
    for _ in range(4):
        ids = torch.randint(1000, vocab, (args.batch, args.length))
        mask = torch.ones_like(ids)
        batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
                 "labels": torch.randint(0, 6, (args.batch,))}
        with torch.no_grad():
            out = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        batch.update(teacher_cls=out.hidden_states[-1][:, 0], teacher_logits=out.logits,
                     teacher_input_ids=ids, teacher_attention_mask=mask)
        batches.append(batch)
    spec = TrainingSpec(epochs=1, batch_size=args.batch, learning_rate=1e-5, warmup_ratio=0.0)
    settings = DistillSettings("abd", head.problem_type, beta=0.5, gamma=1.0)

    def make(trainer_cls, switch: int = 10**9):
        model = build_task_model(path, head, seed=0, layers=args.student_layers).train()
        trainer = trainer_cls(model=model, args=training_arguments(spec, work, 0, remove_unused_columns=False))
        trainer.create_optimizer_and_scheduler(num_training_steps=10**6)
        trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this bypasses
        if hasattr(trainer, "record"):
            trainer.record.switch_step = switch
        return trainer

    def keys(batch, names):
        return {k: v for k, v in batch.items() if k in names}

    student_keys = ("input_ids", "attention_mask", "token_type_ids", "labels")
    setups = {
        "plain": (make(Trainer), student_keys),
        "plain-again": (make(Trainer), student_keys),  # a second identical setup: the noise floor of the ratios
        "abd-cached": (make(distill_trainer(settings, DistillRecord())), (*student_keys, "teacher_cls")),
        "refine": (make(calibrated_trainer(0.5, head.problem_type)), student_keys),
        "abd-live": (make(distill_trainer(settings, DistillRecord(), teacher=teacher)),
                     (*student_keys, "teacher_input_ids", "teacher_attention_mask")),
    }

    def step(trainer, batch) -> float:
        start = time.perf_counter()
        trainer.training_step(trainer.model, dict(batch))
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {name: [] for name in setups}
    for name, (trainer, names) in setups.items():
        step(trainer, keys(batches[0], names))  # warm-up, optimiser state
    order = list(setups)
    for r in range(args.repeats):  # interleaved in a shuffled order, so load changes hit every setup alike
        random.Random(r).shuffle(order)
        for name in order:
            trainer, names = setups[name]
            times[name].append(step(trainer, keys(batches[r % len(batches)], names)))
    plain = statistics.median(times["plain"])
    print(f"student {args.model} ({args.student_layers} layers), teacher {args.model} "
          f"({teacher.config.num_hidden_layers} layers), batch {args.batch} x {args.length}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<11} {median * 1000:8.1f} ms/step   {median / plain:5.2f}x plain   "
              f"(min {min(values) * 1000:.1f} ms, {min(values) / min(times['plain']):.2f}x)")
    features = [{k: v[i].tolist() for k, v in keys(batches[0], student_keys[:3]).items()} for i in range(args.batch)]
    from transformers import DataCollatorWithPadding

    from kinject.api import load_tokenizer

    collate = DataCollatorWithPadding(load_tokenizer(path))
    start = time.perf_counter()
    for _ in range(3):
        model_outputs(teacher, features, collate, args.batch)
    cache = (time.perf_counter() - start) / 3 / args.batch
    print(f"  teacher cache pass: {cache * 1000:.1f} ms/example = {cache * args.batch / plain:.2f} of a plain step per "
          f"batch, paid once (not per epoch)")


if __name__ == "__main__":
    main()
