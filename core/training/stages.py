"""The stages every strategy reuses: fine-tune a task model, evaluate it.

Each is declared: a typed config (what the key holds), a module-level body that receives only that config
and its inputs' folders, and a builder that fills the config from a prepared run. Strategies compose
these with their own stages (KIMERA: importance -> retrain -> finetune -> evaluate; STILT: finetune on the
intermediate task -> finetune on the target -> evaluate).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import Field

from kinject.api import (NOT_KEYED, Environment, Head, ModelRef, Stage, StageConfig, StageContext, Task, TaskRef,
                         TrainingSpec, is_main_process)

from .records import plain
from .stage_training import finetune_training
from .task_models import build_task_model, load_task_model, save_model

log = logging.getLogger("kinject")
details = logging.getLogger("kinject.details")  # the run log only (the console shows metrics once, as the table)


# -- fine-tuning ------------------------------------------------------------------------------------ #
class FinetuneConfig(StageConfig):
    """Fine-tune an encoder on a task's train split with a fresh head.

    The extension points of the one fine-tune body: a stage that fine-tunes differently subclasses this config
    (its new fields are keyed; its module joins the stage's code fingerprint) and overrides

    * :meth:`prepare_model` - transform the task model once it is built (adapters, LoRA, freezing);
    * :meth:`trainer_class` - the HF Trainer class to train with (extra losses in its ``compute_loss``);
    * :meth:`save_model` - how the trained model is written to the stage's ``model/``;
    * :meth:`extra_stats` - values added to train.json.
    """

    model: ModelRef
    task: TaskRef
    training: TrainingSpec
    seed: int
    init_from: str | None = Field(None, description="Input stage whose model/ is the encoder (default: model).")

    def prepare_model(self, model, ctx: StageContext):
        """The model to train (default: ``model`` as built)."""
        return model

    def trainer_class(self, head: Head):
        """The Trainer class (default: None, transformers' Trainer)."""
        return None

    def save_model(self, model, tokenizer, folder: Path, ctx: StageContext) -> None:
        """Write the trained model (default: safetensors + tokenizer, loadable with ``from_pretrained``)."""
        save_model(model, tokenizer, folder)

    def extra_stats(self) -> dict[str, Any]:
        return {}

    def cost(self, run) -> float:
        from .cost import finetune

        return finetune(self, run)


def finetune_body(cfg: FinetuneConfig, ctx: StageContext) -> None:
    """Build the task model (the base encoder or the model of ``init_from``, a fresh head), apply the config's
    extension points, train on the task's train split, save ``model/`` and ``train.json``."""
    from kinject.api import load_tokenizer

    from .loop import train

    from .prediction import dev_scorer

    task, env = cfg.task.build(), cfg.task.environment(ctx)
    if cfg.init_from:
        encoder = ctx.inputs[cfg.init_from] / "model"
        tokenizer = load_tokenizer(str(encoder))
        revision, layers = None, None
    else:
        encoder, tokenizer = cfg.model.path, cfg.model.load_tokenizer()
        revision, layers = cfg.model.revision, cfg.model.layers
    head = task.head(env)
    model = build_task_model(encoder, head, cfg.model.attn_implementation, cfg.seed, revision, layers,
                             cfg.model.pooling)
    model = cfg.prepare_model(model, ctx)
    if cfg.training.peft is not None:
        from .peft_tuning import add_peft

        model = add_peft(model, cfg.training.peft, head)
    features = task.featurize(tokenizer, task.examples(task.train_split, env), cfg.model.max_length, env)
    selecting = cfg.training.selection == "best" and "dev" in task.eval_splits  # never select on test
    scorer = dev_scorer(task, env, tokenizer, cfg.model.max_length, cfg.training) \
        if cfg.training.eval_steps or selecting else None
    stats = train(model, features, task.collator(tokenizer), cfg.training, ctx.work, cfg.seed, stage=ctx.name,
                  resume=ctx.resume, scorer=scorer, trainer_cls=cfg.trainer_class(head),
                  selection_metric=task.selection_metric() if selecting else None)
    stats["trainable_parameters"] = float(sum(p.numel() for p in model.parameters() if p.requires_grad))
    if cfg.training.peft is not None:
        from .peft_tuning import merged

        model = merged(model, ctx.out / "peft-adapter" if is_main_process() else None)
    if is_main_process():
        cfg.save_model(model, tokenizer, ctx.out / "model", ctx)
        (ctx.out / "train.json").write_text(json.dumps({**stats, **cfg.extra_stats()}, indent=2))
        if scorer is not None and "selection" in stats and _saves_what_it_trains(cfg):
            if scorer.best_logits is None:  # resumed after the best step: score the restored best model once
                scorer(model)
                scorer.keep_best()
            save_scored(ctx.out, scorer.split, scorer.best_logits, cfg.task, cfg.model.max_length, cfg.training.bf16,
                        cfg.model.attn_implementation)


def _saves_what_it_trains(cfg: FinetuneConfig) -> bool:
    """Whether ``model/`` holds exactly the model trained in memory (no peft merge, no subclass's own saving or
    model transform), so that the dev logits of the selected model are the saved model's."""
    kind = type(cfg)
    return (cfg.training.peft is None and kind.save_model is FinetuneConfig.save_model
            and kind.prepare_model is FinetuneConfig.prepare_model)


# The dev logits of the model dev selection kept (scored while training), so the evaluation does not score them
# again: <stage>/scored/<split>.npy + scored/settings.json (what they were computed with).
SCORED = "scored"


def save_scored(out: Path, split: str, logits: np.ndarray, task: TaskRef, max_length: int, bf16: bool | None,
                attn_implementation: str) -> None:
    folder = out / SCORED
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"{split}.npy", np.asarray(logits, dtype=np.float32), allow_pickle=False)
    settings = {"task": task.model_dump(mode="json"), "max_length": max_length, "bf16": bool(bf16),
                "attn_implementation": attn_implementation}
    (folder / "settings.json").write_text(json.dumps(settings, sort_keys=True, default=str))


def load_scored(model_stage: Path, cfg: "EvaluateConfig") -> dict[str, np.ndarray]:
    """The logits a model stage saved for splits this evaluation scores, when they were computed as it would compute
    them (same task and data, length, precision and attention; the model loaded as saved); else {}."""
    folder = Path(model_stage) / SCORED
    if type(cfg).load_model is not EvaluateConfig.load_model or not (folder / "settings.json").exists():
        return {}
    wanted = {"task": cfg.task.model_dump(mode="json"), "max_length": cfg.max_length, "bf16": bool(cfg.bf16),
              "attn_implementation": cfg.attn_implementation}
    if json.loads((folder / "settings.json").read_text()) != json.loads(json.dumps(wanted, default=str)):
        return {}
    return {path.stem: np.load(path, allow_pickle=False) for path in folder.glob("*.npy")}


def finetune_stage(run, name: str = "finetune", init_from: str | None = None, task: Task | TaskRef | None = None,
                   training: TrainingSpec | None = None) -> Stage:
    """Fine-tune the base model (or the model of stage ``init_from``) on a task (the run's by default)."""
    config = FinetuneConfig(model=run.model_ref(), task=run.task_ref(task),
                            training=finetune_training(training or run.spec.training), seed=run.spec.seed,
                            init_from=init_from)
    return Stage(name=name, body=finetune_body, config=config, inputs=(init_from,) if init_from else (),
                 produces_model=True, artifacts=("peft-adapter",) if config.training.peft else (),
                 published=("peft-adapter",) if config.training.peft else ())


# -- evaluation ------------------------------------------------------------------------------------- #
def evaluate_model(model_dir: Path, task: Task, env: Environment, batch_size: int, max_length: int, work: Path,
                   splits: tuple[str, ...] | None = None, attn_implementation: str = "sdpa", bf16: bool = False,
                   load: Callable[[Path, Head], Any] | None = None, scored: dict[str, np.ndarray] | None = None
                   ) -> tuple[dict[str, dict[str, float]], dict[str, list[dict]]]:
    """Score a saved task model on a task's evaluation splits: (metrics, per-example predictions) per split.
    ``load(model_dir, head)`` loads the model (default :func:`load_task_model`); ``scored``: the logits of splits
    already computed with this model (not predicted again)."""
    from kinject.api import KinjectError
    from kinject.api import load_tokenizer

    from .prediction import keep_scores, predict

    tokenizer = load_tokenizer(str(model_dir))
    head = task.head(env)
    model = load(model_dir, head) if load else load_task_model(model_dir, head, attn_implementation)
    if model.config.num_labels != head.num_labels:
        raise KinjectError(f"{model_dir}: model has {model.config.num_labels} outputs, task {task.name!r} needs "
                           f"{head.num_labels}; fine-tune it on the task first")
    metrics: dict[str, dict[str, float]] = {}
    records: dict[str, list[dict]] = {}
    for split in splits or task.eval_splits:
        examples = task.examples(split, env)
        features = task.featurize(tokenizer, examples, max_length, env)
        logits = (scored or {}).get(split)
        if logits is None or len(logits) != len(features):
            logits = predict(model, features, task.collator(tokenizer), batch_size, work, bf16=bf16)
        else:
            details.info("%s %s: the logits scored while training (dev selection's model)", task.name, split)
        if len(logits) != len(features):  # e.g. a distributed sampler padding or dropping examples
            raise RuntimeError(f"{task.name} {split}: {len(logits)} predictions for {len(features)} examples")
        metrics[split] = plain(task.score(split, examples, features, logits, env))
        try:
            records[split] = plain(keep_scores(task, task.predictions(split, examples, features, logits, env), logits))
        except NotImplementedError:
            log.warning("%s: task writes no per-example predictions (kinject compare cannot pair it)", task.name)
        details.info("%s %s: %s", task.name, split, ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                         for k, v in metrics[split].items()))
    return metrics, records


def write_predictions(records: dict[str, list[dict]], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in records.items():
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")


class EvaluateConfig(StageConfig):
    """Score the model of ``model_stage`` on a task's evaluation splits."""

    task: TaskRef
    model_stage: str
    max_length: int
    attn_implementation: str = "sdpa"
    splits: list[str] | None = None
    bf16: bool = False
    batch_size: int = Field(64, json_schema_extra=NOT_KEYED)

    def load_model(self, model_dir: Path, head: Head):
        """The trained task model in ``model_dir`` (override for models ``from_pretrained`` cannot load alone)."""
        return load_task_model(model_dir, head, self.attn_implementation)

    def cost(self, run) -> float:
        from .cost import evaluate

        return evaluate(self, run)


def evaluate_config_class(info: dict, where: str = "run.json") -> type[EvaluateConfig] | None:
    """The config class of a run's last evaluate stage (``info``: its run.json, which records each stage's config
    type); None when it has none. A class other than :class:`EvaluateConfig` may load the model its own way."""
    import importlib

    from kinject.api import KinjectError

    for record in reversed(info.get("stages", [])):
        module, _, name = str(record.get("config_type", "")).rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name, None) if module else None
        except ImportError as error:
            raise KinjectError(f"{where}: stage {record.get('name')!r} was evaluated with {module}.{name}, which "
                               f"does not import here ({error}); install the plugin that ran it") from None
        if isinstance(cls, type) and issubclass(cls, EvaluateConfig):
            return cls
    return None


def run_evaluate_config(model_dir: Path, cfg: EvaluateConfig) -> EvaluateConfig:
    """``cfg``'s fields in the class of the evaluate stage of the run that exported ``model_dir`` (run.json beside
    it), so a model that needs its own ``load_model`` (MoP's fused model) is loaded the way the run scored it;
    ``cfg`` for any other folder."""
    from kinject.api import read_run

    folder = Path(model_dir).parent
    cls = evaluate_config_class(read_run(folder)[0], str(folder / "run.json")) \
        if os.path.lexists(folder / "run.json") else None
    return cfg if cls is None or cls is type(cfg) else cls(**dict(cfg))


def evaluate_body(cfg: EvaluateConfig, ctx: StageContext) -> None:
    task, env = cfg.task.build(), cfg.task.environment(ctx)
    metrics, records = evaluate_model(ctx.inputs[cfg.model_stage] / "model", task, env, cfg.batch_size,
                                      cfg.max_length, ctx.work, tuple(cfg.splits) if cfg.splits else None,
                                      cfg.attn_implementation, cfg.bf16, cfg.load_model,
                                      load_scored(ctx.inputs[cfg.model_stage], cfg))
    train_stats = ctx.inputs[cfg.model_stage] / "train.json"
    if train_stats.exists():
        metrics["train"] = json.loads(train_stats.read_text())
    ctx.hooks().kinject_metrics_logged(stage=ctx.name, metrics={f"{s}/{k}": v for s, m in metrics.items()
                                                                for k, v in m.items() if s != "train"}, step=None)
    if is_main_process():
        (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        write_predictions(records, ctx.out / "predictions")


def evaluate_stage(run, model_stage: str = "finetune", name: str = "evaluate", task: Task | TaskRef | None = None,
                   export: bool = True) -> Stage:
    """Evaluate the model of ``model_stage`` on the task's evaluation splits; writes metrics.json and
    predictions/<split>.jsonl (copied into the run directory when ``export``)."""
    from kinject.api import SpecError

    ref = run.task_ref(task)  # a Task, or a TaskRef (with an input transform)
    task = ref.raw()
    splits = run.spec.training.eval_splits
    if splits is not None:
        known = (*task.eval_splits, task.train_split)
        unknown = [s for s in splits if s not in known]
        if unknown or not splits:
            raise SpecError(f"training.eval_splits: {', '.join(unknown) or 'empty list'} "
                            f"(task {task.name!r} has: {', '.join(known)})")
    config = EvaluateConfig(task=ref, model_stage=model_stage, max_length=run.spec.model.max_length,
                            attn_implementation=run.spec.model.attn_implementation,
                            splits=list(splits) if splits else None, bf16=bool(run.spec.training.bf16),
                            batch_size=run.spec.training.eval_batch_size)
    return Stage(name=name, body=evaluate_body, config=config, inputs=(model_stage,),
                 artifacts=("predictions",) if export else ())
