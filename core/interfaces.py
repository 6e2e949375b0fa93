"""The four plugin interfaces: Strategy, Task, KnowledgeSource, Evaluator.

Every plugin is a class with a pydantic ``Config`` (unknown fields rejected, every field described) and
a one-line docstring used by ``kinject list``. Nothing here imports torch.
"""

from __future__ import annotations


from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # pragma: no cover
    from kinject.context import RunContext


class PluginConfig(BaseModel):
    """Base of every plugin config: strict (unknown fields are errors) and fully described."""

    model_config = ConfigDict(extra="forbid", validate_default=True, protected_namespaces=())


class _RegisteredName:
    """A plugin class's ``name`` when it sets none: the name its entry point registers it under."""

    def __get__(self, instance: Any, owner: type) -> str:
        from kinject.registry import registered_name

        return registered_name(owner)


class Component:
    """Common base: a name, a config model, a config instance."""

    name: ClassVar[str] = _RegisteredName()  # type: ignore[assignment]
    Config: ClassVar[type[PluginConfig]] = PluginConfig

    def __init__(self, config: PluginConfig | None = None, **overrides: Any):
        self.config = config if config is not None else self.Config(**overrides)

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


# ---------------------------------------------------------------------------------------------- #
class Evaluator(Component):
    """A metric: references and predictions in, named values out.

    A metric may declare sufficient statistics beside ``compute``: :meth:`statistics` gives named columns, one value
    per evaluation unit, and :meth:`from_statistics` the metrics from their sums. A comparison's bootstrap then
    resamples by summing rows, and ``compute`` defaults to the metrics of every unit. A metric that is no function of
    sums (AUROC: ranks) gives :meth:`from_units` instead. Without statistics a comparison calls ``compute`` on every
    resample.
    """

    #: what ``compute`` needs beyond references and predictions, as prediction-record fields (``"scores"``: the
    #: model's raw outputs, in the order of ``labels``): the evaluate stage keeps them in the predictions files,
    #: and ``kinject compare``, grids and reports hand them back (docs/plugins.md "An evaluator").
    needs: ClassVar[tuple[str, ...]] = ()

    def compute(self, references: Sequence[Any], predictions: Sequence[Any], **kwargs: Any) -> dict[str, float]:
        """The metrics of these predictions. Default, for an evaluator with statistics: the metrics of every unit."""
        if type(self).statistics is Evaluator.statistics:
            raise NotImplementedError(f"evaluator {self.name!r} declares neither compute nor statistics")
        return self.metrics_of(self.statistics(references, predictions, **kwargs))

    def statistics(self, references: Sequence[Any], predictions: Sequence[Any], **kwargs: Any) -> dict[Any, Any]:
        """Optional: the metric's sufficient statistics, as named columns of one number per evaluation unit (an
        example; a query where ``groups=`` is given). It takes what ``compute`` takes. Runs compared together get
        the union of their columns; a column a run lacks counts 0 there (F1: a class it never predicts)."""
        raise NotImplementedError

    def from_statistics(self, sums: dict[Any, Any], n: int) -> dict[str, Any]:
        """The metrics from the sums of the :meth:`statistics` columns over ``n`` units. Each sum is an array (one
        element per resample and seed), and so is each metric returned."""
        raise NotImplementedError

    def from_units(self, columns: dict[Any, Any]) -> dict[str, Any]:
        """The metrics from the :meth:`statistics` columns of (re)sampled units: arrays with the units on the last
        axis, resamples and seeds before it. Default: :meth:`from_statistics` of their sums. A metric that is no
        function of sums overrides it (AUROC); a comparison then recomputes it on each resample."""
        n = next(iter(columns.values())).shape[-1] if columns else 0
        return self.from_statistics({key: column.sum(axis=-1) for key, column in columns.items()}, n)

    def metrics_of(self, columns: dict[Any, Any]) -> dict[str, float]:
        """The metrics, as floats, of the units whose :meth:`statistics` are ``columns``, each unit counted once."""
        import numpy as np

        arrays = {key: np.asarray(column, dtype=float) for key, column in columns.items()}
        return {name: float(value) for name, value in self.from_units(arrays).items()}

    def metric_names(self) -> list[str]:
        """The names ``compute`` returns with this config (how `kinject compare`, sweeps and searches find the
        evaluator of a metric). Every evaluator declares them."""
        raise NotImplementedError(f"evaluator {self.name!r} does not declare its metric names")

    def greater_is_better(self, metric: str) -> bool:
        """The metric's direction: True (default) when a higher value is better, False for an error or a loss (ECE).
        Dev selection, sweeps, leaderboards and verdicts read it."""
        return True

    @classmethod
    def options_for(cls, metric: str) -> dict[str, Any] | None:
        """The options under which this evaluator reports ``metric`` (None: it never does), so a metric named
        in a run's metrics.json can be recomputed when the run's task is unknown. Default: its defaults."""
        try:
            return {} if metric in cls(cls.Config()).metric_names() else None
        except Exception:  # noqa: BLE001 - an evaluator without usable defaults defines nothing here
            return None


class MetricRef(PluginConfig):
    """An evaluator by name with its options (a task's metric list)."""

    name: str = Field(..., description="Evaluator name (see `kinject list evaluators`).")
    options: dict[str, Any] = Field(default_factory=dict, description="The evaluator's config fields.")

    def build(self) -> Evaluator:
        """The configured evaluator (from the registry; an invalid option is a SpecError naming it)."""
        from pydantic import ValidationError

        from kinject.errors import SpecError
        from kinject.registry import registry
        from kinject.spec_reading import format_validation_error

        cls = registry("evaluators").get(self.name)
        try:
            return cls(cls.Config.model_validate(self.options))
        except ValidationError as exc:
            raise SpecError(format_validation_error(exc, prefix=f"metrics.{self.name}", model=cls.Config)) from None


# ---------------------------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Triple:
    """One knowledge-graph edge, with texts for the parts (ids when no text is known)."""

    head: str
    relation: str
    tail: str
    weight: float = 1.0


class KnowledgeSource(Component):
    """Knowledge to inject: a graph of triples, a text corpus, or a teacher model."""

    kind: ClassVar[str] = "triples"  # "triples" | "corpus" | "model"

    def check(self, env: "Environment") -> None:
        """Raise a DataError if the source's files are missing or unreadable (cheap; before a run)."""

    def fingerprint(self, env: "Environment") -> str:
        """A string that changes whenever the knowledge this source yields changes (for cache keys)."""
        return self.config.model_dump_json()

    def iter_triples(self, env: "Environment") -> Iterator[Triple]:  # kind == "triples"
        raise NotImplementedError(f"{self.name} yields no triples")

    def entity_texts(self, env: "Environment") -> Iterator[tuple[str, tuple[str, ...], str]]:
        """(name, synonyms, definition) of the graph's entities where the source knows them (e.g. HPO terms); used
        to link texts to the graph (the ``context`` strategy). Default: none."""
        return iter(())

    def iter_texts(self, env: "Environment") -> Iterator[str]:  # kind == "corpus"
        raise NotImplementedError(f"{self.name} yields no texts")

    def model_path(self, env: "Environment") -> str:  # kind == "model"
        raise NotImplementedError(f"{self.name} is not a model")


# ---------------------------------------------------------------------------------------------- #
@dataclass
class Environment:
    """Where things are and how much to do: shared by tasks, sources and strategies."""

    data_dir: Path
    cache_dir: Path
    seed: int = 42
    limit: int | None = None
    offline: bool = False
    extras: dict[str, Any] = field(default_factory=dict)
    max_chars: int | None = None  # texts are cut to this many characters when read (model.max_length x 128)
    fold: tuple[int, int, int] | None = None  # cross-validation (i, k, seed): train/dev are folds of train


#: A stage that writes this file (``{section: {name: number}}``) adds its sections to the run's metrics.json (e.g. the
#: knowledge probe's ``probe``); numbers only, so ``--repeats`` summarises them over seeds like the task metrics.
RUN_METRICS_FILE = "run-metrics.json"


@dataclass(frozen=True)
class Head:
    """The task-specific model on top of the encoder (BLURB section 5: a linear layer)."""

    kind: str  # "sequence" | "token"
    num_labels: int
    problem_type: str = "single_label_classification"  # | multi_label_classification | regression
    labels: tuple[str, ...] = ()
    # A task's model transform, "module:function" (``function(model, head) -> model``): applied to the task model the
    # kernel builds, recorded in config.json as ``kinject_head_model`` and applied again when the model is loaded
    # (e.g. a bi-encoder scoring pairs by cosine: kinject.tasks.biencoder). None: the plain linear head.
    model: str | None = None


class Task(Component):
    """A downstream benchmark: reads splits, turns them into model features, scores predictions.

    ``examples`` of every subclass runs under the environment's text cap (``env.max_chars``;
    :func:`kinject.io.text_cap`): texts the :mod:`kinject.io` readers return are cut to what the model can read.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("examples")
        if own is not None and not getattr(own, "_text_capped", False):
            from kinject.splits import text_capped

            cls.examples = text_capped(own)

    kind: ClassVar[str] = "classification"
    train_split: ClassVar[str] = "train"
    eval_splits: ClassVar[tuple[str, ...]] = ("dev", "test")
    dataset: ClassVar[str] = ""  # folder name under the data dir ("" if none)
    #: the unit of evaluation (resampled, limited, folded whole): what examples sharing a ``group`` are ("document",
    #: "query", "child term"), and what an example without one is ("sentence")
    unit, example_unit = "group", "example"

    def units(self, examples: list) -> tuple[int, str]:
        """How many units ``examples`` hold and what one is, e.g. ``(924, "sentence")``."""
        from kinject.splits import unit_key

        keys = {unit_key(ex, i) for i, ex in enumerate(examples)}
        return len(keys), self.unit if any(isinstance(ex, dict) and "group" in ex for ex in examples) else \
            self.example_unit

    def check(self, env: Environment) -> None:
        """Raise DataMissingError (where it looked, how to get it) if the data is not there."""

    def validate(self, env: Environment) -> None:
        """Read every split once so malformed data fails before any training (raise DataError)."""
        for split in (self.train_split, *self.eval_splits):
            self.examples(split, env)

    def prepare_data(self, env: Environment) -> None:
        """``check`` and ``validate``, recording the files they read (``read_files``: the data fingerprint)."""
        from kinject.io import track_reads

        with track_reads() as seen:
            self.check(env)
            self.validate(env)
        self.read_files = sorted(seen)

    def facts(self, split: str, env: Environment) -> list[Triple]:
        """The knowledge-graph facts this split's items are built from (e.g. hpo-isa's is-a edges; default: none). A
        run holds them out of every knowledge source (``knowledge.exclude``), so every method sees the same facts."""
        return []

    def describe_data(self, env: Environment) -> str:
        """Which dataset a run used (printed and recorded in run.json)."""
        return self.dataset or self.name

    def head(self, env: Environment) -> Head:
        raise NotImplementedError

    def examples(self, split: str, env: Environment) -> list[dict]:
        raise NotImplementedError

    def featurize(self, tokenizer: Any, examples: list[dict], max_length: int, env: Environment) -> list[dict]:
        raise NotImplementedError

    def collator(self, tokenizer: Any) -> Callable:
        raise NotImplementedError

    def score(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
              env: Environment) -> dict[str, float]:
        raise NotImplementedError

    #: counts ``score`` reports beside its evaluators' metrics (e.g. "queries")
    counts: ClassVar[tuple[str, ...]] = ()

    def metric_refs(self) -> list["MetricRef"]:
        """The evaluators ``score`` runs, with their options (e.g. ChemProt's positive classes)."""
        return []

    def metric_names(self) -> list[str]:
        """Every name ``score`` reports: its evaluators' declared names, then its ``counts``. Known before any
        scoring, so a misspelt metric fails in ``prepare``."""
        return [name for ref in self.metric_refs() for name in ref.build().metric_names()] + list(self.counts)

    def primary_metric(self) -> str:
        """The metric a table reports first (default: the first metric of the first evaluator)."""
        names = self.metric_names()
        if not names:
            raise NotImplementedError(f"task {self.name!r} declares no metrics (metric_refs)")
        return names[0]

    def greater_is_better(self, metric: str) -> bool:
        """The direction of one of the task's metrics (its evaluator's :meth:`Evaluator.greater_is_better`; counts
        and unknown names: True)."""
        for ref in self.metric_refs():
            evaluator = ref.build()
            if metric in evaluator.metric_names():
                return evaluator.greater_is_better(metric)
        return True

    def selection_metric(self) -> str:
        """The metric searches optimise (head masks, sweeps): the primary one unless that is too coarse."""
        return self.primary_metric()

    def alternatives(self, env: Environment, spec: Any) -> dict[str, list]:
        """Settings worth choosing by cross-validation when the train split is small (dotted spec field -> the
        values to try, e.g. ``{"task.encoder": ["cross", "bi"]}``; :func:`kinject.defaults.choose`,
        docs/training.md). Default: none."""
        return {}

    #: settings a run starts from unless the spec sets them: {"training": {...}, "model": {...}}
    recommended: ClassVar[dict[str, dict[str, Any]]] = {}
    #: how ``recommended`` was chosen (a sweep on dev, with its command): shown by `kinject info` and run.json
    recommended_note: ClassVar[str] = ""

    def predictions(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
                    env: Environment) -> list[dict]:
        """One JSON record per evaluation unit (``id``, ``gold``, ``pred``, optional ``scores``), so any metric
        can be recomputed and runs paired example by example (``kinject compare``)."""
        raise NotImplementedError

    def data_files(self, env: Environment) -> list[Path]:
        """The files this task reads (their names and content digests go into cache keys): those ``prepare_data`` saw it
        read, else the dataset folder's files."""
        if getattr(self, "read_files", None):
            return list(self.read_files)
        if not self.dataset:
            return []
        folder = Path(env.data_dir) / self.dataset
        return sorted(p for p in folder.rglob("*") if p.is_file())[:2000] if folder.is_dir() else []


class TaskGroup(Task):
    """A set of tasks run one after another and summarised (e.g. the BLURB suite)."""

    kind: ClassVar[str] = "group"

    def members(self, env: Environment) -> list[str]:
        raise NotImplementedError

    def summarize(self, member_metrics: dict[str, dict], env: Environment) -> dict[str, Any]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------- #
class StageConfig(BaseModel):
    """Base of stage configs: strict, and every field is part of the stage's key unless marked ``NOT_KEYED``
    (:data:`kinject.fingerprint.NOT_KEYED`)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    def cost(self, run: "RunContext") -> float | None:
        """The stage's FLOPs (sized by the prepared ``run``'s model and data; :mod:`kinject.training.cost`),
        for ``--dry-run``'s estimate (:mod:`kinject.cli.estimate`); None: not stated (a stage's fixed overhead)."""


@dataclass
class StageContext:
    """What a stage body sees besides its config: its folders and the inputs' outputs - never the run."""

    name: str
    key: str
    out: Path  # write the stage's results here (renamed into the cache when the body returns)
    work: Path  # persistent between attempts: trainer checkpoints for --resume
    inputs: dict[str, Path]  # input stage name -> its finished output folder
    resume: bool = False
    cache_dir: Path = Path(".")
    offline: bool = False

    def hooks(self):
        from kinject.hooks import plugin_manager

        return plugin_manager().hook


@dataclass
class Stage:
    """One cached step of a strategy, declared: a typed config, named inputs and a module-level body.

    The body is called as ``body(config, ctx)`` and sees nothing else of the run, so it cannot read a
    setting its key does not hold. Key = hash(name + keyed config fields + input keys + the source of the
    modules that implement the body + library versions); see :mod:`kinject.fingerprint`.
    """

    name: str
    body: Callable[[Any, StageContext], None]
    config: BaseModel
    inputs: tuple[str, ...] = ()
    produces_model: bool = False
    artifacts: tuple[str, ...] = ()  # files/folders of the stage output copied into the run directory
    published: tuple[str, ...] = ()  # of those, the ones a run publishes beside its model (`kinject push`)
    code: tuple[str, ...] = ()  # modules whose every definition the stage's key holds, besides what its body names
    libraries: tuple[str, ...] = ("torch", "transformers", "tokenizers")  # their versions go into the key
    spread: bool = False  # under torchrun/accelerate launch, consecutive spread stages are shared out over the
    #                       processes, each running in a fresh single-process worker (e.g. MoP's adapters)


class Strategy(Component):
    """A knowledge-injection method: a sequence of named, cached stages.

    ``consumes`` names the knowledge-source kinds the strategy reads ("triples", "corpus", "model"); a
    configured source of another kind is an error, not a silent no-op.
    """

    consumes: ClassVar[frozenset[str]] = frozenset()
    needs_task: ClassVar[bool] = True  # False: the strategy can run without a downstream task
    #: the task shapes it supports, by the task head's kind ("sequence": classification, pairs, retrieval,
    #: regression; "token": NER, PICO); a run on another is one line in ``prepare`` (`kinject list` shows them)
    task_kinds: ClassVar[frozenset[str]] = frozenset({"sequence", "token"})
    #: named hyper-parameter presets, e.g. {"paper": {"strategy": {...}, "training": {...}, "model": {...}}}: a run's
    #: ``protocol`` applies one to every field the run does not set (each method's docs list where they differ)
    protocols: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {}

    def validate(self, run: "RunContext") -> Any:
        """Raise a KinjectError for anything in the spec, data or sources the strategy cannot use, and return what
        it resolved that ``stages`` needs (a teacher, a default source, a given mask): the engine keeps it in
        ``run.resolved``.

        Runs in ``prepare``, before any stage. The default checks the source kinds against ``consumes``.
        """
        from kinject.errors import SpecError

        for i, source in enumerate(run.sources):
            if source.kind not in self.consumes:
                wanted = f"it reads {', '.join(sorted(self.consumes))} sources" if self.consumes else \
                    "it reads no knowledge source"
                raise SpecError(f"sources.{i}: strategy {self.name!r} does not use a {source.kind} source "
                                f"({source.name!r}): {wanted}; remove it from sources")

    @classmethod
    def label(cls, config: Any) -> str:
        """The arm's name for ``config`` in comparisons, leaderboards, run.json and the card: the strategy's name,
        and a method with variants says which ran (``kimera/no-mask``). The default is the name."""
        return cls.name

    def stages(self, run: "RunContext") -> list[Stage]:
        """The stages of a run, in order (the training library, :mod:`kinject.training`, builds the shared
        ones). What ``validate`` resolved is in ``run.resolved``."""
        raise NotImplementedError

    @classmethod
    def shared_files(cls, run_dir: Path, info: dict) -> dict[str, Path]:
        """What a run of this strategy publishes (e.g. on the Hugging Face Hub: `kinject push`): repository path ->
        local file or folder. Default: the run's ``model/`` at the top level, and what its stages publish beside it
        (``Stage.published``, run.json ``published``). ``info`` is the run's run.json."""
        model = Path(run_dir) / "model"
        files = {path.name: path for path in sorted(model.iterdir())} if model.is_dir() else {}
        extra = {name: Path(run_dir) / name for name in info.get("published") or [] if isinstance(name, str)
                 and "/" not in name and name not in ("..", ".") and (Path(run_dir) / name).exists()}
        return {**files, **extra}
