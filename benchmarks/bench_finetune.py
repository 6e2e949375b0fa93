"""`finetune` vs a plain HF Trainer script, where padding matters: same model, features, length, seed.

Tasks with varied lengths at their real max length: NCBI-disease (sentences, token classification) and CAPR
(query + passage pairs). The plain script gets exactly the features kinject trains on (the task's own
featurisation) and is run twice: padded to max_length (run_glue's default) and with dynamic padding in random
order (the task's own collator). kinject is a whole `kinject run finetune` through the engine (length-bucketed
batches, dynamic padding). Reports training samples/s, the ratio kinject/plain, the useful-token fraction and
the dev metric. Rounds alternate the setups so they share the machine's noise.

Evaluation: `kinject.training.predict` (sorted by length, dynamic padding) vs `Trainer.predict` with dynamic
padding in the data's order, on the same CAPR dev pairs and model: pairs/s and that the logits agree.

Usage: KINJECT_DATA_DIR=../shared/data .venv/bin/python -m benchmarks.bench_finetune [--n 300] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINJECT_PROGRESS", "0")

TASKS = {"ncbi-disease": {}, "capr": {"dataset": "medquad", "max_train_queries": 150, "max_eval_queries": 40}}


def task_and_env(name: str, args, cache: Path):
    from kinject import preparation
    from kinject.spec_reading import build_spec

    spec = build_spec({"task": {"name": name, **TASKS[name]}, "model": {"name": "minilm",
                                                                        "max_length": args.max_length},
                       "training": {"limit": args.n if name != "capr" else None}, "cache_dir": str(cache)})
    run = preparation.prepare(spec)
    return run.task, run.env


def run_kinject(name: str, args, cache: Path) -> dict:
    from kinject import engine, preparation
    from kinject.spec_reading import build_spec

    spec = build_spec({"task": {"name": name, **TASKS[name]},
                       "model": {"name": "minilm", "max_length": args.max_length},
                       "training": {"epochs": 1, "batch_size": args.batch_size, "learning_rate": 5e-5,
                                    "limit": args.n if name != "capr" else None, "eval_splits": ["dev"]},
                       "seed": 0, "cache_dir": str(cache)})
    run = preparation.prepare(spec)
    metrics = engine.execute(run, cache / "run")
    return {"samples_per_s": metrics["train"]["train_samples_per_second"],
            "useful": metrics["train"]["useful_token_fraction"], "dev": metrics["dev"][run.task.primary_metric()]}


def run_plain(name: str, args, work: Path, pad_to_max: bool) -> dict:
    """What a user writes with transformers alone, on the same features."""
    from transformers import Trainer, TrainingArguments, set_seed

    from kinject.training import build_task_model, minilm_path
    from kinject.training import PaddingCounter
    from kinject.training.batching import to_dataset

    task, env = task_and_env(name, args, work / "cache")
    from kinject.api import load_tokenizer

    tok = load_tokenizer(str(minilm_path()))
    features = task.featurize(tok, task.examples("train", env), args.max_length, env)
    dev_examples = task.examples("dev", env)
    dev = task.featurize(tok, dev_examples, args.max_length, env)
    collator = task.collator(tok)
    if pad_to_max:
        collator = PaddedToMax(collator, args.max_length, tok.pad_token_id)
    counter = PaddingCounter(collator)
    set_seed(0)
    model = build_task_model(minilm_path(), task.head(env), seed=0)
    targs = TrainingArguments(output_dir=str(work), num_train_epochs=1, per_device_train_batch_size=args.batch_size,
                              learning_rate=5e-5, seed=0, report_to=[], save_strategy="no", use_cpu=True,
                              disable_tqdm=True, warmup_ratio=0.1, weight_decay=0.01, logging_steps=10_000)
    trainer = Trainer(model=model, args=targs, train_dataset=to_dataset(features).remove_columns(["length"]),
                      data_collator=counter)
    result = trainer.train()
    useful = counter.useful_fraction
    logits = trainer.predict(to_dataset(dev).remove_columns(["length"])).predictions
    score = task.score("dev", dev_examples, dev, logits, env)[task.primary_metric()]
    return {"samples_per_s": result.metrics["train_samples_per_second"], "useful": useful, "dev": score}


class PaddedToMax:
    """The task's collator, then every tensor padded to max_length (run_glue's pad_to_max_length)."""

    def __init__(self, inner, max_length: int, pad_id: int):
        self.inner, self.max_length, self.pad_id = inner, max_length, pad_id

    def __call__(self, features):
        import torch.nn.functional as F

        batch = self.inner(features)
        for key, value in list(batch.items()):
            if value.dim() == 2 and value.shape[1] < self.max_length:
                fill = {"input_ids": self.pad_id, "labels": -100}.get(key, 0)
                batch[key] = F.pad(value, (0, self.max_length - value.shape[1]), value=fill)
        return batch


def bench_eval(args, work: Path) -> dict:
    import numpy as np
    from transformers import Trainer, TrainingArguments

    from kinject.training import build_task_model, minilm_path
    from kinject.api import load_tokenizer
    from kinject.training import predict
    from kinject.training.batching import to_dataset

    task, env = task_and_env("capr", args, work / "cache")
    tok = load_tokenizer(str(minilm_path()))
    features = task.featurize(tok, task.examples("dev", env), args.max_length, env)
    model = build_task_model(minilm_path(), task.head(env), seed=0).eval()
    collator = task.collator(tok)
    out = {}
    for r in range(args.rounds):
        start = time.perf_counter()
        ours = predict(model, features, collator, 64, work / "k")
        out.setdefault("kinject", []).append(len(features) / (time.perf_counter() - start))
        targs = TrainingArguments(output_dir=str(work / "p"), per_device_eval_batch_size=64, report_to=[],
                                  use_cpu=True, disable_tqdm=True)
        start = time.perf_counter()
        plain = Trainer(model=model, args=targs, data_collator=collator).predict(
            to_dataset(features).remove_columns(["length"])).predictions
        out.setdefault("plain", []).append(len(features) / (time.perf_counter() - start))
        out["max_abs_diff"] = float(np.abs(ours - plain).max())
    return {"pairs": len(features), **{k: statistics.median(v) if isinstance(v, list) else v for k, v in out.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300, help="training examples (NCBI; CAPR: 150 queries x 2)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    args = parser.parse_args()
    setups = ("kinject finetune", "plain Trainer, pad to max_length", "plain Trainer, dynamic padding")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.tasks:
            results: dict[str, list[dict]] = {s: [] for s in setups}
            for r in range(args.rounds):
                results[setups[0]].append(run_kinject(name, args, Path(tmp) / f"{name}-k{r}"))
                results[setups[1]].append(run_plain(name, args, Path(tmp) / f"{name}-p{r}", True))
                results[setups[2]].append(run_plain(name, args, Path(tmp) / f"{name}-d{r}", False))
            base = statistics.median(r["samples_per_s"] for r in results[setups[0]])
            print(f"\nminilm, {name}, 1 epoch, batch {args.batch_size}, max_length {args.max_length}, "
                  f"{args.rounds} alternating rounds (median)")
            print(f"{'setup':36} {'samples/s':>10} {'kinject/this':>13} {'useful tok':>11} {'dev':>8}")
            for setup, rows in results.items():
                sps = statistics.median(r["samples_per_s"] for r in rows)
                print(f"{setup:36} {sps:10.2f} {base / sps:13.2f} {statistics.median(r['useful'] for r in rows):11.3f}"
                      f" {statistics.median(r['dev'] for r in rows):8.3f}", flush=True)
        ev = bench_eval(args, Path(tmp) / "eval")
        print(f"\nevaluation, CAPR dev, {ev['pairs']} pairs, batch 64, max_length {args.max_length}: kinject "
              f"{ev['kinject']:.1f} pairs/s, Trainer.predict {ev['plain']:.1f} pairs/s, ratio "
              f"{ev['kinject'] / ev['plain']:.2f}; max |logit difference| {ev['max_abs_diff']:.2e}")


if __name__ == "__main__":
    main()
