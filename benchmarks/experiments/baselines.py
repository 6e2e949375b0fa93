"""Baselines at the tasks' recommended settings: `kinject run finetune` per task (printed; `--run` executes them).

Every task at its recommended settings (docs/tasks.md; `kinject info TASK`), minilm, bfloat16 autocast where the
CPU has it (the default), full train/dev/test sets. Seeds 42-44 where one run takes under ~10 minutes on one
core, else seed 42 only (ChemProt and DDI: ~30 min each; BC2GM and JNLPBA, ~25-35 min, are listed with `--all`).
The NCBI-disease, HoC, BioASQ and PubMedQA baselines are the same stages (same keys) as the `finetune` runs the
MoP, pretraining and STILT experiments train (benchmarks/experiments/{mop,pretrain}.py, `kinject stilt matrix`),
so docs/results.md reads them from those experiments' run folders.

Usage:
  python -m benchmarks.experiments.baselines [--run] [--out DIR]
Environment: HF_HUB_OFFLINE=1, KINJECT_DATA_DIR (../shared/data), KINJECT_CACHE_DIR, OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import os
import sys

THREE_SEEDS = ("bc5disease", "bc5chem")
ONE_SEED = ("chemprot", "ddi")
LONG = ("bc2gm", "jnlpba")


def grid(out: str, pilot: bool) -> list[list[str]]:
    tasks = [(t, 3) for t in THREE_SEEDS] + [(t, 1) for t in ONE_SEED]
    if os.environ.get("KINJECT_EXPERIMENT") == "all":
        tasks += [(t, 1) for t in LONG]
    if pilot:
        tasks = [("bc5disease", 1)]
    return [["kinject", "run", "finetune", "--task", task, "--model", "minilm", "--seed", "42",
             *(["--repeats", str(seeds)] if seeds > 1 else []), *(["--limit", "200"] if pilot else []),
             "-o", f"{out}/{task}"] for task, seeds in tasks]


if __name__ == "__main__":
    if "--all" in sys.argv:
        sys.argv.remove("--all")
        os.environ["KINJECT_EXPERIMENT"] = "all"
    from benchmarks.experiments.runner import main

    main(__doc__, grid, "runs/baselines")
