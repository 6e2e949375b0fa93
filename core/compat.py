"""kinject's compatibility promise, in one table.

The public API is the names the front doors export (:mod:`kinject.api`, :mod:`kinject.tasks`,
:mod:`kinject.plugins.training`, ``.knowledge``, ``.evidence``; docs/plugins.md "Every promised name"). A module or
name that moves keeps working, from its old place, for one minor release, with a :class:`KinjectDeprecationWarning`
naming its replacement; :data:`MOVED` says what moved where, and from which release the old place is gone. After
that release an import of the old place fails, and :func:`explain_import_error` turns the failure into one line
naming the move (docs/plugins.md#compatibility-and-migration).

`kinject list` marks a plugin whose package imports a moved module (from this table;
:mod:`kinject.plugins.cli.describe`).
A plugin may declare the kinject it needs in its distribution's metadata (``dependencies = ["kinject>=0.1,<0.3"]``,
i.e. ``Requires-Dist``); :func:`api_mismatch` says, in one line, when the running kinject does not satisfy it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any

MIGRATION = "docs/plugins.md#compatibility-and-migration"


class KinjectDeprecationWarning(DeprecationWarning):
    """An old place of a moved kinject module or name was used. Shown by default (a plain DeprecationWarning raised
    inside a plugin is hidden by Python's default filters)."""


@dataclass(frozen=True)
class Moved:
    """Where an old module or name went. ``new[0]`` is the replacement a plugin should import; an old module whose
    names went to several modules looks them up in ``new`` in order."""

    new: tuple[str, ...]
    since: str  # the release it moved in
    removed_in: str  # the first release that no longer serves the old place


def _moved_names(old: str, new: str, names: str, since: str = "0.1.0", removed_in: str = "0.2.0") -> dict[str, Moved]:
    return {f"{old}:{name}": Moved((f"{new}:{name}",), since, removed_in) for name in names.split()}


_TRAINING = ("kinject.plugins.training", "kinject.api", "kinject.plugins.training.loop",
             "kinject.plugins.training.batching", "kinject.plugins.training.prediction",
             "kinject.plugins.training.selection", "kinject.plugins.training.peft_tuning",
             "kinject.plugins.training.task_models", "kinject.plugins.training.stages")
_SOURCES = ("corpus", "filters", "hpo", "model", "readers", "resolve", "triples", "umls")

#: old module ("a.b") or name ("a.b:Name") -> where it is now. The one table of the compatibility promise; the
#: migration table in docs/plugins.md is this table (tests/core/test_core_compat.py checks they agree).
MOVED: dict[str, Moved] = {
    # 0.1.0: the fine-tune library left the kernel (kinject.stages, kinject.training -> kinject.plugins.training)
    "kinject.stages": Moved(_TRAINING, "0.1.0", "0.2.0"),
    "kinject.training": Moved(_TRAINING, "0.1.0", "0.2.0"),
    **_moved_names("kinject.api", "kinject.plugins.training",
                   "EpochCallback EvaluateConfig FinetuneConfig HookCallback MeanPooler PaddingCounter "
                   "build_task_model dev_scorer evaluate_body evaluate_model evaluate_stage finetune_body finetune_stage float32_head "
                   "last_checkpoint length_grouped_batches load_task_model predict quiet_progress save_model train "
                   "training_arguments useful_token_fraction write_predictions"),
    # 0.1.0: knowledge sources left the kernel (kinject.sources.* -> the knowledge library)
    "kinject.sources": Moved(("kinject.plugins.knowledge", "kinject.plugins.knowledge.sources"), "0.1.0", "0.2.0"),
    **{f"kinject.sources.{name}": Moved(("kinject.plugins.knowledge", f"kinject.plugins.knowledge.sources.{name}"),
                                        "0.1.0", "0.2.0") for name in _SOURCES},
    # 0.1.0: packing and continued masked-LM training became public builders of the knowledge library
    "kinject.plugins.pretrain.mlm": Moved(("kinject.plugins.knowledge", "kinject.plugins.knowledge.masked_lm",
                                           "kinject.plugins.pretrain.perplexity"), "0.1.0", "0.2.0"),
    "kinject.plugins.pretrain.masking": Moved(("kinject.plugins.knowledge", "kinject.plugins.knowledge.masking",
                                               "kinject.plugins.knowledge.packing"), "0.1.0", "0.2.0"),
    **_moved_names("kinject.plugins.pretrain.stages", "kinject.plugins.knowledge.mlm", "MlmConfig mlm_body"),
    **_moved_names("kinject.plugins.pretrain.stages", "kinject.plugins.knowledge", "MaskingConfig"),
    **_moved_names("kinject.plugins.pretrain.stages", "kinject.plugins.knowledge.packing",
                   "PackConfig pack_body stage_tokenizer"),
    # 0.1.0: the model catalogue and loaders left the kernel for the training library (kinject.models keeps the
    # hooks' kernel side: resolve_model, offline, masked_mean)
    **_moved_names("kinject.api", "kinject.plugins.training",
                   "keep_layers load_encoder load_tokenizer usable_positions"),
    **_moved_names("kinject.models", "kinject.plugins.training",
                   "keep_layers load_encoder load_tokenizer minilm_path model_config usable_positions"),
    **_moved_names("kinject.models", "kinject.plugins.training.models", "TINY_VERSION build_tiny check_model_settings"),
    # 0.1.0: what only the libraries and tasks use: a numpy value made JSON-writable, mean pooling, a package's data
    **_moved_names("kinject.api", "kinject.plugins.training", "plain"),
    **_moved_names("kinject.io", "kinject.plugins.training", "plain"),
    **_moved_names("kinject.api", "kinject.tasks", "masked_mean package_folder"),
    **_moved_names("kinject.models", "kinject.tasks", "masked_mean"),
    **_moved_names("kinject.io", "kinject.tasks", "package_folder"),
    # 0.1.0: the rule behind training.bf16's default (native_bf16) is the training library's decision
    **{f"{old}:native_bf16": Moved(("kinject.plugins.training:native_bf16",), "0.1.0", "0.2.0")
       for old in ("kinject.models", "kinject.machine", "kinject.api")},
    # 0.1.0: the data formats' readers left the kernel for the data layer (the kernel keeps its line reader)
    **_moved_names("kinject.api", "kinject.tasks",
                   "count_lines first_line progress read_csv_columns read_jsonl read_tsv text_field"),
    # 0.1.0: the dose a stage consumed is the knowledge library's (the kernel asks it through kinject_run_dose)
    **_moved_names("kinject.api", "kinject.plugins.knowledge", "write_dose"),
    # 0.1.0: the front ends left the kernel: the `kinject` program and `kinject.run` are the built-in command plugin's,
    # the run log a hook plugin beside the trackers (never promised, but test and tool scripts import them)
    "kinject.cli": Moved(("kinject.plugins.cli.app",), "0.1.0", "0.2.0"),
    "kinject.cli.main": Moved(("kinject.plugins.cli.app",), "0.1.0", "0.2.0"),
    "kinject.hooks.default": Moved(("kinject.plugins.trackers.runlog",), "0.1.0", "0.2.0"),
    "kinject.notebook": Moved(("kinject.plugins.cli.python",), "0.1.0", "0.2.0"),
    # 0.1.0: the settings a run starts from (protocol presets, a task's recommended values) are the training library's
    **_moved_names("kinject.spec", "kinject.plugins.training", "apply_preset apply_protocol apply_recommended"),
    **_moved_names("kinject.preparation", "kinject.plugins.training", "check_protocol"),
    **_moved_names("kinject.preparation", "kinject.plugins.training.presets", "QUICK"),
    # 0.1.0: what the front ends share - a spec read from YAML and --set, the metrics table - is the training library's;
    # why a stage misses and which plugins import moved modules, the `kinject` program's
    **_moved_names("kinject.api", "kinject.plugins.training",
                   "apply_overrides format_value load_spec_file load_yaml print_metrics"),
    **_moved_names("kinject.spec_input", "kinject.plugins.training",
                   "apply_overrides load_spec_file load_yaml resolve_config_paths"),
    **_moved_names("kinject.api", "kinject.plugins.cli.misses", "explain_miss"),
    **_moved_names("kinject.keys", "kinject.plugins.cli.misses", "explain_miss record_differences"),
    **_moved_names("kinject.api", "kinject.plugins.cli.describe", "deprecated_imports"),
    # 0.1.0: the training settings a stage holds (a fine-tune's, a method stage's, a strategy's overrides) are the
    # training library's policy
    **_moved_names("kinject.api", "kinject.plugins.training", "TrainingOverrides"),
    **_moved_names("kinject.spec", "kinject.plugins.training", "TrainingOverrides"),
    "kinject.spec:TrainingSpec.for_training": Moved(("kinject.plugins.training:finetune_training",), "0.1.0", "0.2.0"),
    "kinject.spec:TrainingSpec.for_method_stage": Moved(("kinject.plugins.training:method_stage_training",), "0.1.0",
                                                        "0.2.0"),
    # 0.1.0: a run over several seeds and the summaries over seeds are the training library's (load: kinject.load)
    "kinject.results": Moved(("kinject.plugins.training", "kinject.plugins.cli.python"), "0.1.0", "0.2.0"),
    **_moved_names("kinject.api", "kinject.plugins.training", "execute_repeats plural summarize_seeds"),
    **_moved_names("kinject.engine", "kinject.plugins.training", "execute_repeats"),
    # 0.1.0: how held-out facts are matched is the knowledge library's (the engine asks it: kinject_held_out_facts)
    **_moved_names("kinject.api", "kinject.plugins.knowledge", "HeldOutFacts"),
    **_moved_names("kinject.knowledge", "kinject.plugins.knowledge", "HeldOutFacts read_fact_file"),
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _kinject_version() -> str:
    return sys.modules["kinject"].__version__ if "kinject" in sys.modules else "0"


def served(moved: Moved) -> bool:
    """Whether this kinject still serves the old place (its version is below ``removed_in``)."""
    return _version(_kinject_version()) < _version(moved.removed_in)


def replacement(old: str) -> str:
    """'the replacement' of an old module or name, as a plugin author reads it (dotted)."""
    moved = MOVED[old]
    if ":" in old:
        return moved.new[0].replace(":", ".")
    if moved.new[0] in ("kinject.plugins.training", "kinject.plugins.knowledge", "kinject.api"):
        return f"{moved.new[0]} (its front door; docs/plugins.md lists every name)"
    return moved.new[0]


def _warn(old: str, stacklevel: int) -> None:
    moved = MOVED[old]
    warnings.warn(f"{old.replace(':', '.')} moved in kinject {moved.since}: import it from {replacement(old)}; the old "
                  f"place goes in kinject {moved.removed_in} (see {MIGRATION})", KinjectDeprecationWarning,
                  stacklevel=stacklevel)


def moved_attribute(module: str, name: str, stacklevel: int = 2) -> Any:
    """The value of a moved ``module.name`` (with a warning); AttributeError when it did not move here."""
    old = f"{module}:{name}"
    moved = MOVED.get(old)
    if moved is None or not served(moved):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _warn(old, stacklevel + 1)
    target, _, attr = moved.new[0].partition(":")
    return getattr(importlib.import_module(target), attr)


def call_moved(old: str, *args: Any, **kwargs: Any) -> Any:
    """Call what the moved method or function ``old`` (``"module:Class.method"``) is now, with a warning."""
    moved = MOVED[old]
    if not served(moved):
        raise AttributeError(f"{old.replace(':', '.')} moved to {replacement(old)} in kinject {moved.since}")
    _warn(old, 3)
    target, _, attr = moved.new[0].partition(":")
    return getattr(importlib.import_module(target), attr)(*args, **kwargs)


class _Alias(importlib.abc.Loader):
    """Creates an old module: a package whose names are looked up in the modules that hold them now."""

    def __init__(self, old: str):
        self.old = old

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        moved = MOVED[self.old]
        module.__path__ = []  # a package, so the old submodules (kinject.sources.hpo) import under it
        module.__doc__ = f"Moved in kinject {moved.since} to {moved.new[0]} (this alias goes in {moved.removed_in})."
        old = self.old

        def __getattr__(name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            for target in MOVED[old].new:
                value = getattr(importlib.import_module(target), name, _MISSING)
                if value is not _MISSING:
                    return value
            raise AttributeError(f"module {old!r} (moved to {MOVED[old].new[0]}) has no attribute {name!r}")

        module.__getattr__ = __getattr__
        _warn(self.old, 3)  # importlib's own frames are skipped: the importer's line


class _Patched(importlib.abc.Loader):
    """Wraps the loader of a module that still exists but lost names: after it runs, the module's ``__getattr__``
    falls back to :func:`moved_attribute`. Every other loader method is the original's."""

    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._loader, attr)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        own = getattr(module, "__getattr__", None)
        name = self._name

        def __getattr__(attr: str) -> Any:
            if own is not None:
                try:
                    return own(attr)
                except AttributeError:
                    pass
            return moved_attribute(name, attr, stacklevel=3)

        module.__getattr__ = __getattr__


_MISSING = object()
_PATCHED = {old.partition(":")[0] for old in MOVED if ":" in old}


class _Finder(importlib.abc.MetaPathFinder):
    """Serves the old modules of :data:`MOVED`, and patches the modules that lost names."""

    def find_spec(self, fullname, path=None, target=None):
        moved = MOVED.get(fullname)
        if moved is not None:
            return importlib.machinery.ModuleSpec(fullname, _Alias(fullname), is_package=True) if served(moved) \
                else None
        if fullname not in _PATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Patched(spec.loader, fullname)
                return spec
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once) and show kinject's deprecation warnings."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
        warnings.filterwarnings("default", category=KinjectDeprecationWarning)


# -- one line for a plugin that needs what this kinject does not have ------------------------------------------ #
def _moved_entry(module: str, name: str | None) -> tuple[str, Moved] | None:
    for old in ([f"{module}:{name}"] if name else []) + [module]:
        if old in MOVED:
            return old, MOVED[old]
    parent = module.rpartition(".")[0]  # kinject.sources.hpo.x: under a moved package
    return _moved_entry(parent, None) if parent.startswith("kinject.") else None


def explain_import_error(exc: BaseException) -> str | None:
    """For an ImportError naming a ``kinject.*`` module or name this kinject does not have: 'imports X, which
    kinject V does not have (moved to Y in kinject S; see the migration notes)'. None for any other error."""
    if not isinstance(exc, ImportError):
        return None
    module, name = exc.name or "", None
    found = re.match(r"cannot import name '([\w]+)' from '([\w.]+)'", str(exc))
    if found:
        name, module = found.group(1), found.group(2)
    if not (module == "kinject" or module.startswith("kinject.")):
        return None
    what = f"{name} from {module}" if name else module
    entry = _moved_entry(module, name)
    version = _kinject_version()
    if entry is None:
        return f"imports {what}, which kinject {version} does not have (not a promised name; see {MIGRATION})"
    old, moved = entry
    return (f"imports {what}, which kinject {version} does not have (moved to {replacement(old)} in kinject "
            f"{moved.since}; see {MIGRATION})")


def api_mismatch(distribution: Any) -> str:
    """'' when ``distribution`` (an importlib.metadata Distribution) declares no kinject requirement or this kinject
    satisfies it; else 'needs kinject>=0.2,<0.3; this is kinject 0.1.0'."""
    from packaging.requirements import InvalidRequirement, Requirement

    for line in (getattr(distribution, "requires", None) or []):
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower() != "kinject" or requirement.marker is not None and not requirement.marker.evaluate(
                {"extra": ""}):
            continue
        version = _kinject_version()
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            return f"needs kinject{requirement.specifier}; this is kinject {version}"
    return ""
