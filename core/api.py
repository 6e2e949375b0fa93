"""kinject's public API: everything a plugin needs - a strategy, task, knowledge source, evaluator, command or
hook - from one import (docs/plugins.md). Plugins import the kernel through this module only; what is not here
is internal and may change. The shared fine-tune and evaluate stages are built on it by the training library
(:mod:`kinject.plugins.training`), the knowledge-graph and masked-LM builders by :mod:`kinject.plugins.knowledge`.

A stage's cache key covers the code it runs, found through its imports; names imported from here count as
imports of the module that defines them (``__kinject_facade__``), so importing this facade does not widen a key.
"""

from __future__ import annotations

__kinject_facade__ = True

from kinject import __version__

# -- the interfaces a plugin implements ---------------------------------------------------------------- #
from kinject.interfaces import (RUN_METRICS_FILE, Component, Environment, Evaluator, Head, KnowledgeSource, MetricRef, PluginConfig,
                                Stage, StageConfig, StageContext, Strategy, Task, TaskGroup, Triple)
# -- what a stage config holds (its key) --------------------------------------------------------------- #
from kinject.fingerprint import NOT_KEYED, stable_hash
from kinject.refs import (HoldOutRef, InputTransform, ModelRef, SourceRef, TaskRef, files_fingerprint,
                          model_fingerprint)
from kinject.spec import (FILE_PATH, KnowledgeSpec, ModelSpec, PeftSpec, PluginRef, RunSpec, TrainingOverrides,
                          TrainingSpec, validate_plugin_config)
# -- knowledge on one footing: held-out facts, the dose a stage consumed --------------------------------- #
from kinject.knowledge import (DOSE_FILE, HeldOutFacts, HeldOutSource, fact_key, fact_keys, facts_digest,
                               held_out_count, words, write_dose)
# -- errors (one line, exit 2) ------------------------------------------------------------------------- #
from kinject.errors import (DataError, DataMissingError, Interrupted, KinjectError, LeaseLost, PluginLoadError,
                            SpecError, UnknownNameError)
# -- models ------------------------------------------------------------------------------------------- #
from kinject.models import (keep_layers, load_encoder, load_tokenizer, masked_mean, native_bf16, offline, resolve_model,
                            usable_positions)
# -- data files and the disk -------------------------------------------------------------------------- #
from kinject.io import (bounded_lines, count_lines, file_digest, first_line, iter_lines, line_cap, open_text, package_folder, plain, progress,
                        read_csv_columns, read_jsonl, read_tsv, text_field)
from kinject.files import (FilesystemError, atomic_directory, atomic_file, atomic_write_text, check_weights,
                           check_writable, weights_problem)
# -- processes, plugins, hooks ----------------------------------------------------------------------- #
from kinject.distributed import barrier, is_main_process, rank, world_size
from kinject.registry import registry
from kinject.cache import lock_held, make_lock  # cross-process locks of the cache's kind (flock or lease)
from kinject.hooks import hookimpl, plugin_manager
from kinject.results import print_metrics, summarize_seeds
# -- running specs (tools such as the STILT matrix or a grid) -------------------------------------------- #
from kinject.spec import (apply_overrides, build_spec, default_cache_dir, default_data_dir, format_validation_error,
                          load_spec_file, load_yaml)
from kinject.engine import RunContext, execute, plan, prepare, run_folder
from kinject.planning import check_fence  # a long stage body's check that its lease still holds

__all__ = ["__version__", *(name for name in dir() if not name.startswith("_") and name != "annotations")]
