"""Regression-to-the-mean control for KIMERA's "Table 3" (importance of retrained vs frozen heads).

KIMERA's analysis compares each head's importance before (phase-1 model) and after KIMERA. Heads picked for
being the *least* important in one model tend to score higher in any other model, KG or not. This script
scores the same heads in any number of task models on the same scoring set, so a plain fine-tune with another
seed can be put beside the KIMERA models:

  .venv/bin/python -m benchmarks.kimera_importance_control --mask runs/kimera-hard/seed-42/masks.json \
      --set task.name=capr --set task.dataset=medquad --set task.setting=zero-shot \
      --set task.max_train_queries=500 --set task.max_eval_queries=100 --set strategy.score_examples=400 \
      --model phase1-seed43=CACHE/stages/finetune/<key>/model --model kimera-hard-seed43=runs/kimera-hard/seed-43/model

Prints (and writes with --json) the mean normalised importance of the mask-0 ("retrained") and mask-1
("frozen") heads in each model.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mask", type=Path, required=True, help="a KIMERA masks.json (its 'hard' mask)")
    parser.add_argument("--model", action="append", required=True, help="NAME=DIR of a task model (repeat)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="run-spec override a.b=c")
    parser.add_argument("--json", type=Path, help="write the table here")
    args = parser.parse_args()

    from kinject.preparation import prepare
    from kinject.api import load_tokenizer
    from kinject.plugins.kimera.importance import normalize_importance, score_heads
    from kinject.plugins.kimera.masks import load_mask
    from kinject.plugins.kimera.scoring import scoring_set
    from kinject.training import load_task_model
    from kinject.api import apply_overrides
    from kinject.spec_reading import build_spec

    spec = build_spec(apply_overrides({"task": {"name": "capr"}, "strategy": {"name": "kimera"}}, args.overrides))
    run = prepare(spec)
    retrained = load_mask(args.mask, "hard") < 0.5
    head = run.task.head(run.env)
    scoring = next(s.config.scoring for s in run.stages if s.name.startswith("kimera-mask-"))
    table = {}
    for item in args.model:
        name, _, path = item.partition("=")
        tokenizer = load_tokenizer(path)
        model = load_task_model(path, head, run.spec.model.attn_implementation)
        batches = scoring_set(scoring, run.task, run.env, tokenizer).batches
        importance = normalize_importance(score_heads(model, batches, head.problem_type)[0])
        table[name] = {"retrained": float(importance[retrained].mean()), "frozen": float(importance[~retrained].mean())}
        print(f"{name}: retrained heads {table[name]['retrained']:.3f}, frozen heads {table[name]['frozen']:.3f}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
