"""kinject's training library: the fine-tune and evaluate stages every strategy reuses (:mod:`.stages`), the task
models they build and load (:mod:`.task_models`), training through the HF Trainer (:mod:`.loop`,
batched by length: :mod:`.batching`), prediction (:mod:`.prediction`),
dev-based model selection (:mod:`.selection`), peft adapters (:mod:`.peft_tuning`), `kinject eval`, the automatic
decisions a run takes for its user (:mod:`.decisions`: the hook plugin ``decisions``; the cross-validated choice on
a small train split, :mod:`.choice`, the default training rules, and the settings a run starts from,
:mod:`.presets`), the model catalogue and loaders
(:mod:`.models`: the hook plugin ``models``), ``--dry-run``'s time estimate (:mod:`.estimate`: the hook plugin
``estimate``, from the FLOPs of :mod:`.cost`), and what the front ends share: a spec read from YAML and ``--set``
(:mod:`.spec_files`), the metrics table (:mod:`.tables`) and a run over several seeds with its summary
(:mod:`.repeats`).

Strategies import the builders from here::

    from kinject.plugins.training import evaluate_stage, finetune_stage

It builds on the kernel (:mod:`kinject.api`) only; the knowledge library and every method build on it.
Names imported from here count, in a stage's cache key, as imports of the module that defines them.
"""

from __future__ import annotations

from kinject.api import lazy_exports

_EXPORTS = {  # name -> the module defining it; imported on first use, so `kinject list` reading `eval` loads nothing
    ".choice": ("fold_problem", "fold_run_settings"),
    ".cost": ("model_shape", "scored_flops", "trained_flops"),
    ".batching": ("PaddingCounter", "consumed_rows", "length_grouped_batches", "row_lengths", "token_budget_batches",
                  "useful_token_fraction", "with_length_buckets"),
    ".models": ("keep_layers", "load_encoder", "load_tokenizer", "minilm_path", "model_config", "usable_positions"),
    ".loop": ("EpochCallback", "HookCallback", "last_checkpoint", "quiet_progress", "train", "training_arguments"),
    ".prediction": ("dev_scorer", "float32_head", "predict"),
    ".records": ("plain",),
    ".stages": ("EvaluateConfig", "FinetuneConfig", "evaluate_body", "evaluate_config_class", "evaluate_model",
                "evaluate_stage", "finetune_body", "finetune_stage", "run_evaluate_config", "write_predictions"),
    ".task_models": ("MeanPooler", "build_task_model", "load_task_model", "save_model"),
    ".presets": ("apply_preset", "apply_protocol", "apply_recommended", "check_protocol", "native_bf16",
                 "start_settings"),
    ".spec_files": ("apply_overrides", "load_spec_file", "load_yaml", "resolve_config_paths"),
    ".tables": ("format_value", "plural", "print_metrics"),
    ".repeats": ("execute_repeats", "seed_stats", "summarize_seeds"),
    ".stage_training": ("FINETUNING_ONLY", "TrainingOverrides", "finetune_training", "method_stage_training"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
