"""`pretrain` speed and memory: MLM tokens/s against a plain HF Trainer + collator script, and the corpus
stage's peak memory (VmHWM) at two corpus sizes.

MLM: the same model (minilm), corpus, sequence length, batch size and steps. kinject = the `pretrain-pack`
stage's packing + the whole-word-masking collator + `train_mlm` (HF Trainer through kinject's training
arguments; the MLM head applied to the masked positions only), and the same with the model's full forward
(every position projected onto the vocabulary, as the plain script does). Plain = what run_mlm.py does: `datasets.map` tokenisation, `group_texts` into blocks,
`DataCollatorForLanguageModeling(mlm_probability=0.15)` (token masking; its whole-word option needs 100%
[MASK] in transformers 4.57), Trainer. Rounds alternate the two so they share the machine's noise; tokens/s
counts non-padding tokens over the Trainer's train_runtime.

Corpus: the `pretrain-corpus` stage body on a synthetic .txt corpus of unique lines at two sizes, each in a
fresh process; peak RSS (VmHWM) and MB/s.

Usage: KINJECT_DATA_DIR=../shared/data OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_pretrain
       [--steps 30] [--rounds 3] [--sizes 25,250] [--skip-mlm] [--skip-corpus]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("KINJECT_PROGRESS", "0")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def corpus_texts(n: int) -> list[str]:
    """In-domain text (HoC + PubMedQA train/dev through their readers) when the data dir has it."""
    from kinject.interfaces import Environment
    from kinject.knowledge.sources.corpus import CorpusSource
    from kinject.spec_reading import default_cache_dir, default_data_dir

    env = Environment(data_dir=default_data_dir(), cache_dir=default_cache_dir())
    source = CorpusSource(tasks=["hoc", "pubmedqa"])
    source.check(env)
    out = []
    for text in source.iter_texts(env):
        out.append(text)
        if len(out) >= n:
            break
    return out


def training_spec(args):
    from kinject.spec import TrainingSpec

    return TrainingSpec(epochs=1, max_steps=args.steps, learning_rate=1e-4, batch_size=args.batch_size,
                        group_by_length=False, logging_steps=10_000, save_steps=100_000)


def run_kinject(texts: list[str], args, work: Path, sparse: bool = True) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForMaskedLM

    from kinject.training import minilm_path
    from kinject.api import load_tokenizer
    from kinject.knowledge.masked_lm import train_mlm
    from kinject.knowledge.masking import WholeWordMaskCollator
    from kinject.knowledge.packing import pack_to_arrow

    tok = load_tokenizer(str(minilm_path()))
    start = time.perf_counter()
    pack_to_arrow(iter(texts), tok, args.max_length, work / "packed.arrow")
    prep = time.perf_counter() - start
    data = Dataset.from_file(str(work / "packed.arrow"))
    model = AutoModelForMaskedLM.from_pretrained(str(minilm_path()))
    stats = train_mlm(model, data, WholeWordMaskCollator(tok), training_spec(args), work / "ckpt", 0, "bench", False,
                      sparse=sparse)
    return {"tokens_per_s": stats["tokens_per_second"], "useful": stats["useful_token_fraction"],
            "loss": stats["train_loss"], "prep_s": prep}


def run_plain(texts: list[str], args, work: Path) -> dict:
    """run_mlm.py, in short."""
    from datasets import Dataset
    from transformers import (AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                              TrainingArguments, set_seed)

    from kinject.training import PaddingCounter, minilm_path

    tok = AutoTokenizer.from_pretrained(str(minilm_path()))
    start = time.perf_counter()
    raw = Dataset.from_dict({"text": texts})
    tokenized = raw.map(lambda b: tok(b["text"], return_special_tokens_mask=True), batched=True,
                        remove_columns=["text"])
    size = args.max_length

    def group_texts(batch):
        joined = {k: sum(batch[k], []) for k in batch}
        total = len(joined["input_ids"]) // size * size
        return {k: [v[i:i + size] for i in range(0, total, size)] for k, v in joined.items()}

    blocks = tokenized.map(group_texts, batched=True)
    prep = time.perf_counter() - start
    set_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(str(minilm_path()))
    counter = PaddingCounter(DataCollatorForLanguageModeling(tok, mlm_probability=0.15))
    targs = TrainingArguments(output_dir=str(work / "plain"), max_steps=args.steps, learning_rate=1e-4,
                              per_device_train_batch_size=args.batch_size, warmup_ratio=0.1, weight_decay=0.01,
                              seed=0, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
                              logging_steps=10_000, dataloader_num_workers=0)
    result = Trainer(model=model, args=targs, train_dataset=blocks, data_collator=counter).train()
    return {"tokens_per_s": counter.useful / result.metrics["train_runtime"], "useful": counter.useful_fraction,
            "loss": result.metrics["train_loss"], "prep_s": prep}


def bench_mlm(args) -> None:
    texts = corpus_texts(args.texts)
    print(f"MLM: minilm, {len(texts)} texts, length {args.max_length}, batch {args.batch_size}, {args.steps} steps, "
          f"{args.rounds} rounds, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}")
    runs = {"kinject": run_kinject, "plain": run_plain,
            "kinject, full forward": lambda t, a, w: run_kinject(t, a, w, sparse=False)}
    results: dict[str, list[dict]] = {name: [] for name in runs}
    for round_ in range(args.rounds):
        order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
        for name in order:
            with tempfile.TemporaryDirectory() as work:
                results[name].append(runs[name](texts, args, Path(work)))
            print(f"  round {round_} {name}: {results[name][-1]}")
    med = {n: statistics.median(r["tokens_per_s"] for r in rows) for n, rows in results.items()}
    print("| setup | tokens/s (median) | useful-token fraction | preprocessing s | train loss |")
    print("|---|---|---|---|---|")
    for name, rows in results.items():
        print(f"| {name} | {med[name]:.0f} | {statistics.median(r['useful'] for r in rows):.3f} | "
              f"{statistics.median(r['prep_s'] for r in rows):.2f} | {statistics.median(r['loss'] for r in rows):.3f} |")
    per_round = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(results["kinject"], results["plain"])]
    print(f"ratio kinject/plain: {med['kinject'] / med['plain']:.3f} (per round: "
          + ", ".join(f"{r:.3f}" for r in per_round) + ")")


# -- corpus memory ------------------------------------------------------------------------------ #
def write_synthetic(path: Path, megabytes: int) -> int:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)] + "gene protein cell tumor patients dose lymphoma insulin".split()
    lines = 0
    with open(path, "w", encoding="utf-8") as handle:
        while handle.tell() < megabytes * 1_000_000:
            handle.write(" ".join(rng.choices(words, k=30)) + f" line{lines}\n")
            lines += 1
    return lines


def corpus_child(path: str, work: str) -> None:
    """Run the pretrain-corpus stage body on one file; print peak RSS and time as JSON."""
    from kinject.interfaces import Environment, StageContext
    from kinject.plugins.pretrain.corpus import corpus_body
    from kinject.plugins.pretrain.corpus import CorpusStageConfig
    from kinject.refs import SourceRef
    from kinject.knowledge.sources.corpus import CorpusSource

    env = Environment(data_dir=Path(work), cache_dir=Path(work) / "cache")
    source = CorpusSource(paths=[path])
    start = time.perf_counter()
    source.check(env)
    checked = time.perf_counter() - start
    config = CorpusStageConfig(source=SourceRef.of(source, env), heldout_fraction=0.01, heldout_max_texts=2000)
    out = Path(work) / "out"
    out.mkdir()
    ctx = StageContext(name="pretrain-corpus", key="bench", out=out, work=Path(work), inputs={}, cache_dir=env.cache_dir)
    corpus_body(config, ctx)
    seconds = time.perf_counter() - start
    stats = json.loads((out / "corpus.json").read_text())
    # VmHWM, not ru_maxrss: a child's ru_maxrss keeps the peak of the parent it was forked from
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_mb": int(hwm.split()[1]) / 1024, "seconds": seconds,
                      "check_seconds": checked, "texts": stats["train_texts"] + stats["heldout_texts"]}))


def bench_corpus(args) -> None:
    print("| corpus | lines | check + build s | MB/s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for megabytes in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / "corpus.txt"
            lines = write_synthetic(path, megabytes)
            result = subprocess.run([sys.executable, "-m", "benchmarks.bench_pretrain", "--corpus-child", str(path), "--work", work],
                                    capture_output=True, text=True, check=True)
            info = json.loads(result.stdout.strip().splitlines()[-1])
            assert info["texts"] == lines, info
            print(f"| {megabytes} MB synthetic, unique lines | {lines} | {info['seconds']:.1f} | "
                  f"{megabytes / info['seconds']:.1f} | {info['peak_rss_mb']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--texts", type=int, default=3000)
    parser.add_argument("--sizes", default="25,250", help="Corpus sizes in MB")
    parser.add_argument("--skip-mlm", action="store_true")
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--corpus-child", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.corpus_child:
        corpus_child(args.corpus_child, args.work)
        return
    if not args.skip_corpus:
        bench_corpus(args)
    if not args.skip_mlm:
        bench_mlm(args)


if __name__ == "__main__":
    main()
