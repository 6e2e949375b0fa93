"""kinject's public API: what a plugin author is promised - the interfaces a strategy, task, knowledge source,
evaluator, command or hook implements, the stage contract, and the builders a plugin calls - from one import
(docs/plugins.md lists every name). Plugins import the kernel through this module only; what is not here is
internal and may change. The shared fine-tune and evaluate stages are built on it by the training library
(:mod:`kinject.training`), the knowledge-graph and masked-LM builders by :mod:`kinject.knowledge`,
comparisons by :mod:`kinject.evidence`.

A front door: names are imported from their defining module on first use (``from kinject.api import Stage`` loads
the interfaces, not the engine), and a stage's cache key counts a name imported from here as an import of the
module that defines it (:data:`kinject.fingerprint.FRONT_DOORS`).
"""

from __future__ import annotations

from kinject.frontdoor import lazy_exports

_EXPORTS = {  # module -> the names it defines that a plugin is promised
    # the interfaces a plugin implements
    "kinject.interfaces": ("RUN_METRICS_FILE", "Environment", "Evaluator", "Head", "KnowledgeSource", "MetricRef",
                           "PluginConfig", "Stage", "StageConfig", "StageContext", "Strategy", "Task", "TaskGroup",
                           "Triple"),
    # what a stage config holds (its key)
    "kinject.fingerprint": ("NOT_KEYED", "stable_hash"),
    "kinject.refs": ("HoldOutRef", "InputTransform", "ModelRef", "SourceRef", "TaskRef", "files_fingerprint"),
    "kinject.splits": ("unit_key",),  # the evaluation unit an example belongs to (its group, else itself)
    "kinject.spec": ("MAX_EPOCHS", "MAX_STEPS", "ModelSpec", "PeftSpec", "PluginRef", "RunSpec", "TrainingSpec"),
    # a spec and a plugin's config checked (reading one from YAML and --set: kinject.training)
    "kinject.spec_reading": ("FILE_PATH", "apply_overrides", "build_spec", "default_cache_dir", "default_data_dir",
                             "format_validation_error", "load_spec_file", "load_yaml", "resolve_config_paths",
                             "validate_plugin_config"),
    # knowledge on one footing: how facts are keyed, the hold-out the engine applies to every source
    "kinject.facts": ("DEFAULT_EXCLUDE", "HeldOutFacts", "HeldOutSource", "fact_key", "facts_digest", "held_out_count", "held_out_facts",
                      "read_fact_file", "words"),
    # errors (one line, exit 2; Interrupted: exit 130/143)
    "kinject.errors": ("DataError", "DataMissingError", "Interrupted", "KinjectError", "PluginLoadError", "SpecError",
                       "UnknownNameError"),
    # models
    "kinject.models": ("ModelProvider", "keep_layers", "load_encoder", "load_tokenizer", "model_config",
                       "model_fingerprint", "offline", "resolve_model", "usable_positions"),
    # data files and the disk
    "kinject.io": ("bounded_lines", "capped", "file_digest", "iter_lines", "line_cap", "open_text"),  # the line reader
    "kinject.files": ("FAULTS", "atomic_directory", "atomic_file", "atomic_write_text", "check_weights",
                      "check_writable", "weights_problem"),  # FAULTS: errno -> the one line a disk fault reads as
    # processes, plugins, hooks
    "kinject.distributed": ("barrier", "check_fence", "is_main_process", "rank", "world_size"),
    "kinject.registry": ("BASE_CLASSES", "GROUPS", "SINGULAR", "registry"),  # the plugin kinds
    "kinject.cache": ("lock_held", "make_lock", "partial_path"),  # cross-process locks; where a stage is computed
    "kinject.hooks": ("hookimpl", "plugin_manager"),
    "kinject.frontdoor": ("lazy_exports",),  # a library's own front door
    "kinject.deprecation": ("KinjectDeprecationWarning", "renamed", "renamed_function"),  # the promise (a rename)
    "kinject.machine": ("BF16_FLAGS", "cpu_info"),  # the CPU's bf16 instructions (the default: the training library)
    # running a run
    "kinject.context": ("RunContext",),
    "kinject.preparation": ("prepare", "resolved_spec"),
    # the decisions kinject takes for its user, then prepare: what every entry point calls
    "kinject.defaults": ("apply_preset", "apply_protocol", "apply_recommended", "check_protocol", "native_bf16",
                         "prepare_runs", "start_settings"),
    "kinject.choice": ("fold_problem", "fold_run_settings"),
    "kinject.keys": ("plan",),
    "kinject.engine": ("execute", "execute_into", "execute_repeats"),  # a run; into a folder of several; seeds
    "kinject.outputs": ("check_output", "default_output", "run_folder"),
    "kinject.stage_runner": ("stage_cost", "stage_flops"),  # the FLOPs an estimate learns from
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["__version__", *__all__]
__version__ = __import__("kinject").__version__
