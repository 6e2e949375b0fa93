"""MoP "does it work?" experiment: the exact `kinject run` commands (printed; `--run` executes them).

minilm + the embedded HPO graph (all 535,400 triples, 36,157 entities, 3 relations), K in {4, 8, 20}
(softmax mixture, joint fine-tuning as in the paper) against `finetune` on NCBI-disease, BC5-disease, HoC and
CAPR (MedQuAD, trained), seeds 42-44 (`--repeats 3`), plus the paper's shuffle control at K=20 (R = 0.5, 1;
R = 0 is the K=20 row), and on NCBI-disease and CAPR a K=20 run whose adapters are not trained at all
(`strategy.adapter_max_steps=0`: what the fusion's extra parameters give without knowledge). Paired: every MoP
run also trains and scores the `finetune` baseline of its seed (the `finetune` strategy's own stages and cache
keys, so the baseline is trained once per task and seed), and its
metrics.json holds `comparison` (paired bootstrap over the test examples); `kinject compare` pools the seeds.

The knowledge side is keyed without task or seed: the adapters of one (K, shuffle) are trained once (1 epoch
over each part's triples, batch 64, lr 1e-3, 10% of each part held out) and reused by every task and seed.

Budgets (the baselines' budgets from docs/results-history.md, same for `finetune` and MoP): NER 300 steps of 16 at
lr 1e-4, max_length 128, test split only; HoC 1,500 steps (300 leave every sigmoid below 0.5: F1 0); CAPR
500 training queries x 2 pairs, 2 epochs, 100 test queries x 20 candidates.

What was run on the 2-core CPU (`--cpu`, docs/results.md "MoP: does it work?"): NCBI-disease at the task's
recommended settings (`kinject info ncbi-disease`), bfloat16 autocast, seeds 42-44, K=4 over a 100,000-triple
sample of the HPO graph (adapters 1 epoch, lr 1e-3), against `finetune`, with two controls paired on the same
seeds: the same fusion with untrained adapters (`adapter_max_steps=0`: capacity without knowledge) and the
paper's shuffle control at R=1 (the same adapter training on random parts; random parts keep 25,073 of the
100,000 triples vs METIS's 69,500, so R=1 also injects 2.8x fewer facts); then the same K=4 adapters (trained
once, task-free keys) fused on BC5-disease at its recommended settings, seeds 42-44, against `finetune`; and on
CAPR (MedQuAD, trained; [CLS] pooling, the pooling the adapters were trained with, so they are reused).

What was run on the lent GPU (`--gpu`, docs/results.md "MoP on a GPU"): the full graph, K in {4, 8, 20},
NCBI-disease, BC5-disease and HoC at their recommended settings, the K=20 shuffle and untrained controls.

Usage:
  python -m benchmarks.experiments.mop --cpu [--run]    # the CPU experiment above
  python -m benchmarks.experiments.mop --gpu [--run]    # the GPU experiment above
  python -m benchmarks.experiments.mop --names [--run]  # name-scoring adapters on the is-a graph (CPU)
  python -m benchmarks.experiments.mop                  # print the grid's commands
  python -m benchmarks.experiments.mop --run            # run them one after another
  python -m benchmarks.experiments.mop --compare        # print the `kinject compare` commands of the grid
  python -m benchmarks.experiments.mop --pilot --run    # the pilot cell (< 10 CPU-min, one core)
Environment: HF_HUB_OFFLINE=1, KINJECT_DATA_DIR (../shared/data), KINJECT_CACHE_DIR (shared by every command),
OMP_NUM_THREADS=1 for one job per core.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

PARTS = (4, 8, 20)
SHUFFLES = (0.5, 1.0)  # at K = 20
NER = ["--set", "training.max_steps=300", "--set", "training.learning_rate=1e-4", "--set", "training.eval_splits=[test]"]
TASKS = {
    "ncbi-disease": ["--task", "ncbi-disease", *NER],
    "bc5disease": ["--task", "bc5disease", *NER],
    "hoc": ["--task", "hoc", "--set", "training.max_steps=1500", "--set", "training.learning_rate=1e-4",
            "--set", "training.eval_splits=[test]"],
    "capr": ["--task", "capr", "--set", "task.dataset=medquad", "--set", "task.setting=trained",
             "--set", "task.max_train_queries=500", "--set", "task.max_eval_queries=100", "--set", "training.epochs=2",
             "--set", "training.learning_rate=1e-4", "--set", "training.eval_splits=[test]"],
}
# 1 epoch per part at lr 1e-3: on a K=20 HPO part (7,885 training triples, 1,860 classes) the reference's 1e-4
# stays near chance after an epoch (loss 7.37 vs ln 1860 = 7.53; held-out acc@10 0.081), 1e-3 learns (6.16; 0.158)
# (these runs predate the name-scoring entity head: they trained kinject's trainable linear head, not the
# reference's frozen random one, `entity_head=frozen-random`)
KNOWLEDGE = ["--set", "strategy.adapter_epochs=1", "--set", "strategy.adapter_batch_size=64",
             "--set", "strategy.adapter_learning_rate=1e-3", "--set", "strategy.entity_head=linear"]
# name-scoring adapters (the default head) on the HPO is-a hierarchy, 3 epochs: the adapters that learn facts
# (part 0: held-out parent accuracy@1 0.289 vs 0.012 for the tail prior; benchmarks/experiments/mop_heads.py)
IS_A = ["--set", "strategy.partitions=4", "--set", "strategy.adapter_epochs=3", "--set",
        "strategy.adapter_batch_size=64", "--set", "strategy.adapter_learning_rate=1e-3",
        "--set", "sources.0.name=hpo", "--set", "sources.0.include=[isa]", "--set", "strategy.baseline=false"]


def name(task: str, k: int, shuffle: float) -> str:
    return f"mop-{task}-k{k}" + (f"-r{shuffle:g}" if shuffle else "")


def command(task: str, k: int, shuffle: float, out: str, seed: int = 42, repeats: int = 3,
            extra: tuple[str, ...] = ()) -> list[str]:
    return ["kinject", "run", "mop", "--model", "minilm", "--seed", str(seed), "--repeats", str(repeats),
            *TASKS[task], *KNOWLEDGE, "--set", f"strategy.partitions={k}", "--set", f"strategy.shuffle={shuffle}",
            *extra, "-o", f"{out}/{name(task, k, shuffle)}"]


def baseline(task: str, out: str) -> list[str]:
    """The `finetune` run of the same budget: the same stage keys as the baseline inside every MoP run (trained
    once), and a run directory with predictions for `kinject compare`."""
    return ["kinject", "run", "finetune", "--model", "minilm", "--seed", "42", "--repeats", "3", *TASKS[task],
            "-o", f"{out}/finetune-{task}"]


CONTROL_TASKS = ("ncbi-disease", "capr")  # K=20 with untrained adapters: what fusion capacity alone gives


def control(task: str, out: str) -> list[str]:
    cmd = command(task, 20, 0.0, out, extra=("--set", "strategy.adapter_max_steps=0"))
    cmd[-1] += "-untrained"
    return cmd


def grid(out: str) -> list[list[str]]:
    cells = [(task, k, 0.0) for task in TASKS for k in PARTS] + [(task, 20, r) for task in TASKS for r in SHUFFLES]
    return [baseline(task, out) for task in TASKS] + [command(task, k, r, out) for task, k, r in cells] + \
        [control(task, out) for task in CONTROL_TASKS]


def compare_commands(out: str) -> list[list[str]]:
    """Pooled over the 3 seeds: every K (and shuffle) against `finetune`, paired on the test examples."""
    rows = []
    for task in TASKS:
        runs = [f"{out}/{name(task, k, 0.0)}" for k in PARTS] + [f"{out}/{name(task, 20, r)}" for r in SHUFFLES]
        runs += [f"{out}/{name(task, 20, 0.0)}-untrained"] if task in CONTROL_TASKS else []
        rows.append(["kinject", "compare", f"{out}/finetune-{task}", *runs, "--baseline", f"{out}/finetune-{task}",
                     "--json"])
    return rows


def pilot(out: str) -> list[list[str]]:
    """One NCBI-disease cell, small: 1,000 sentences per split, 100 steps; K=4 over a 20,000-triple HPO sample."""
    return [command("ncbi-disease", 4, 0.0, f"{out}/pilot", repeats=1, extra=(
        "--limit", "1000", "--set", "training.max_steps=100", "--set", "strategy.kg_max_triples=20000",
        "--set", "training.eval_splits=null"))]


KG_SAMPLE = ["--set", "strategy.kg_max_triples=100000"]


CAPR_CPU = ["--task", "capr", "--set", "task.dataset=medquad", "--set", "task.setting=trained",
            "--set", "task.max_train_queries=500", "--set", "training.epochs=2", "--set", "training.learning_rate=1e-4",
            "--set", "training.head_learning_rate=0.01", "--set", "training.eval_splits=[test]", "--model", "minilm",
            "--set", "model.pooling=cls", "--set", "training.bf16=true"]
NCBI_CPU = ["--task", "ncbi-disease", "--model", "minilm", "--set", "training.bf16=true"]


def names(out: str) -> list[list[str]]:
    """Name-scoring adapters on the is-a graph (K=4, METIS keeps 23,033 of its 23,392 triples) fused on CAPR and
    NCBI-disease against `finetune` of the same budget (run separately: `baseline=false`); on CAPR also over
    untrained adapters, over adapters trained on random parts (the shuffle control, R=1), and over the 100k-sample
    adapters of `--cpu` retrained with the name head. Seeds 42-46 for CAPR's plain, MoP and untrained arms (the
    run used 42-44 with `--repeats 3`, then 45 and 46 one by one into seed-45/, seed-46/), 42-44 otherwise."""
    commands = []
    for task, args in (("capr", CAPR_CPU), ("ncbi-disease", NCBI_CPU)):
        seeds = ["--seed", "42", "--repeats", "5" if task == "capr" else "3"]
        commands += [["kinject", "run", "finetune", *args, *seeds, "-o", f"{out}/finetune-{task}"],
                     ["kinject", "run", "mop", *args, *IS_A, *seeds, "-o", f"{out}/mop-{task}-isa-k4"]]
        runs = [f"{out}/mop-{task}-isa-k4"]
        if task == "capr":  # controls: untrained adapters (capacity without knowledge); random parts (R=1)
            commands.append(["kinject", "run", "mop", *args, *IS_A, "--set", "strategy.adapter_max_steps=0", *seeds,
                             "-o", f"{out}/mop-capr-isa-k4-untrained"])
            three = ["--seed", "42", "--repeats", "3"]
            commands += [["kinject", "run", "mop", *args, *IS_A, "--set", "strategy.shuffle=1.0", *three,
                          "-o", f"{out}/mop-capr-isa-k4-r1"],
                         ["kinject", "run", "mop", *args, *KNOWLEDGE[:-1], "strategy.entity_head=names", *KG_SAMPLE,
                          "--set", "strategy.partitions=4", "--set", "strategy.baseline=false", *three,
                          "-o", f"{out}/mop-capr-k4-names"]]
            runs += [f"{out}/mop-capr-isa-k4-untrained", f"{out}/mop-capr-isa-k4-r1", f"{out}/mop-capr-k4-names"]
        commands.append(["kinject", "compare", f"{out}/finetune-{task}", *runs])
    return commands


def cpu(out: str) -> list[list[str]]:
    """K=4 over 100k HPO triples vs finetune on NCBI-disease (with the untrained-adapter and R=1 shuffle controls)
    and on BC5-disease, 3 seeds each."""
    commands = []
    for task, controls in (("ncbi-disease", True), ("bc5disease", False)):
        base = ["--model", "minilm", "--seed", "42", "--repeats", "3", "--task", task, "--set", "training.bf16=true"]
        mop = ["kinject", "run", "mop", *base, *KNOWLEDGE, *KG_SAMPLE, "--set", "strategy.partitions=4"]
        runs = [f"{out}/mop-{task}-k4"] + ([f"{out}/mop-{task}-k4-untrained", f"{out}/mop-{task}-k4-r1"]
                                           if controls else [])
        commands += [["kinject", "run", "finetune", *base, "-o", f"{out}/finetune-{task}"],
                     [*mop, "--set", "strategy.shuffle=0.0", "-o", runs[0]]]
        if controls:
            commands += [[*mop, "--set", "strategy.shuffle=0.0", "--set", "strategy.adapter_max_steps=0",
                          "-o", runs[1]],
                         [*mop, "--set", "strategy.shuffle=1.0", "-o", runs[2]]]
        commands.append(["kinject", "compare", f"{out}/finetune-{task}", *runs])
    capr = [*CAPR_CPU, "--seed", "42", "--repeats", "3"]
    commands += [["kinject", "run", "finetune", *capr, "-o", f"{out}/finetune-capr"],
                 ["kinject", "run", "mop", *capr, *KNOWLEDGE, *KG_SAMPLE, "--set", "strategy.partitions=4",
                  "--set", "strategy.shuffle=0.0", "-o", f"{out}/mop-capr-k4"],
                 ["kinject", "compare", f"{out}/finetune-capr", f"{out}/mop-capr-k4"]]
    return commands


def gpu(out: str) -> list[list[str]]:
    """What ran on the lent H100 (docs/results.md "MoP on a GPU"): the full HPO graph, K in {4, 8, 20} on
    NCBI-disease, BC5-disease and HoC at their recommended settings, the shuffle control at K=20 (R = 0.5, 1) and
    K=20 with untrained adapters on NCBI-disease, seeds 42-44; one `finetune` run per task is the paired baseline
    (`strategy.baseline=false`: the MoP runs ran concurrently, so none trains its own copy of it)."""
    base = ["--model", "minilm", "--seed", "42", "--repeats", "3", "--set", "training.bf16=true"]
    knowledge = [*KNOWLEDGE, "--set", "strategy.baseline=false"]
    commands = [["kinject", "run", "finetune", *base, "--task", t, "-o", f"{out}/finetune-{t}"]
                for t in ("ncbi-disease", "bc5disease", "hoc")]
    cells = [(t, k, 0.0, ()) for k in PARTS for t in ("ncbi-disease", "bc5disease", "hoc")]
    cells += [("ncbi-disease", 20, r, ()) for r in SHUFFLES]
    cells += [("ncbi-disease", 20, 0.0, ("--set", "strategy.adapter_max_steps=0"))]
    for task, k, r, extra in cells:
        path = f"{out}/{name(task, k, r)}" + ("-untrained" if extra else "")
        commands.append(["kinject", "run", "mop", *base, "--task", task, *knowledge,
                         "--set", f"strategy.partitions={k}",
                         "--set", f"strategy.shuffle={r}", *extra, "-o", path])
    return commands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="execute the commands (default: print them)")
    parser.add_argument("--pilot", action="store_true", help="only the pilot cell")
    parser.add_argument("--compare", action="store_true", help="the `kinject compare` commands of the grid")
    parser.add_argument("--cpu", action="store_true", help="the experiment run on the 2-core CPU")
    parser.add_argument("--gpu", action="store_true", help="the experiment run on the lent GPU")
    parser.add_argument("--names", action="store_true", help="name-scoring adapters on the is-a graph (CPU)")
    parser.add_argument("--out", default="runs/mop-exp", help="parent folder of the run directories")
    args = parser.parse_args()
    commands = (cpu(args.out) if args.cpu else names(args.out) if args.names else gpu(args.out) if args.gpu else
                compare_commands(args.out) if args.compare else
                pilot(args.out) if args.pilot else grid(args.out))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for cmd in commands:
        print(shlex.join(cmd), flush=True)
        if args.run:
            binary = os.path.join(os.path.dirname(sys.executable), "kinject")
            subprocess.run([binary, *cmd[1:]], env=env, check=True)


if __name__ == "__main__":
    main()
