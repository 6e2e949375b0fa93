"""kinject's training library: the fine-tune and evaluate stages every strategy reuses (:mod:`.stages`), the task
models they build and load (:mod:`.task_models`), training through the HF Trainer (:mod:`.loop`, batched by length:
:mod:`.batching`), prediction (:mod:`.prediction`), dev-based model selection (:mod:`.selection`), peft adapters
(:mod:`.peft_tuning`), the training settings a method's stage holds (:mod:`.stage_training`), what a stage costs in
FLOPs (:mod:`.cost`), and kinject's own model names (:mod:`.models`: ``tiny``, ``minilm``).

Strategies import the builders from here::

    from kinject.training import evaluate_stage, finetune_stage

It builds on the kernel's contract (:mod:`kinject.api`) and the tasks; the knowledge library and every method build
on it.
"""

from __future__ import annotations

from kinject.api import lazy_exports

_EXPORTS = {  # name -> the module defining it; imported on first use, so `kinject list` reading `eval` loads nothing
    ".cost": ("fixed_costs", "forward_flops", "model_shape", "scored_flops", "trained_flops"),
    ".batching": ("PaddingCounter", "consumed_rows", "length_grouped_batches", "row_lengths", "token_budget_batches",
                  "useful_token_fraction", "with_length_buckets"),
    ".models": ("MiniLMModel", "TinyModel", "minilm_path"),
    ".loop": ("EpochCallback", "HookCallback", "last_checkpoint", "quiet_progress", "train", "training_arguments"),
    ".peft_tuning": ("add_peft", "merged"),
    ".prediction": ("dev_scorer", "float32_head", "predict"),
    ".records": ("plain",),
    ".stages": ("EvaluateConfig", "FinetuneConfig", "evaluate_body", "evaluate_config_class", "evaluate_model",
                "evaluate_stage", "finetune_body", "finetune_stage", "run_evaluate_config", "write_predictions"),
    ".task_models": ("MeanPooler", "build_task_model", "load_task_model", "save_model"),
    ".stage_training": ("FINETUNING_ONLY", "TrainingOverrides", "finetune_training", "method_stage_training"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
#: modules that compute nothing a stage writes: no stage key follows them (kinject.fingerprint)
UNKEYED = {".cost": "the FLOPs a stage states for --dry-run's estimate"}
