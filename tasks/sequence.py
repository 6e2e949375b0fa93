"""Sequence-level tasks: [CLS] -> linear layer; single-label, multi-label or regression (BLURB section 5).
Sentence-pair tasks can instead score pairs with a bi-encoder (``task.encoder=bi``; :mod:`kinject.tasks.biencoder`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from kinject.api import DataError, Environment, Head, MetricRef, PluginConfig, SpecError, Task
import kinject.tasks.biencoder as biencoder


class SequenceTaskConfig(PluginConfig):
    metrics: list[MetricRef] | None = Field(None, description="Evaluators to report (default: the task's own).")


class PairTaskConfig(SequenceTaskConfig):
    encoder: Literal["cross", "bi", "bi-frozen"] = Field(
        "cross", description="How a text pair is scored. cross: the two texts in one sequence, [CLS] (or the mean) -> "
        "a linear head. bi: each text encoded alone and mean-pooled, the score the cosine of the two embeddings, "
        "fine-tuned (similarity: the cosine regressed to the gold score mapped to [0, 1]; classification and "
        "retrieval: a logistic or contrastive loss on it); the saved encoder is a sentence encoder. bi-frozen: the "
        "same with the encoder frozen (only an offset trains): the zero-shot cosine baseline.")


def evaluate_all(metric_refs: list[MetricRef], references: list, predictions: list, **kwargs: Any) -> dict[str, float]:
    """Run the evaluators and merge their outputs."""
    out: dict[str, float] = {}
    for ref in metric_refs:
        out.update(ref.build().compute(references, predictions, **kwargs))
    return out


def unit_ids(split: str, examples: list[dict], key: str = "id") -> list[str]:
    """Stable, unique ids of evaluation units: ``example[key]`` when set, else ``<split>-<index>``; a repeated
    id gets ``#<k>`` appended (its k-th repeat), so records can be paired across runs."""
    seen: dict[str, int] = {}
    out = []
    for i, ex in enumerate(examples):
        base = str(ex[key]) if ex.get(key) is not None else f"{split}-{i}"
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(base if k == 0 else f"{base}#{k}")
    return out


class SequenceClassificationTask(Task):
    """Base for classification of a text or a text pair (subclasses implement ``examples``).

    Example dicts: ``text``, optional ``text_pair``, ``label`` (str; list[str] when multi-label;
    float for regression), optional ``id``/``group``.
    """

    Config: ClassVar[type[PluginConfig]] = SequenceTaskConfig
    problem_type: ClassVar[str] = "single_label_classification"
    default_metrics: ClassVar[list[dict]] = [{"name": "accuracy"}, {"name": "f1", "options": {"average": "macro"}}]
    threshold: ClassVar[float] = 0.5  # multi-label decision threshold on sigmoid scores
    #: regression: train on (y - mean) / std of the train split's targets and map predictions back, so a fresh
    #: linear head starts near the target distribution instead of at 0 (BIOSSES scores are 0-4)
    standardize_targets: ClassVar[bool] = True
    #: regression scores' range (low, high): a bi-encoder maps it to [0, 1] for its cosine (None: the train split's)
    score_range: ClassVar[tuple[float, float] | None] = None

    def encoder(self) -> str:
        """``cross`` (default), ``bi`` or ``bi-frozen`` (tasks whose config has an ``encoder`` field)."""
        return getattr(self.config, "encoder", "cross")

    def bi_objective(self) -> str:
        """The bi-encoder's loss (:data:`kinject.tasks.biencoder.OBJECTIVES`): regression to the score, or a logistic
        loss for two labels (the second in label order is the positive one)."""
        return "regression" if self.problem_type == "regression" else "binary"

    def alternatives(self, env: Environment, spec) -> dict[str, list]:
        """For a small train split (chosen by cross-validation, docs/training.md): a pair task's encoder (cross or
        bi, where a bi-encoder fits: a score or two labels) and a classifier's head learning rate (the encoder's, or
        a fast one) unless the task recommends one."""
        out: dict[str, list] = {}
        train = self.examples(self.train_split, env)
        pairs = bool(train) and all(ex.get("text_pair") is not None for ex in train[:200])
        fits = self.problem_type == "regression" or (self.problem_type != "multi_label_classification"
                                                    and len(self.labels(env)) == 2)
        if "encoder" in type(self.config).model_fields and pairs and fits and biencoder.supported():
            out["task.encoder"] = ["cross", "bi"]
        if self.problem_type != "regression" and "head_learning_rate" not in type(self).recommended.get("training", {}):
            out["training.head_learning_rate"] = [None, 1e-2]
        return out

    def check_encoder(self, env: Environment) -> None:
        """A bi-encoder needs text pairs, a score or two labels, and a kernel that applies ``Head.model``."""
        if self.encoder() == "cross":
            return
        where = f"task.encoder={self.encoder()}"
        if not biencoder.supported():
            raise SpecError(f"{where}: this kinject's kernel does not apply a task's model transform "
                            "(kinject.api.Head has no `model` field); use task.encoder=cross")
        if self.problem_type == "multi_label_classification" or \
                (self.problem_type != "regression" and len(self.labels(env)) != 2):
            raise SpecError(f"{where}: a bi-encoder scores a pair with one cosine: it needs a similarity score or two "
                            f"labels (task {self.name!r} has {', '.join(self.labels(env)) or 'none'})")
        single = next((ex for ex in self.examples(self.train_split, env) if ex.get("text_pair") is None), None)
        if single is not None:
            raise SpecError(f"{where}: a bi-encoder needs text pairs; {single.get('where', 'an example')} has one "
                            "text (textcls: set task.text_pair_field)")

    def labels(self, env: Environment) -> list[str]:
        """All label names, in a fixed order (the classifier's output order)."""
        if self.problem_type == "regression":
            return []
        seen: set[str] = set()
        for ex in self.examples(self.train_split, env):
            label = ex["label"]
            seen.update(label if isinstance(label, list) else [label])
        return sorted(seen)

    def validate(self, env: Environment) -> None:
        """Read every split; every evaluation label must occur in the train split."""
        super().validate(env)
        self.check_encoder(env)
        if self.problem_type == "regression":
            return
        known = set(self.labels(env))
        for split in self.eval_splits:
            for i, ex in enumerate(self.examples(split, env)):
                label = ex["label"]
                unknown = [x for x in (label if isinstance(label, list) else [label]) if x not in known]
                if unknown:
                    raise DataError(f"{ex.get('where', f'{split} example {i}')}: unknown label {unknown[0]!r} "
                                    f"(labels seen in the train split: {', '.join(sorted(known))})")

    def target_scale(self, env: Environment) -> tuple[float, float]:
        """(mean, std) of the train split's regression targets; (0, 1) when not standardising. A bi-encoder's
        targets are the scores mapped to [0, 1]: (low, high - low) of :attr:`score_range` or of the train split."""
        if self.problem_type != "regression" or not (self.standardize_targets or self.encoder() != "cross"):
            return 0.0, 1.0
        cached = getattr(self, "_target_scale", None)
        if cached is None:
            values = np.array([float(ex["label"]) for ex in self.examples(self.train_split, env)])
            if self.encoder() != "cross":
                low, high = self.score_range or ((values.min(), values.max()) if len(values) else (0.0, 1.0))
                cached = (float(low), float(high - low) if high > low else 1.0)
            else:
                std = float(values.std()) if len(values) > 1 else 0.0
                cached = (float(values.mean()) if len(values) else 0.0, std if std > 0 else 1.0)
            self._target_scale = cached
        return cached

    def head(self, env: Environment) -> Head:
        labels = tuple(self.labels(env))
        n = 1 if self.problem_type == "regression" else len(labels)
        return Head(kind="sequence", num_labels=n, problem_type=self.problem_type, labels=labels, **self.head_model())

    def head_model(self) -> dict[str, str]:
        """``{"model": ...}`` for a bi-encoder's Head (the kernel installs it on the task model), else nothing."""
        if self.encoder() == "cross":
            return {}
        return {"model": biencoder.head_model(self.bi_objective(), frozen=self.encoder() == "bi-frozen")}

    def metric_refs(self) -> list[MetricRef]:
        configured = getattr(self.config, "metrics", None)
        return configured if configured else [MetricRef.model_validate(m) for m in self.default_metrics]

    def featurize(self, tokenizer, examples: list[dict], max_length: int, env: Environment) -> list[dict]:
        index = {name: i for i, name in enumerate(self.labels(env))}
        mean, std = self.target_scale(env)
        texts = [ex["text"] for ex in examples]
        pairs = [ex.get("text_pair") for ex in examples]
        if self.encoder() != "cross":
            rows = biencoder.pack(tokenizer, texts, pairs, max_length)
        else:
            encoded = tokenizer(texts, pairs if any(p is not None for p in pairs) else None, truncation=True,
                                max_length=max_length)
            rows = [{k: encoded[k][i] for k in encoded.keys()} for i in range(len(examples))]
        features = []
        for i, ex in enumerate(examples):
            feat = dict(rows[i])
            label = ex.get("label")
            unknown = [x for x in (label if isinstance(label, list) else [label]) if x not in index]
            if self.problem_type != "regression" and unknown:
                raise DataError(f"{ex.get('where', ex.get('id', i))}: unknown label {unknown[0]!r} "
                                f"(labels seen in the train split: {', '.join(index)})")
            if self.problem_type == "regression":
                feat["labels"] = (float(label) - mean) / std
            elif self.problem_type == "multi_label_classification":
                hot = [0.0] * len(index)
                for name in label:
                    hot[index[name]] = 1.0
                feat["labels"] = hot
            else:
                feat["labels"] = index[label]
            features.append(feat)
        return features

    def collator(self, tokenizer):
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(tokenizer)

    def decode(self, predictions: np.ndarray, env: Environment) -> list:
        """Logits -> label names (lists for multi-label, floats for regression)."""
        labels = self.labels(env)
        if self.problem_type == "regression":
            mean, std = self.target_scale(env)
            return [float(v) * std + mean for v in np.asarray(predictions).reshape(-1)]
        if self.problem_type == "multi_label_classification":
            probs = 1 / (1 + np.exp(-predictions))
            return [[labels[j] for j in np.flatnonzero(row >= self.threshold)] for row in probs]
        return [labels[j] for j in np.asarray(predictions).argmax(-1)]

    def score(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
              env: Environment) -> dict[str, float]:
        references = [ex["label"] for ex in examples]
        decoded = self.decode(predictions, env)
        return evaluate_all(self.metric_refs(), references, decoded, labels=self.labels(env),
                            scores=predictions)

    def predictions(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
                    env: Environment) -> list[dict]:
        """One record per example: ``id``, ``gold`` and ``pred`` (label names; lists when multi-label; floats for
        regression), for classification ``scores`` (the logits, in the order of ``head(env).labels``), and the
        example's ``group`` where it has one (the unit a bootstrap resamples: e.g. a child term's two pairs)."""
        logits = np.asarray(predictions, dtype=float)
        decoded = self.decode(logits, env)
        ids = unit_ids(split, examples)
        units = [{"group": ex["group"]} if "group" in ex else {} for ex in examples]  # resampled together
        if self.problem_type == "regression":
            return [{"id": i, "gold": float(ex["label"]), "pred": p, **u}
                    for i, ex, p, u in zip(ids, examples, decoded, units)]
        return [{"id": i, "gold": ex["label"], "pred": p, "scores": row.tolist(), **u}
                for i, ex, p, row, u in zip(ids, examples, decoded, logits.reshape(len(examples), -1), units)]
