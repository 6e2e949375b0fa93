"""`finetune` throughput vs a plain HF Trainer script on the same model, data, max length and seed.

Data: BioASQ yes/no (question + context) from the data dir, as a textcls folder. kinject batches by length with
dynamic padding; the plain script is measured twice: with `padding="max_length"` (run_glue's default) and with
dynamic padding in random order. Reports samples/s (train), the ratio to kinject, useful-token fraction (non-pad
tokens / all tokens processed) and dev accuracy. Rounds alternate the three to share the machine's noise.

Usage: KINJECT_DATA_DIR=../shared/data .venv/bin/python benchmarks/bench_finetune.py [--n 400] [--rounds 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINJECT_PROGRESS", "0")


def write_bioasq(data_dir: Path, folder: Path, n_train: int, n_dev: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, source, n in (("train", "train.tsv", n_train), ("dev", "dev.tsv", n_dev), ("test", "dev.tsv", n_dev)):
        with open(data_dir / "bioasq_yesno" / source, encoding="utf-8") as handle, \
                open(folder / f"{split}.jsonl", "w", encoding="utf-8") as out:
            rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
            rows = [r for r in rows if r and r[-1] in ("yes", "no")][:n]
            for row in rows:
                out.write(json.dumps({"text": row[1], "context": row[2], "label": row[-1]}) + "\n")
    return folder


def run_kinject(folder: Path, cache: Path, args) -> dict:
    from kinject import engine
    from kinject.spec import build_spec

    spec = build_spec({"task": {"name": "textcls", "path": str(folder), "text_pair_field": "context"},
                       "model": {"name": "minilm", "max_length": args.max_length},
                       "training": {"epochs": 1, "batch_size": args.batch_size, "learning_rate": 5e-5},
                       "seed": 0, "cache_dir": str(cache)})
    out = cache / "run"
    metrics = engine.execute(engine.prepare(spec), out)
    return {"samples_per_s": metrics["train"]["train_samples_per_second"],
            "useful": metrics["train"]["useful_token_fraction"], "dev_accuracy": metrics["dev"]["accuracy"]}


def run_plain(folder: Path, work: Path, args, pad_to_max: bool) -> dict:
    """What a user would write with transformers alone (run_glue style)."""
    import numpy as np
    from datasets import load_dataset
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments, default_data_collator, set_seed)

    from kinject.models import minilm_path
    from kinject.training import PaddingCounter

    set_seed(0)
    raw = load_dataset("json", data_files={s: str(folder / f"{s}.jsonl") for s in ("train", "dev")})
    labels = sorted(set(raw["train"]["label"]))
    tok = AutoTokenizer.from_pretrained(minilm_path())

    def encode(batch):
        enc = tok(batch["text"], batch["context"], truncation=True, max_length=args.max_length,
                  padding="max_length" if pad_to_max else False)
        enc["labels"] = [labels.index(x) for x in batch["label"]]
        return enc

    data = raw.map(encode, batched=True, remove_columns=["text", "context", "label"])
    model = AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=len(labels))
    collator = PaddingCounter(default_data_collator if pad_to_max else DataCollatorWithPadding(tok))
    targs = TrainingArguments(output_dir=str(work), num_train_epochs=1, per_device_train_batch_size=args.batch_size,
                              learning_rate=5e-5, seed=0, report_to=[], save_strategy="no", use_cpu=True,
                              disable_tqdm=True, warmup_ratio=0.1, weight_decay=0.01)
    trainer = Trainer(model=model, args=targs, train_dataset=data["train"], data_collator=collator)
    result = trainer.train()
    useful = collator.useful_fraction
    preds = trainer.predict(data["dev"]).predictions.argmax(-1)
    accuracy = float(np.mean(preds == np.array(data["dev"]["labels"])))
    return {"samples_per_s": result.metrics["train_samples_per_second"], "useful": useful, "dev_accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400, help="training examples")
    parser.add_argument("--dev", type=int, default=75)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    data_dir = Path(os.environ.get("KINJECT_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    results: dict[str, list[dict]] = {"kinject finetune": [], "plain Trainer, pad to max_length": [],
                                      "plain Trainer, dynamic padding": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_bioasq(data_dir, Path(tmp) / "bioasq", args.n, args.dev)
        for r in range(args.rounds):
            results["kinject finetune"].append(run_kinject(folder, Path(tmp) / f"cache{r}", args))
            results["plain Trainer, pad to max_length"].append(run_plain(folder, Path(tmp) / f"p{r}", args, True))
            results["plain Trainer, dynamic padding"].append(run_plain(folder, Path(tmp) / f"d{r}", args, False))
    base = statistics.median(r["samples_per_s"] for r in results["kinject finetune"])
    print(f"minilm, BioASQ, {args.n} train examples, 1 epoch, batch {args.batch_size}, max_length {args.max_length}, "
          f"{args.rounds} alternating rounds (median)")
    print(f"{'setup':36} {'samples/s':>10} {'kinject/this':>13} {'useful tok':>11} {'dev acc':>8}")
    for name, rows in results.items():
        sps = statistics.median(r["samples_per_s"] for r in rows)
        print(f"{name:36} {sps:10.2f} {base / sps:13.2f} {statistics.median(r['useful'] for r in rows):11.3f} "
              f"{statistics.median(r['dev_accuracy'] for r in rows):8.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
