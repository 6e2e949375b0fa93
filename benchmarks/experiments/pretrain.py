"""Domain pretraining "does it work?" experiment: the exact `kinject run` commands (printed; `--run` executes).

1. Vocabulary (cheap, run in full by the pilot): an uncased WordPiece vocabulary of 30,522 entries from the
   in-domain corpus (train/dev text of every task in the data dir, test text and evaluated CAPR passages held
   out), compared with minilm's (BERT uncased) on Gu et al.'s Table 1 terms and on the held-out corpus text.
2. Continual MLM of minilm on that corpus (positive control): held-out perplexity of the output vs minilm
   with a fitted MLM head (minilm ships none; 1,000 head steps on the frozen encoder, so the head is close to
   converged and the drop is the encoder's), on the same masked words.
3. Fine-tuning the continual model vs minilm on NCBI-disease, BC5-chem (NER) and HoC, 3 paired seeds each:
   `kinject run pretrain --task T --repeats 3` reuses the pretraining of step 2 from the stage cache (the
   corpus already holds every test text out, so no pretraining stage depends on the task; `mlm_seed` is fixed)
   and adds the minilm baseline, the fine-tuned pretrained model and their paired bootstrap comparison.
4. A small encoder (4 layers, 256 wide) from scratch at the same compute (steps, batch, length, shape,
   vocabulary size) with the in-domain vocabulary vs minilm's, on NCBI-disease, 3 paired seeds; the two runs
   are then compared with `kinject compare`.

Fine-tuning budgets: NER as docs/results-history.md's baselines (300 steps, lr 1e-4: entity F1 0.74-0.82, far above
the all-O majority's 0); HoC 2 epochs (1,514 steps; at 300 steps the baseline predicted no hallmark, F1 0).

What was run on the 2-core CPU (`--cpu`; docs/results.md "Domain pretraining: does it work?"), smaller still
(the first CPU plan, 1,000 MLM steps of 32 plus 1,500 head steps for the control, measured at ~4 s per head step
of 32 on one core: ~3.5 h, more than a session had):
- the vocabulary step as above;
- continual MLM of minilm for 300 steps of 16 x 128 tokens (0.6M tokens, ~7% of an epoch) after a 200-step head
  fit, and a head-only control (the head fitted for 500 steps on the frozen encoder, the same number of steps,
  1 MLM step after it) so the perplexity drop can be split into head and encoder;
- the continual model vs minilm fine-tuned at each task's recommended settings, seeds 42-44: NCBI-disease through
  `kinject run pretrain --task` (which pretrained its own copy of the continual stages), BC5-disease and HoC by
  fine-tuning the continual run's `model/` directly (`kinject run finetune --model DIR`: the very model whose
  perplexity is reported);
- from scratch at the same compute (a 2-layer, 128-wide encoder, 1,000 steps of 32 x 128, lr 6e-4; ~8 min of one
  core), the in-domain vocabulary vs minilm's, each pretrained with 3 seeds (`mlm_seed` 0-2: initialisation,
  masking and order) and each pretrained model fine-tuned on NCBI-disease with seeds 42-44.
bfloat16 autocast where the CPU has it (the default).

Usage:
  python -m benchmarks.experiments.pretrain --cpu [--run]   # the CPU experiment above
  python -m benchmarks.experiments.pretrain                 # print every command
  python -m benchmarks.experiments.pretrain --run           # run them one after another
  python -m benchmarks.experiments.pretrain --pilot --run   # the pilot: vocabulary in full + a short continual MLM
Environment: HF_HUB_OFFLINE=1, KINJECT_DATA_DIR (../shared/data), KINJECT_CACHE_DIR (shared by every command);
the pilot was run with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import os
import sys

SEEDS = 3
CONTINUAL = ["--model", "minilm", "--set", "strategy.max_length=128", "--set", "strategy.mlm_steps=2000",
             "--set", "strategy.mlm_batch_size=32", "--set", "strategy.mlm_learning_rate=1e-4",
             "--set", "strategy.head_steps=1000"]
SCRATCH = ["--model", "minilm", "--set", "strategy.init=scratch", "--set", "strategy.max_length=128",
           "--set", "strategy.scratch.layers=4", "--set", "strategy.scratch.hidden=256",
           "--set", "strategy.scratch.heads=4", "--set", "strategy.mlm_steps=2000",
           "--set", "strategy.mlm_batch_size=64", "--set", "strategy.mlm_learning_rate=6e-4",
           "--set", "strategy.head_steps=1000"]
FINETUNE = {"ncbi-disease": ["--set", "training.max_steps=300"], "bc5chem": ["--set", "training.max_steps=300"],
            "hoc": ["--set", "training.epochs=2"]}
COMMON = ["--set", "training.learning_rate=1e-4", "--set", "training.eval_splits=[test]"]


def cpu_continual(mlm_steps: int, head_steps: int) -> list[str]:
    return ["--model", "minilm", "--set", "strategy.max_length=128", "--set", f"strategy.mlm_steps={mlm_steps}",
            "--set", "strategy.mlm_batch_size=16", "--set", "strategy.mlm_learning_rate=1e-4",
            "--set", f"strategy.head_steps={head_steps}", "--set", "strategy.head_batch_size=16"]


CPU_CONTINUAL = cpu_continual(300, 200)
CPU_HEAD_ONLY = cpu_continual(1, 500)  # the same 500 steps, all of them on the head
CPU_TASKS = ("ncbi-disease",)  # through `kinject run pretrain --task`
CPU_FINETUNE_TASKS = ("bc5disease", "hoc")  # the continual run's model/, fine-tuned directly
CPU_SCRATCH = ["--model", "minilm", "--set", "strategy.init=scratch", "--set", "strategy.max_length=128",
               "--set", "strategy.scratch.layers=2", "--set", "strategy.scratch.hidden=128",
               "--set", "strategy.scratch.heads=2", "--set", "strategy.mlm_steps=1000",
               "--set", "strategy.mlm_batch_size=32", "--set", "strategy.mlm_learning_rate=6e-4"]
CPU_SCRATCH_SEEDS = (0, 1, 2)  # mlm_seed: the pretraining replicates
SEEDED = ["--seed", "42", "--repeats", str(SEEDS), "--set", "training.bf16=true"]


def cpu(out: str) -> list[list[str]]:
    """The smaller experiment run on the 2-core CPU (see the module docstring)."""
    vocab = ["kinject", "run", "pretrain", "--model", "minilm", "--set", "strategy.vocab=train",
             "--set", "strategy.until=vocab", "-o", f"{out}/vocab"]
    compare = ["kinject", "vocab", "compare", "--tokenizer", "minilm", "--tokenizer", f"{out}/vocab/tokenizer",
               "--corpus", f"{out}/vocab/heldout.jsonl", "--csv", f"{out}/vocab/table1.csv",
               "--png", f"{out}/vocab/table1.png"]
    commands = [vocab, compare, ["kinject", "run", "pretrain", *CPU_CONTINUAL, "-o", f"{out}/continual"],
                ["kinject", "run", "pretrain", *CPU_HEAD_ONLY, "-o", f"{out}/head-only"]]
    for task in CPU_TASKS:
        commands.append(["kinject", "run", "pretrain", "--task", task, *CPU_CONTINUAL, "--seed", "42",
                         "--repeats", str(SEEDS), "-o", f"{out}/continual-{task}"])
        commands.append(["kinject", "run", "finetune", "--task", task, "--model", "minilm", "--seed", "42",
                         "--repeats", str(SEEDS), "-o", f"{out}/finetune-{task}"])  # the same baseline stages
        commands.append(["kinject", "compare", f"{out}/finetune-{task}", f"{out}/continual-{task}"])
    for task in CPU_FINETUNE_TASKS:
        for label, model in (("finetune", "minilm"), ("continual", f"{out}/continual/model")):
            commands.append(["kinject", "run", "finetune", "--task", task, "--model", model, *SEEDED,
                             "-o", f"{out}/{label}-{task}"])
        commands.append(["kinject", "compare", f"{out}/finetune-{task}", f"{out}/continual-{task}"])
    return commands + scratch_cpu(out)


def scratch_cpu(out: str) -> list[list[str]]:
    """From scratch, in-domain vs minilm's vocabulary at the same compute: 3 pretraining seeds x 3 fine-tuning seeds
    on NCBI-disease, compared per pretraining seed (run dirs ``scratch-<vocab>[-m<seed>]``)."""
    commands = []
    for mlm_seed in CPU_SCRATCH_SEEDS:
        suffix = f"-m{mlm_seed}" if mlm_seed else ""
        for vocabulary in ("keep", "train"):
            run = f"{out}/scratch-{vocabulary}{suffix}"
            commands.append(["kinject", "run", "pretrain", *CPU_SCRATCH, "--set", f"strategy.vocab={vocabulary}",
                             "--set", f"strategy.mlm_seed={mlm_seed}", "-o", run])
            commands.append(["kinject", "run", "finetune", "--task", "ncbi-disease", "--model", f"{run}/model",
                             *SEEDED, "-o", f"{run}-ncbi-disease"])
        commands.append(["kinject", "compare", f"{out}/scratch-keep{suffix}-ncbi-disease",
                         f"{out}/scratch-train{suffix}-ncbi-disease"])
    return commands


def grid(out: str, pilot: bool) -> list[list[str]]:
    if os.environ.get("KINJECT_EXPERIMENT") == "cpu":
        return cpu(out)
    vocab = ["kinject", "run", "pretrain", "--model", "minilm", "--set", "strategy.vocab=train",
             "--set", "strategy.until=vocab", "-o", f"{out}/vocab"]
    compare = ["kinject", "vocab", "compare", "--tokenizer", "minilm", "--tokenizer", f"{out}/vocab/tokenizer",
               "--corpus", f"{out}/vocab/heldout.jsonl", "--csv", f"{out}/vocab/table1.csv",
               "--png", f"{out}/vocab/table1.png"]
    if pilot:
        short = ["--model", "minilm", "--set", "strategy.max_length=128", "--set", "strategy.mlm_steps=100",
                 "--set", "strategy.mlm_batch_size=16", "--set", "strategy.mlm_learning_rate=1e-4",
                 "--set", "strategy.head_steps=50", "--set", "strategy.eval_max_texts=200"]
        return [vocab, compare, ["kinject", "run", "pretrain", *short, "-o", f"{out}/pilot-continual"]]
    commands = [vocab, compare, ["kinject", "run", "pretrain", *CONTINUAL, "-o", f"{out}/continual"]]
    for task, budget in FINETUNE.items():
        commands.append(["kinject", "run", "pretrain", "--task", task, *CONTINUAL, *budget, *COMMON,
                         "--repeats", str(SEEDS), "-o", f"{out}/continual-{task}"])
    for vocabulary in ("keep", "train"):
        commands.append(["kinject", "run", "pretrain", "--task", "ncbi-disease", *SCRATCH,
                         "--set", f"strategy.vocab={vocabulary}", *FINETUNE["ncbi-disease"], *COMMON,
                         "--repeats", str(SEEDS), "-o", f"{out}/scratch-{vocabulary}-ncbi-disease"])
    commands.append(["kinject", "compare", f"{out}/scratch-keep-ncbi-disease", f"{out}/scratch-train-ncbi-disease"])
    return commands


if __name__ == "__main__":
    from benchmarks.experiments.runner import main

    if "--cpu" in sys.argv:
        sys.argv.remove("--cpu")
        os.environ["KINJECT_EXPERIMENT"] = "cpu"
    main(__doc__, grid, "runs/pretrain-exp")
