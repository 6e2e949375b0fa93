"""``kinject eval``: the training library's command (entry point ``kinject.commands``: ``eval``) - score a saved
task model on a task's evaluation splits, as the evaluate stage does."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def evaluate(model_dir: Path = typer.Argument(..., help="A trained task model directory"),
             task: str = typer.Option(..., "--task", "-t"),
             sets: Optional[List[str]] = typer.Option(None, "--set", help="Override a spec field: a.b=c"),
             data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
             limit: Optional[int] = typer.Option(None, min=1),
             output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write metrics.json and "
                                                   "predictions/ here"),
             debug: bool = typer.Option(False, "--debug", help="Tracebacks for errors")):
    """Evaluate a saved model on a task's dev and test splits."""
    import json
    import tempfile

    from rich.console import Console

    from kinject.cli.printing import safe

    from kinject.api import KinjectError, build_spec, prepare
    from kinject.outputs import run_folder
    from kinject.spec_reading import apply_overrides
    from kinject.cli.tables import print_metrics

    from kinject.training.stages import EvaluateConfig, evaluate_model, run_evaluate_config, write_predictions

    if not (model_dir / "config.json").exists():
        hint = (f"; the seeds of a --repeats run are in seed-*/: e.g. {next(model_dir.parent.glob('seed-*/model'))}"
                if any(model_dir.parent.glob("seed-*/model/config.json")) else "")
        raise KinjectError(f"{model_dir}: not a model directory (no config.json){hint}")
    data = {"strategy": {"name": "finetune"}, "task": {"name": task}, "model": {"name": str(model_dir)}}
    if limit is not None:
        data["training"] = {"limit": limit}
    if data_dir is not None:
        data["data_dir"] = str(data_dir)
    run_ctx = prepare(build_spec(apply_overrides(data, sets or [])))
    spec = run_ctx.spec  # with the task's recommended settings (e.g. max_length) and the resolved precision
    loader = run_evaluate_config(model_dir, EvaluateConfig(
        task=run_ctx.task_ref(), model_stage="model", max_length=spec.model.max_length,
        attn_implementation=spec.model.attn_implementation, bf16=bool(spec.training.bf16)))
    with tempfile.TemporaryDirectory() as work:
        metrics, records = evaluate_model(model_dir, run_ctx.task, run_ctx.env, spec.training.eval_batch_size,
                                          spec.model.max_length, Path(work),
                                          tuple(spec.training.eval_splits) if spec.training.eval_splits else None,
                                          spec.model.attn_implementation, bool(spec.training.bf16),
                                          loader.load_model)
    if output:
        with run_folder(output, run_ctx, "eval") as folder:
            (folder / "metrics.json").write_text(json.dumps(metrics, indent=2))
            write_predictions(records, folder / "predictions")
    print_metrics(safe(Console()), f"{model_dir} on {task}", metrics)
