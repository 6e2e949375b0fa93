"""kinject's public API for plugin authors: the interfaces a strategy, task, knowledge source, evaluator, model
provider, command or hook implements, the stage contract, the specs, and the kernel's helpers a plugin calls, from
one import (docs/plugins.md lists every name). A plugin imports the kernel through this module only; what is not here
is internal and may change. The libraries' builders are in their own front doors: :mod:`kinject.training`,
:mod:`kinject.knowledge`, :mod:`kinject.evidence`, :mod:`kinject.tasks`.

Names are imported from their defining module on first use (``from kinject.api import Stage`` loads the interfaces,
not the engine).
"""

from __future__ import annotations

from kinject.frontdoor import lazy_exports

_EXPORTS = {  # module -> the names it defines that a plugin is promised
    # the interfaces a plugin implements
    "kinject.interfaces": ("RUN_METRICS_FILE", "Environment", "Evaluator", "Head", "KnowledgeSource", "MetricRef",
                           "PluginConfig", "Stage", "StageConfig", "StageContext", "Strategy", "Task", "TaskGroup",
                           "Triple"),
    "kinject.models": ("ModelProvider", "keep_layers", "load_encoder", "load_tokenizer", "model_fingerprint",
                       "offline", "resolve_model", "usable_positions"),
    # what a stage config holds (its key)
    "kinject.fingerprint": ("NOT_KEYED", "stable_hash"),
    "kinject.refs": ("HoldOutRef", "InputTransform", "ModelRef", "SourceRef", "TaskRef", "files_fingerprint"),
    # specs, and a plugin's config checked
    "kinject.spec": ("MAX_EPOCHS", "MAX_STEPS", "ModelSpec", "PeftSpec", "PluginRef", "RunSpec", "TrainingSpec"),
    "kinject.spec_reading": ("FILE_PATH", "apply_overrides", "build_spec", "default_cache_dir", "default_data_dir",
                             "format_validation_error", "validate_plugin_config"),
    # knowledge on one footing: how facts are keyed and matched, the hold-out the engine applies to every source
    "kinject.facts": ("DEFAULT_EXCLUDE", "HeldOutFacts", "HeldOutSource", "fact_key", "facts_digest", "held_out_count",
                      "words"),
    # errors (one line, exit 2; Interrupted: exit 130/143)
    "kinject.errors": ("DataError", "DataMissingError", "Interrupted", "KinjectError", "PluginLoadError", "SpecError",
                       "UnknownNameError"),
    # data files and the disk
    "kinject.io": ("bounded_lines", "capped", "iter_lines", "line_cap", "open_text"),  # the line reader
    "kinject.files": ("atomic_directory", "atomic_file", "atomic_write_text", "check_weights", "weights_problem"),
    "kinject.records": ("read_record", "read_run"),  # a file kinject wrote for itself, read back like user input
    # processes, plugins, hooks
    "kinject.distributed": ("barrier", "check_fence", "is_main_process", "world_size"),
    "kinject.registry": ("registry",),
    "kinject.hooks": ("hookimpl", "plugin_manager"),
    "kinject.frontdoor": ("lazy_exports",),  # a library's own front door
    "kinject.deprecation": ("KinjectDeprecationWarning",),
    # running runs (a command of a plugin's own, a matrix, a notebook)
    "kinject.context": ("RunContext",),
    "kinject.defaults": ("prepare_runs",),  # the decisions kinject takes for its user, then prepare
    "kinject.preparation": ("prepare",),
    "kinject.keys": ("plan",),
    "kinject.engine": ("execute",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["__version__", *__all__]
__version__ = __import__("kinject").__version__
