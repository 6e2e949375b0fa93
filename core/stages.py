"""Stage builders every strategy reuses: fine-tune a task model, evaluate it.

Strategies compose these with their own stages (KIMERA: importance -> retrain -> finetune -> evaluate;
STILT: finetune on the intermediate task -> finetune on the target -> evaluate).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from kinject.engine import RunContext, StageContext, is_main_process
from kinject.interfaces import Environment, Head, Stage, Task
from kinject.spec import TrainingSpec

log = logging.getLogger("kinject")


def task_fingerprint(task: Task, env: Environment) -> dict[str, Any]:
    return {"name": task.name, **task.config.model_dump(mode="json"), "data": task.describe_data(env),
            "limit": env.limit}


def build_task_model(encoder_path: str | Path, head: Head, attn_implementation: str = "sdpa", seed: int = 0):
    """The encoder at ``encoder_path`` with a freshly initialised task head (linear layer)."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

    from kinject.models import offline

    encoder = AutoModel.from_pretrained(str(encoder_path), local_files_only=offline(),
                                        attn_implementation=attn_implementation)
    config = encoder.config
    config.num_labels = head.num_labels
    config.problem_type = head.problem_type
    if head.labels:
        config.id2label = dict(enumerate(head.labels))
        config.label2id = {name: i for i, name in enumerate(head.labels)}
    cls = AutoModelForTokenClassification if head.kind == "token" else AutoModelForSequenceClassification
    torch.manual_seed(seed)
    model = cls.from_config(config, attn_implementation=attn_implementation)
    missing, unexpected = model.base_model.load_state_dict(encoder.state_dict(), strict=False)
    bad = [k for k in missing if not k.startswith("pooler.")]
    unexpected = [k for k in unexpected if not k.startswith("pooler.")]  # token heads have no pooler
    if bad or unexpected:
        raise RuntimeError(f"encoder weights do not fit the task model: missing {bad[:5]}, unexpected {unexpected[:5]}")
    return model


def save_model(model, tokenizer, directory: Path) -> None:
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def features_for(task: Task, split: str, tokenizer, run: RunContext) -> tuple[list[dict], list[dict]]:
    examples = task.examples(split, run.env)
    return examples, task.featurize(tokenizer, examples, run.spec.model.max_length, run.env)


def finetune_stage(run: RunContext, name: str = "finetune", init_from: str | None = None, task: Task | None = None,
                   training: TrainingSpec | None = None, extra_config: dict | None = None) -> Stage:
    """Fine-tune an encoder (the base model, or the model of stage ``init_from``) on a task's train split."""
    task = task or run.task
    training = training or run.spec.training
    config = {"model": run.spec.model.model_dump(), "task": task_fingerprint(task, run.env),
              "training": training.cache_fields(), "seed": run.spec.seed, **(extra_config or {})}

    def fn(ctx: StageContext) -> None:
        from kinject.models import load_tokenizer
        from kinject.training import train

        encoder = ctx.inputs[init_from] / "model" if init_from else run.model_path
        tokenizer = load_tokenizer(str(encoder))
        head = task.head(run.env)
        model = build_task_model(encoder, head, run.spec.model.attn_implementation, run.spec.seed)
        _, features = features_for(task, task.train_split, tokenizer, run)
        stats = train(model, features, task.collator(tokenizer), training, ctx.work, run.spec.seed,
                      stage=name, resume=ctx.resume)
        if is_main_process():
            save_model(model, tokenizer, ctx.out / "model")
            (ctx.out / "train.json").write_text(json.dumps(stats, indent=2))

    return Stage(name=name, fn=fn, config=config, inputs=(init_from,) if init_from else (), produces_model=True)


def evaluate_model(model_dir: Path, task: Task, run_or_env, training: TrainingSpec, max_length: int, seed: int,
                   work: Path, splits: tuple[str, ...] | None = None) -> dict[str, dict[str, float]]:
    """Score a saved task model on a task's evaluation splits."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    from kinject.models import load_tokenizer, offline
    from kinject.training import predict

    env = run_or_env.env if isinstance(run_or_env, RunContext) else run_or_env
    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    cls = AutoModelForTokenClassification if head.kind == "token" else AutoModelForSequenceClassification
    model = cls.from_pretrained(str(model_dir), local_files_only=offline())
    if model.config.num_labels != head.num_labels:
        from kinject.errors import KinjectError

        raise KinjectError(f"{model_dir}: model has {model.config.num_labels} outputs, task {task.name!r} needs "
                           f"{head.num_labels}; fine-tune it on the task first")
    metrics: dict[str, dict[str, float]] = {}
    for split in splits or task.eval_splits:
        examples = task.examples(split, env)
        features = task.featurize(tokenizer, examples, max_length, env)
        logits = predict(model, features, task.collator(tokenizer), training, work, seed)
        if len(logits) != len(features):  # e.g. a distributed sampler padding or dropping examples
            raise RuntimeError(f"{task.name} {split}: {len(logits)} predictions for {len(features)} examples")
        metrics[split] = task.score(split, examples, features, logits, env)
        log.info("%s %s: %s", task.name, split, metrics[split])
    return metrics


def evaluate_stage(run: RunContext, model_stage: str = "finetune", name: str = "evaluate",
                   task: Task | None = None) -> Stage:
    """Evaluate the model of ``model_stage`` on the task's dev and test splits; writes metrics.json."""
    task = task or run.task
    config = {"task": task_fingerprint(task, run.env), "max_length": run.spec.model.max_length,
              "eval_batch_size": run.spec.training.eval_batch_size}
    splits = run.spec.training.eval_splits
    if splits is not None:
        known = (*task.eval_splits, task.train_split)
        unknown = [s for s in splits if s not in known]
        if unknown or not splits:
            from kinject.errors import SpecError

            raise SpecError(f"training.eval_splits: {', '.join(unknown) or 'empty list'} "
                            f"(task {task.name!r} has: {', '.join(known)})")
        config["splits"] = list(splits)

    def fn(ctx: StageContext) -> None:
        model_dir = ctx.inputs[model_stage] / "model"
        metrics = evaluate_model(model_dir, task, run, run.spec.training, run.spec.model.max_length,
                                 run.spec.seed, ctx.work, tuple(splits) if splits else None)
        train_stats = ctx.inputs[model_stage] / "train.json"
        if train_stats.exists():
            metrics["train"] = json.loads(train_stats.read_text())
        run.hooks().kinject_metrics_logged(stage=name, metrics={f"{s}/{k}": v for s, m in metrics.items()
                                                                  for k, v in m.items()}, step=None)
        if is_main_process():
            (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2))

    return Stage(name=name, fn=fn, config=config, inputs=(model_stage,))
