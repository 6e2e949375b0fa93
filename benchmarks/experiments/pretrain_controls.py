"""Domain pretraining, fair comparisons (issue #26; docs/pretrain.md "Fair comparisons"): the exact `kinject run`
commands (printed; `--run` executes them one after another).

Every run shares the MLM budget (BUDGET: 300 steps of 16 x 128 tokens at lr 1e-4 after a 200-step head fit, the
CPU budget of docs/results.md), the corpus (the data dir's train/dev text), the held-out texts and reference, the
task and its fine-tuning seeds; each comparison changes one setting against `continual-domain`:

1. out-of-domain control: `strategy.mlm_corpus=general` (the same steps on Python's documentation, built offline);
   plus the word-shuffled in-domain control `strategy.mlm_corpus=shuffled`;
2. from scratch at minilm's architecture and the same budget: `strategy.init=scratch strategy.vocab=keep`
   (the same tokenizer and parameter count), and with the in-domain vocabulary (`vocab=train`, the paper's);
3. token-level masking: `strategy.mask_unit=token` (Gu et al. Table 7's axis).

Then `kinject compare` pairs every pretrained model with the domain run on the test split (each run's metrics.json
also compares it with fine-tuning minilm). On a GPU, raise the budget in `grid` (every run alike).

Usage:
  python -m benchmarks.experiments.pretrain_controls [--run] [--out runs/pretrain-controls]
  python -m benchmarks.experiments.pretrain_controls --pilot --run    # 20 MLM steps, 64 examples: a smoke run
Environment: HF_HUB_OFFLINE=1, KINJECT_DATA_DIR (../shared/data), KINJECT_CACHE_DIR (shared by every command).
"""

from __future__ import annotations

TASK = "ncbi-disease"
SEEDS = ["--seed", "42", "--repeats", "3"]
RUNS = {"continual-domain": [],
        "continual-general": ["--set", "strategy.mlm_corpus=general"],
        "continual-shuffled": ["--set", "strategy.mlm_corpus=shuffled"],
        "scratch-keep": ["--set", "strategy.init=scratch", "--set", "strategy.vocab=keep"],
        "scratch-train": ["--set", "strategy.init=scratch"],
        "continual-token": ["--set", "strategy.mask_unit=token"]}


def budget(steps: int, batch: int, head_steps: int) -> list[str]:
    return ["--set", "strategy.max_length=128", "--set", f"strategy.mlm_steps={steps}",
            "--set", f"strategy.mlm_batch_size={batch}", "--set", "strategy.mlm_learning_rate=1e-4",
            "--set", f"strategy.head_steps={head_steps}", "--set", f"strategy.head_batch_size={batch}"]


def grid(out: str, pilot: bool) -> list[list[str]]:
    common = ["--model", "minilm", "--task", TASK]
    common += (budget(20, 8, 10) + ["--limit", "64", "--set", "training.max_steps=20"]) if pilot else \
        (budget(300, 16, 200) + SEEDS)
    commands = [["kinject", "run", "pretrain", *common, *extra, "-o", f"{out}/{name}"] for name, extra in RUNS.items()]
    commands.append(["kinject", "compare", *(f"{out}/{name}" for name in RUNS)])
    return commands


if __name__ == "__main__":
    from benchmarks.experiments.runner import main

    main(__doc__, grid, "runs/pretrain-controls")
