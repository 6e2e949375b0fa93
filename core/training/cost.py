"""How much arithmetic a stage does, for ``--dry-run``'s time estimate before it ever ran here
(:mod:`kinject.cli.estimate` turns FLOPs into seconds with this machine's measured training speed).

The model: an encoder layer's matmuls cost 2 x its weights per token forward (attention projections 4 H^2, the
feed-forward 2 H I) plus the attention itself (4 x length x H per token); training (forward + backward) costs 3x the
forward. Token counts come from the task's own features (a sample of up to :data:`SAMPLE` examples featurized with the
run's tokenizer, scaled to the split), so pairs, candidate lists and truncation count as they train. Stage configs
state their work through ``StageConfig.cost`` with these helpers; this module is not part of any stage's key
(the library declares it ``UNKEYED``): refining it re-runs nothing.

Besides the arithmetic, the helpers note what a stage pays whatever its FLOPs (:func:`fixed_costs`): featurizing the
examples of each split it reads (timed on the sample, scaled to the split) and loading the model.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

SAMPLE = 200  # examples featurized to measure a split's tokens
LOAD_S = 0.1  # loading a model: this plus its weights at LOAD_BYTES_PER_S (tiny: 0.1 s; minilm: 0.7 s)
LOAD_BYTES_PER_S = 150e6


@dataclass
class FixedCosts:
    """What the helpers noted while a stage's cost was computed: the seconds it spends besides its arithmetic, by
    what (each counted once per stage), and the FLOPs they stated as training (forward, backward and an optimizer
    step per batch) and as scoring (no optimizer: a forward pass, or a backward for importance)."""

    parts: dict[str, float] = field(default_factory=dict)
    trained: float = 0.0
    scored: float = 0.0

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    def scoring_share(self, flops: float | None) -> float | None:
        """The FLOPs of ``flops`` that score rather than train: all when only scoring helpers stated any, what the
        training helpers did not state when they did, none when no helper stated any."""
        if not flops:
            return None
        if self.trained:
            return max(0.0, flops - self.trained)
        return flops if self.scored else 0.0


_OPEN: list[FixedCosts] = []


@contextmanager
def fixed_costs() -> Iterator[FixedCosts]:
    """Collect the fixed costs the helpers note while a stage's cost is computed (``with fixed_costs() as f:``)."""
    costs = FixedCosts()
    _OPEN.append(costs)
    try:
        yield costs
    finally:
        _OPEN.remove(costs)


def _note(what: str, seconds: float) -> None:
    for costs in _OPEN:
        costs.parts.setdefault(what, seconds)


def _stated(flops: float, training: bool) -> float:
    """Note ``flops`` as training or scoring arithmetic (:class:`FixedCosts`); returns them."""
    for costs in _OPEN:
        if training:
            costs.trained += flops
        else:
            costs.scored += flops
    return flops


def load_seconds(path: str) -> float:
    """Loading the model at ``path``: a fixed part and its weight files' size (a hub id: the fixed part only)."""
    folder = Path(path)
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors")) if folder.is_dir() else 0
    return LOAD_S + size / LOAD_BYTES_PER_S


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    intermediate: int

    def forward(self, length: float) -> float:
        """FLOPs of one token's forward pass in a sequence of ``length`` tokens."""
        weights = 4 * self.hidden ** 2 + 2 * self.hidden * self.intermediate
        return self.layers * (2 * weights + 4 * length * self.hidden)


@functools.lru_cache(maxsize=8)
def _shape(path: str, layers: int | None) -> Shape:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    hidden = int(config.hidden_size)
    return Shape(layers=int(layers or config.num_hidden_layers), hidden=hidden,
                 intermediate=int(getattr(config, "intermediate_size", 4 * hidden)))


def model_shape(run) -> Shape:
    """The layer sizes of the run's base model (what every stage of a run trains or scores; a stage that asks loads
    it: a fixed cost)."""
    ref = run.model_ref()
    _note("loading the model", load_seconds(str(ref.path)))
    return _shape(str(ref.path), ref.layers)


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    from kinject.api import load_tokenizer

    return load_tokenizer(path)


def split_tokens(run, task_ref, split: str, max_length: int, cap: int | None = None) -> tuple[int, float]:
    """(sequences, mean tokens per sequence) of ``split`` of the task ``task_ref`` as the run's tokenizer featurizes
    it, from a sample (the first ``cap`` examples only, when given)."""
    task, env = task_ref.build(), task_ref.environment(run.env)
    examples = task.examples(split, env)
    examples = examples[:cap] if cap else examples
    if not examples:
        return 0, 0.0
    step = max(1, len(examples) // SAMPLE)
    sample = examples[::step][:SAMPLE]
    tokenizer = _tokenizer(str(run.model_ref().path))
    start = time.perf_counter()
    features = task.featurize(tokenizer, sample, max_length, env)
    _note(f"featurizing {task_ref.name} {split}", (time.perf_counter() - start) * len(examples) / len(sample))
    lengths = [len(f["input_ids"]) for f in features if "input_ids" in f]
    if not lengths:
        return 0, 0.0
    return round(len(features) * len(examples) / len(sample)), sum(lengths) / len(lengths)


def scored_flops(run, task_ref, split: str, max_length: int, cap: int | None = None, train: bool = False) -> float:
    """FLOPs of one pass over a split (forward only, or forward + backward with ``train``)."""
    sequences, length = split_tokens(run, task_ref, split, max_length, cap)
    return _stated((3 if train else 1) * sequences * length * model_shape(run).forward(length), train)


def forward_flops(run, sequences: float, length: float) -> float:
    """A forward pass of the run's model over ``sequences`` of ``length`` tokens (scoring, e.g. embedding names)."""
    return _stated(sequences * length * model_shape(run).forward(length), False)


def finetune(config, run) -> float:
    """A fine-tune: its epochs (or steps) over the train split, and dev scored after each epoch when it selects."""
    training, task = config.training, config.task.build()
    length_cap = config.model.max_length
    sequences, length = split_tokens(run, config.task, task.train_split, length_cap)
    if training.max_steps and training.max_steps > 0:
        tokens = training.max_steps * training.batch_size * training.gradient_accumulation_steps * length
        epochs = tokens / max(sequences * length, 1)
    else:
        epochs = float(training.epochs)
        tokens = sequences * length * epochs
    flops = _stated(3 * tokens * model_shape(run).forward(length), True)
    if training.selection == "best" and "dev" in task.eval_splits:
        flops += max(1.0, epochs) * scored_flops(run, config.task, "dev", length_cap)
    return flops


def evaluate(config, run) -> float:
    """An evaluation: one forward pass over each split it scores, but dev where the fine-tune it evaluates selected on
    dev and saved those logits (:func:`kinject.training.stages.load_scored`)."""
    from .stages import EvaluateConfig, FinetuneConfig, _saves_what_it_trains

    splits = config.splits or list(config.task.build().eval_splits)
    model = next((stage.config for stage in run.stages if stage.name == config.model_stage), None)
    if (isinstance(model, FinetuneConfig) and model.training.selection == "best" and _saves_what_it_trains(model)
            and type(config).load_model is EvaluateConfig.load_model):
        splits = [split for split in splits if split != "dev"]
    return sum(scored_flops(run, config.task, split, config.max_length) for split in splits)


def trained_flops(run, steps: float, batch_size: int, length: float) -> float:
    """Training on ``steps`` batches of ``length``-token sequences (a masked-LM head on masked positions only costs
    little beside the encoder)."""
    return _stated(3 * steps * batch_size * length * model_shape(run).forward(length), True)
