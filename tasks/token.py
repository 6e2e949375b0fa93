"""Token-level tasks (NER, PICO): a linear layer on every word's first sub-token (BLURB section 5).

Examples are words with gold BIO tags (``words``, ``tags``: ``B-T``/``I-T``/``O``). The model is trained
on the tags re-encoded in the configured scheme (BIO, IO or BIOUL); only the first sub-token of each
word carries a label (-100 on the rest and on special tokens). Predictions are mapped back to words
and decoded to BIO before scoring, so every scheme is scored the same way against the gold BIO tags.

Long sentences are never truncated away: a sentence whose sub-tokens do not fit ``max_length`` is cut
into consecutive windows of whole words that do fit, each predicted on its own, so every word of every
sentence is predicted and scored (a word the tokenizer turns into nothing is predicted ``O``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Iterator, Literal

import numpy as np
from pydantic import Field

from kinject.api import DataError, Environment, Head, MetricRef, Task, iter_lines
from kinject.tasks.readers import read_tsv
from kinject.tasks.catalogue import DatasetInfo, split_file
from kinject.tasks.sequence import SequenceTaskConfig, evaluate_all, unit_ids

Scheme = Literal["BIO", "IO", "BIOUL"]
PREFIXES: dict[str, tuple[str, ...]] = {"IO": ("I",), "BIO": ("B", "I"), "BIOUL": ("B", "I", "L", "U")}
_SEQEVAL_PREFIX = {"BIOUL": {"L": "E", "U": "S"}}  # seqeval names BIOUL's last/unit tags E/S (IOBES)


# -- tag schemes --------------------------------------------------------------------------------- #
def spans(tags: list[str], scheme: str = "BIO") -> list[tuple[int, int, str]]:
    """(start, end, type) of the entities of a ``scheme`` sequence by seqeval's chunking (conlleval rules:
    an I-X that cannot continue an open X entity starts one; IO: a run of I-X is one entity; BIOUL: U-X is
    a one-word entity, L-X closes one). Tags outside the scheme count as O."""
    from seqeval.metrics.sequence_labeling import get_entities

    rename = _SEQEVAL_PREFIX.get(scheme, {})
    allowed = PREFIXES.get(scheme, ("B", "I"))
    norm = []
    for tag in tags:
        prefix, _, typ = tag.partition("-")
        norm.append(f"{rename.get(prefix, prefix)}-{typ}" if prefix in allowed and typ else "O")
    return [(start, end + 1, typ) for typ, start, end in get_entities(norm)]


def encode(tags: list[str], scheme: str) -> list[str]:
    """BIO tags -> the same entities in ``scheme`` (BIO is normalised: an opening I- becomes B-)."""
    out = ["O"] * len(tags)
    for start, end, typ in spans(tags):
        for i in range(start, end):
            if scheme == "IO":
                out[i] = f"I-{typ}"
            elif scheme == "BIOUL" and end - start == 1:
                out[i] = f"U-{typ}"
            elif scheme == "BIOUL" and i == end - 1:
                out[i] = f"L-{typ}"
            else:
                out[i] = f"{'B' if i == start else 'I'}-{typ}"
    return out


def decode(tags: list[str], scheme: str) -> list[str]:
    """Predicted ``scheme`` tags -> BIO, through :func:`spans` (seqeval's chunking)."""
    out = ["O"] * len(tags)
    for start, end, typ in spans(tags, scheme):
        out[start:end] = [f"B-{typ}"] + [f"I-{typ}"] * (end - start - 1)
    return out


# -- CoNLL reading ------------------------------------------------------------------------------- #
def read_conll(path: Path, types: tuple[str, ...] = (), default_type: str = "ENT") -> Iterator[dict]:
    """Sentences of a ``token<TAB>tag`` file (blank line between sentences, ``-DOCSTART-`` lines skipped).

    Tags must be ``O``, ``B-T`` or ``I-T`` (T in ``types`` when given; bare ``B``/``I`` get ``default_type``).
    Yields dicts ``words``, ``tags``, ``line`` (first line of the sentence), ``doc`` (the document: ``N:id`` of the
    N-th DOCSTART line before it, ids need not be unique; "" before the first or in a file without them).
    """
    words: list[str] = []
    tags: list[str] = []
    first, doc, docs, empty = 0, "", 0, True
    for number, line in iter_lines(path):
        if line.startswith("-DOCSTART-"):
            docs += 1
            doc = f"{docs}:{line[len('-DOCSTART-'):].strip()}"
            continue
        if not line.strip():
            if words:
                yield {"words": words, "tags": tags, "line": first, "doc": doc}
            words, tags = [], []
            continue
        empty = False
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0] or not parts[1].strip():
            raise DataError(f"expected 'token<TAB>tag', found {len(parts)} column(s)", path, number)
        tag = parts[1].strip()
        prefix, _, typ = tag.partition("-")
        if tag in ("B", "I"):
            tag, typ = f"{tag}-{default_type}", default_type
        elif tag != "O" and (prefix not in ("B", "I") or not typ):
            raise DataError(f"unknown tag {tag!r} (expected O, B-<type> or I-<type>)", path, number)
        if types and tag != "O" and typ not in types:
            raise DataError(f"unknown entity type {typ!r} in tag {tag!r} (this dataset has: {', '.join(types)})",
                            path, number)
        if not words:
            first = number
        words.append(parts[0])
        tags.append(tag)
    if words:
        yield {"words": words, "tags": tags, "line": first, "doc": doc}
    if empty:
        raise DataError("empty file (no tokens)", path)


def read_table(path: Path, header: list[str]) -> Iterator[tuple[int, list[str]]]:
    """Data rows of a TSV whose first line must be ``header`` (column counts checked; no rows: error)."""
    rows = read_tsv(path, columns=len(header))
    number, found = next(rows)
    if found != header:
        raise DataError(f"expected header {'<TAB>'.join(header)}, found {'<TAB>'.join(found)}", path, number)
    empty = True
    for number, row in rows:
        empty = False
        yield number, row
    if empty:
        raise DataError("no data rows after the header", path)


# -- catalogue-backed splits --------------------------------------------------------------------- #
class CatalogueSplits:
    """Mixin for tasks whose splits are files of a registered dataset (parsed once per data dir).

    Subclasses set ``info`` and implement ``read_split(path, split)``. ``check`` only looks for the
    files (DataMissingError); ``Task.validate`` parses every split, so malformed data fails (file:line)
    before a run writes anything. ``env.limit`` caps each split.
    """

    info: ClassVar[DatasetInfo]

    def read_split(self, path: Path, split: str) -> list[dict]:
        raise NotImplementedError

    def split_path(self, split: str, env: Environment) -> Path:
        return split_file(self.info, split, env.data_dir)

    def check(self, env: Environment) -> None:
        for split in (self.train_split, *self.eval_splits):
            self.split_path(split, env)

    def describe_data(self, env: Environment) -> str:
        return f"{self.info.name}:{Path(env.data_dir) / self.info.folder}"

    def examples(self, split: str, env: Environment) -> list[dict]:
        cache = self.__dict__.setdefault("_split_cache", {})
        key = (split, str(env.data_dir))
        if key not in cache:
            cache[key] = self.read_split(self.split_path(split, env), split)
        rows = cache[key]
        return rows[: env.limit] if env.limit else rows


# -- the task base ------------------------------------------------------------------------------- #
class TokenTaskConfig(SequenceTaskConfig):
    scheme: Scheme = Field("BIO", description="Tagging scheme the model learns (scored as BIO entities).")


class TokenClassificationTask(Task):
    """Base for word tagging (subclasses implement ``examples``: dicts with ``words`` and BIO ``tags``)."""

    Config: ClassVar = TokenTaskConfig
    kind: ClassVar[str] = "tagging"
    entity_types: ClassVar[tuple[str, ...]] = ()  # fixed types; () = those seen in the train split
    default_metrics: ClassVar[list[dict]] = [{"name": "entity-f1"}]

    def types(self, env: Environment) -> list[str]:
        if self.entity_types:
            return list(self.entity_types)
        return sorted({t.partition("-")[2] for ex in self.examples(self.train_split, env) for t in ex["tags"]} - {""})

    def labels(self, env: Environment) -> list[str]:
        """``O`` then the scheme's prefixes for every type: the classifier's output order."""
        scheme = self.config.scheme
        return ["O"] + [f"{p}-{t}" for t in self.types(env) for p in PREFIXES[scheme]]

    def head(self, env: Environment) -> Head:
        labels = tuple(self.labels(env))
        return Head(kind="token", num_labels=len(labels), labels=labels)

    def metric_refs(self) -> list[MetricRef]:
        configured = getattr(self.config, "metrics", None)
        return configured if configured else [MetricRef.model_validate(m) for m in self.default_metrics]

    # -- features -------------------------------------------------------------------------------
    @staticmethod
    def windows(pieces: list[int], budget: int) -> list[tuple[int, int]]:
        """Consecutive (start, end) word ranges whose sub-token counts sum to at most ``budget``."""
        out, start, used = [], 0, 0
        for w, n in enumerate(pieces):
            n = min(n, budget)
            if used + n > budget and w > start:
                out.append((start, w))
                start, used = w, 0
            used += n
        if start < len(pieces) or not out:
            out.append((start, len(pieces)))
        return out

    def featurize(self, tokenizer, examples: list[dict], max_length: int, env: Environment) -> list[dict]:
        index = {name: i for i, name in enumerate(self.labels(env))}
        scheme = self.config.scheme
        budget = max(1, max_length - tokenizer.num_special_tokens_to_add(pair=False))
        counts = tokenizer([ex["words"] for ex in examples], is_split_into_words=True, add_special_tokens=False)
        spans_: list[tuple[int, int, int]] = []  # (example, start word, end word)
        for i, ex in enumerate(examples):
            pieces = [0] * len(ex["words"])
            for w in counts.word_ids(i):
                if w is not None:
                    pieces[w] += 1
            spans_.extend((i, s, e) for s, e in self.windows(pieces, budget))
        encoded = tokenizer([examples[i]["words"][s:e] for i, s, e in spans_], is_split_into_words=True,
                            truncation=True, max_length=max_length)
        features = []
        for f, (i, start, end) in enumerate(spans_):
            tags = encode(examples[i]["tags"], scheme)[start:end]
            for tag in tags:
                if tag not in index:
                    raise DataError(f"{examples[i].get('where', i)}: tag {tag!r} is not one of the task's labels "
                                    f"({', '.join(index)})")
            labels = [-100] * len(encoded["input_ids"][f])
            positions = [-1] * (end - start)
            for pos, w in enumerate(encoded.word_ids(f)):
                if w is not None and positions[w] < 0:
                    positions[w] = pos
                    labels[pos] = index[tags[w]]
            feat = {k: encoded[k][f] for k in encoded.keys()}
            feat.update(labels=labels, example_index=i, word_start=start, word_positions=positions)
            features.append(feat)
        return features

    def collator(self, tokenizer):
        from transformers import DataCollatorForTokenClassification

        return DataCollatorForTokenClassification(tokenizer)

    # -- scoring --------------------------------------------------------------------------------
    def predicted_tags(self, examples: list[dict], features: list[dict], logits: Any, env: Environment) -> list[list[str]]:
        """Per example, one BIO tag per word (``O`` for a word without a sub-token)."""
        labels = self.labels(env)
        logits = np.asarray(logits)
        raw = [["O"] * len(ex["words"]) for ex in examples]
        for f, feat in enumerate(features):
            row = raw[feat["example_index"]]
            for w, pos in enumerate(feat["word_positions"]):
                if 0 <= pos < logits.shape[1]:
                    row[feat["word_start"] + w] = labels[int(logits[f, pos].argmax())]
        return [decode(tags, self.config.scheme) for tags in raw]

    def score(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
              env: Environment) -> dict[str, float]:
        predicted = self.predicted_tags(examples, features, predictions, env)
        gold = [encode(ex["tags"], "BIO") for ex in examples]
        return evaluate_all(self.metric_refs(), gold, predicted, labels=self.labels(env))

    def predictions(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
                    env: Environment) -> list[dict]:
        """One record per sentence: ``id``, ``gold`` and ``pred`` BIO tags, one per word (as scored)."""
        predicted = self.predicted_tags(examples, features, predictions, env)
        return [{"id": i, "gold": encode(ex["tags"], "BIO"), "pred": tags}
                for i, ex, tags in zip(unit_ids(split, examples), examples, predicted)]
