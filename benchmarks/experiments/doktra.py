"""DoKTra "does it work?" experiment: the exact `kinject run` commands (printed; `--run` executes them).

Teacher: minilm (6 layers, 384 wide) fine-tuned with CTT. Students: the first 3 layers of minilm
(`model.layers=3`: same width and tokenizer) and `tiny` (2 layers, 32 wide, character-level tokenizer: a
weaker student with another tokenizer and width, so the frozen random projection and the paired encodings are
exercised). Tasks: ChemProt, DDI, HoC. Seeds 42-44, paired: every seed trains its own teacher, and the
student-ft baseline, DoKTra and KD of that seed share the teacher and the fine-tuned student through the stage
cache (same keys), so each row compares the same models on the same test examples. Per run, metrics.json
holds the student's metrics, `teacher/*`, `student_ft/*`, `retained/*` (% of the teacher's primary metric),
ECE of each, L_AT before/after, and `comparison` (paired bootstrap vs the fine-tuned student).

Budgets: every split capped with --limit (train, dev and test alike: the first N rows), lr 1e-4 for the teacher
and the student fine-tuning (the minilm baselines in docs/results-history.md left the majority regime only at 1e-4),
5e-5 for distillation (not tuned); epochs per task below. The pilot (`--pilot`) is one ChemProt cell at a
smaller limit. Costs and the pilot's numbers: docs/results-history.md, "DoKTra".

What was run on the 2-core CPU (`--cpu`; docs/results.md "DoKTra: does it work?"): HoC only, at its
recommended settings (1 epoch, lr 1e-4, head lr 2e-2) for the teacher and the student fine-tuning, the paper's
HoC betas (beta1 = beta2 = 0), student = minilm's first 3 layers, distillation 2 epochs at lr 5e-5 (gamma 0.9:
1 epoch of ABD, 1 of refinement), seeds 42-44 (seeds 42-43 as two `--seed` runs on the two cores, seed 44 in a
later session, each into its `seed-N` folder: the same runs as `--repeats 3`); variants doktra and kd, plus the
student-ft runs (the same stages as inside them, cached) so that `kinject compare` can pair all three, and
`student-ft-3ep`, the budget control: the student fine-tuned with CE alone for 3 epochs, as many passes over the
data as student-ft + distillation; then the `tiny` student (seed 42; it stayed all-negative) and two larger
budgets for tiny fine-tuned alone (`pilot-tiny-*`: also all-negative); then minilm's first layer alone
(`model.layers=1`) as the weaker student, the same three runs and its 3-epoch control (seeds as separate `--seed`
runs into `seed-N` folders, two lanes: the same runs as `--repeats 3`).

What was run on the lent H100 (`--gpu`; docs/results.md "DoKTra on a GPU"): ChemProt (beta1 0.3, beta2 0.5) and
DDI (0.3, 0.7), full data at the tasks' recommended settings (1 epoch, lr 1e-4, head lr 2e-2) for the teacher and
the student fine-tuning, the 3-layer student, distillation 2 epochs at lr 5e-5, seeds 42-44: student-ft, doktra,
kd and the 3-epoch control per seed.

What was run on 2026-11-27 (`--learning`; docs/results.md "DoKTra from a student that has learned HoC"): the
switch at 0.9 of the distillation steps (as the reference) left a 1-epoch student unable to learn HoC, so DoKTra
and KD start from the student fine-tuned for 3 epochs (the budget at which it learns), distil for 2 epochs, and
are compared with that student and with the student fine-tuned alone for 5 epochs (as many passes); the teacher
fine-tuned for 3 epochs (after 1 its dev macro-F1, 0.752, was below the 5-epoch student's), HoC's betas (0), seed 42;
run as two lanes of one thread each (DoKTra; the control, the 3-epoch student, then KD).

What was run next (`--refine`; docs/results.md "DoKTra: a longer refinement"): the same with the switch at 0.5 -
one epoch of ABD (or KD), one of refinement - to see whether ABD followed by enough cross-entropy recovers what it
costs, and again at 0.9 on the same teacher and student (the move of the training library changed every key, so
both were trained again, on two threads), with the 5-epoch control trained again too, and `no-abd`: the
distillation stage's steps as plain refinement, no teacher; seed 42.

Usage:
  python -m benchmarks.experiments.doktra --cpu [--run]   # the CPU experiment above
  python -m benchmarks.experiments.doktra --learning [--run]   # the 2026-11-27 experiment above
  python -m benchmarks.experiments.doktra --refine [--run]     # its refinement arm (switch at 0.5)
  python -m benchmarks.experiments.doktra --gpu [--run]   # the GPU experiment above
  python -m benchmarks.experiments.doktra                 # print the grid's commands
  python -m benchmarks.experiments.doktra --run           # run them one after another
  python -m benchmarks.experiments.doktra --pilot --run   # the pilot cell (ChemProt, seed 42, --limit 1000)
Environment: HF_HUB_OFFLINE=1, KINJECT_DATA_DIR (../shared/data), KINJECT_CACHE_DIR (shared by every command).
"""

from __future__ import annotations

import os
import sys

from benchmarks.experiments.runner import main

SEEDS = (42, 43, 44)
STUDENTS = {"minilm3": ["--model", "minilm", "--set", "model.layers=3"], "tiny": ["--model", "tiny"]}
VARIANTS = ("doktra", "kd")  # each run also trains and scores the student-ft baseline (shared stage keys)
# task -> (--limit, epochs of teacher / student fine-tuning / distillation, beta1 (paper: Table A1), beta2 (A2))
# (the pilot's 1,000 x 4 epochs left the student all-negative and the teacher at dev micro-F1 0.09: too small)
TASKS = {
    "chemprot": (6000, 3, 0.3, 0.5),
    "ddi": (6000, 3, 0.3, 0.7),
    "hoc": (6000, 3, 0.0, 0.0),
}


def command(task: str, student: str, variant: str, seed: int, limit: int, epochs: int, beta1: float,
            beta2: float, out: str) -> list[str]:
    return ["kinject", "run", "doktra", "--task", task, *STUDENTS[student], "--seed", str(seed),
            "--limit", str(limit), "--set", f"training.epochs={epochs}", "--set", "training.learning_rate=1e-4",
            "--set", "strategy.teacher=minilm", "--set", f"strategy.variant={variant}",
            "--set", f"strategy.beta1={beta1}", "--set", f"strategy.beta2={beta2}",
            "--set", "strategy.teacher_training.learning_rate=1e-4",
            "--set", "strategy.distill_training.learning_rate=5e-5",
            "-o", f"{out}/doktra-{task}-{student}-{variant}-s{seed}"]


def cpu(out: str) -> list[list[str]]:
    """HoC, 3 seeds: student-ft vs DoKTra vs KD vs the 3-epoch budget control, paired (see the module docstring)."""
    base = ["kinject", "run", "doktra", "--task", "hoc", *STUDENTS["minilm3"], "--seed", "42", "--repeats", "3",
            "--set", "strategy.teacher=minilm", "--set", "strategy.beta1=0", "--set", "strategy.beta2=0",
            "--set", "strategy.distill_training.epochs=2", "--set", "strategy.distill_training.learning_rate=5e-5"]
    runs = {v: f"{out}/doktra-hoc-{v}" for v in ("doktra", "kd", "student-ft")}
    control = ["kinject", "run", "finetune", "--task", "hoc", *STUDENTS["minilm3"], "--set", "training.epochs=3",
               "--seed", "42", "--repeats", "3", "-o", f"{out}/student-ft-3ep"]
    # the `tiny` student (seed 42 only: it stayed all-negative, F1 0, at every budget tried, so no grid was run)
    tiny = [[*base[:5], *STUDENTS["tiny"], "--seed", "42", *base[13:], "--set", f"strategy.variant={v}", "-o",
             f"{out}/doktra-hoc-tiny-{v}/seed-42"] for v in ("student-ft", *VARIANTS)]
    tiny_budgets = [["kinject", "run", "finetune", "--task", "hoc", *STUDENTS["tiny"], *extra, "--seed", "42", "-o",
                     f"{out}/pilot-tiny-{name}"] for name, extra in (
        ("lr3e-3", ["--set", "training.epochs=5", "--set", "training.learning_rate=3e-3",
                    "--set", "training.head_learning_rate=3e-3"]),
        ("lr1e-2", ["--set", "model.max_length=256", "--set", "training.epochs=8",
                    "--set", "training.learning_rate=1e-2", "--set", "training.head_learning_rate=1e-2"]))]
    # a weaker student that can learn HoC: minilm's first layer only (model.layers=1), the same runs and control
    one_layer = [["kinject", "run", "doktra", "--task", "hoc", "--model", "minilm", "--set", "model.layers=1",
                  *base[9:], "--set", f"strategy.variant={v}", "-o", f"{out}/doktra-hoc-l1-{v}"]
                 for v in ("student-ft", *VARIANTS)]
    one_layer.append(["kinject", "run", "finetune", "--task", "hoc", "--model", "minilm", "--set", "model.layers=1",
                      "--set", "training.epochs=3", "--seed", "42", "--repeats", "3", "-o", f"{out}/student-l1-ft-3ep"])
    return [[*base, "--set", f"strategy.variant={v}", "-o", path] for v, path in runs.items()] + [control] + \
        [["kinject", "compare", runs["student-ft"], runs["doktra"], runs["kd"], f"{out}/student-ft-3ep"]] + \
        tiny + tiny_budgets + one_layer


def gpu(out: str) -> list[list[str]]:
    """ChemProt and DDI (the paper's non-zero betas), 3-layer minilm student, full data at the tasks' recommended
    settings, seeds 42-44 (one `--seed` run per folder: the seeds ran concurrently on the lent H100)."""
    commands = []
    for task, beta1, beta2 in (("chemprot", 0.3, 0.5), ("ddi", 0.3, 0.7)):
        for seed in SEEDS:
            base = ["kinject", "run", "doktra", "--task", task, *STUDENTS["minilm3"], "--seed", str(seed),
                    "--set", "strategy.teacher=minilm", "--set", f"strategy.beta1={beta1}",
                    "--set", f"strategy.beta2={beta2}", "--set", "strategy.distill_training.epochs=2",
                    "--set", "strategy.distill_training.learning_rate=5e-5"]
            commands += [[*base, "--set", f"strategy.variant={v}", "-o", f"{out}/doktra-{task}-{v}/seed-{seed}"]
                         for v in ("student-ft", *VARIANTS)]
            commands.append(["kinject", "run", "finetune", "--task", task, *STUDENTS["minilm3"], "--set",
                             "training.epochs=3", "--seed", str(seed),
                             "-o", f"{out}/student-ft-3ep-{task}/seed-{seed}"])
    return commands


def learning(out: str) -> list[list[str]]:
    """HoC from a student that has learned it (3 epochs): DoKTra and KD (+2 distillation epochs) vs that student and
    vs the student fine-tuned for 5 epochs; seed 42."""
    base = ["kinject", "run", "doktra", "--task", "hoc", *STUDENTS["minilm3"], "--seed", "42",
            "--set", "training.epochs=3", "--set", "strategy.teacher=minilm", "--set", "strategy.beta1=0",
            "--set", "strategy.beta2=0", "--set", "strategy.teacher_training.epochs=3",
            "--set", "strategy.distill_training.epochs=2", "--set", "strategy.distill_training.learning_rate=5e-5"]
    student = ["kinject", "run", "finetune", "--task", "hoc", *STUDENTS["minilm3"], "--seed", "42"]
    return [[*base, "-o", f"{out}/doktra"], [*student, "--set", "training.epochs=5", "-o", f"{out}/student-ft-5ep"],
            [*student, "--set", "training.epochs=3", "-o", f"{out}/student-ft-3ep"],  # DoKTra's start (cached)
            [*base, "--set", "strategy.variant=kd", "-o", f"{out}/kd"]]


def refine(out: str) -> list[list[str]]:
    """The ``learning`` runs with the switch at 0.5 of the distillation steps (one epoch of ABD or KD, one of
    refinement) and again at 0.9, all from the same teacher and student (recomputed: the keys changed)."""
    doktra, control, start, kd = learning(out)
    runs = [[*start[:-2], "-o", f"{out}/student-ft-3ep-r"]]
    for gamma in ("0.5", "0.9"):
        tag = gamma.replace(".", "")
        runs += [[*doktra[:-2], "--set", f"strategy.gamma={gamma}", "-o", f"{out}/doktra-g{tag}"],
                 [*kd[:-2], "--set", f"strategy.gamma={gamma}", "-o", f"{out}/kd-g{tag}"]]
    return [runs[1], *runs[:1], *runs[2:], [*control[:-2], "-o", f"{out}/student-ft-5ep-r"],
            [*doktra[:-2], "--set", "strategy.variant=no-abd", "-o", f"{out}/no-abd"]]  # the same steps, CE only


def grid(out: str, pilot: bool) -> list[list[str]]:
    if os.environ.get("KINJECT_EXPERIMENT") == "learning":
        return learning(out)
    if os.environ.get("KINJECT_EXPERIMENT") == "refine":
        return refine(out)
    if os.environ.get("KINJECT_EXPERIMENT") == "cpu":
        return cpu(out)
    if os.environ.get("KINJECT_EXPERIMENT") == "gpu":
        return gpu(out)
    if pilot:
        return [command("chemprot", "minilm3", v, 42, 1000, 4, 0.3, 0.5, out) for v in VARIANTS]
    return [command(task, student, variant, seed, *TASKS[task], out)
            for task in TASKS for seed in SEEDS for student in STUDENTS for variant in VARIANTS]


if __name__ == "__main__":
    for mode in ("cpu", "gpu", "learning", "refine"):
        if f"--{mode}" in sys.argv:
            sys.argv.remove(f"--{mode}")
            os.environ["KINJECT_EXPERIMENT"] = mode
    main(__doc__, grid, "runs/doktra-exp")
