"""The four plugin interfaces: Strategy, Task, KnowledgeSource, Evaluator.

Every plugin is a class with a pydantic ``Config`` (unknown fields rejected, every field described) and
a one-line docstring used by ``kinject list``. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Sequence

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # pragma: no cover
    from kinject.engine import RunContext, StageContext


class PluginConfig(BaseModel):
    """Base of every plugin config: strict (unknown fields are errors) and fully described."""

    model_config = ConfigDict(extra="forbid", validate_default=True, protected_namespaces=())


class Component:
    """Common base: a name, a config model, a config instance."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[PluginConfig]] = PluginConfig

    def __init__(self, config: PluginConfig | None = None, **overrides: Any):
        self.config = config if config is not None else self.Config(**overrides)

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""


# ---------------------------------------------------------------------------------------------- #
class Evaluator(Component):
    """A metric: references and predictions in, named values out."""

    def compute(self, references: Sequence[Any], predictions: Sequence[Any], **kwargs: Any) -> dict[str, float]:
        raise NotImplementedError


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


@dataclass(frozen=True)
class Head:
    """The task-specific model on top of the encoder (BLURB section 5: a linear layer)."""

    kind: str  # "sequence" | "token"
    num_labels: int
    problem_type: str = "single_label_classification"  # | multi_label_classification | regression
    labels: tuple[str, ...] = ()


class Task(Component):
    """A downstream benchmark: reads splits, turns them into model features, scores predictions."""

    kind: ClassVar[str] = "classification"
    train_split: ClassVar[str] = "train"
    eval_splits: ClassVar[tuple[str, ...]] = ("dev", "test")
    dataset: ClassVar[str] = ""  # folder name under the data dir ("" if none)

    def check(self, env: Environment) -> None:
        """Raise DataMissingError (where it looked, how to get it) if the data is not there."""

    def validate(self, env: Environment) -> None:
        """Read every split once so malformed data fails before any training (raise DataError)."""
        for split in (self.train_split, *self.eval_splits):
            self.examples(split, env)

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

    def primary_metric(self) -> str:
        """The metric a table reports first."""
        raise NotImplementedError

    def selection_metric(self) -> str:
        """The metric searches optimise (head masks, sweeps): the primary one unless that is too coarse."""
        return self.primary_metric()


class TaskGroup(Task):
    """A set of tasks run one after another and summarised (e.g. the BLURB suite)."""

    kind: ClassVar[str] = "group"

    def members(self, env: Environment) -> list[str]:
        raise NotImplementedError

    def summarize(self, member_metrics: dict[str, dict], env: Environment) -> dict[str, Any]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------- #
@dataclass
class Stage:
    """One cached step of a strategy.

    ``config`` must hold everything that affects the stage's output besides its inputs; the cache key
    is hash(name + config + input keys + version + kinject version). ``fn`` writes into ctx.out.
    """

    name: str
    fn: Callable[["StageContext"], None]
    config: dict[str, Any]
    inputs: tuple[str, ...] = ()
    version: str = "1"
    produces_model: bool = False
    artifacts: tuple[str, ...] = ()  # files/folders of the stage output copied into the run directory


class Strategy(Component):
    """A knowledge-injection method: a sequence of named, cached stages."""

    def stages(self, run: "RunContext") -> list[Stage]:
        raise NotImplementedError
