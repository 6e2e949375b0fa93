"""Packing texts into masked-LM sequences: the public pack stage (:func:`pack_stage`) and its machinery.

**The texts contract.** The pack stage's input stage (``texts_stage``) writes its texts to ``texts_file`` in its
output folder, in one of three forms, told apart by the file's suffix (:func:`read_texts` streams all three):

* ``.jsonl`` (the default, ``texts.jsonl``): one JSON object a line with a string ``"text"`` field;
* ``.txt``: one text a line (blank lines are skipped);
* ``.arrow``: an Arrow file with a ``text`` column (``datasets``' ``ArrowWriter``; read memory-mapped).

**Packing.** Texts are tokenised (no special tokens) and laid end to end, a ``[SEP]`` after each, cut into
sequences of ``[CLS] ... [SEP]`` of at most ``max_length`` tokens at word boundaries (a word longer than a whole
sequence is truncated). Each token carries its word's index within the sequence (:data:`SEP_WORD` for special
tokens), so a collator can mask whole words. The stage writes ``packed.arrow`` (``input_ids``, ``word_ids``;
streamed, so memory is flat in the corpus size) and ``pack.json`` (counts), which
:func:`kinject.knowledge.mlm.mlm_stage` trains on.
"""

from __future__ import annotations

import bisect
import itertools
import json
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from pydantic import Field

from kinject.api import ModelRef, SpecError, Stage, StageConfig, StageContext, is_main_process

SEP_WORD = -1  # word index of [CLS], [SEP] and padding
TEXTS_FILE = "texts.jsonl"  # the default name of the texts file of a pack stage's input stage
PACKED_FILE = "packed.arrow"  # what a pack stage writes
DOCUMENTS_FILE = "documents.npy"  # beside it: the (first, last) document of each packed sequence
DOCUMENT_KEYS_FILE = "document-keys.npy"  # and a key per document (kinject.api.fact_key of its text)
TEXT_SUFFIXES = (".jsonl", ".txt", ".arrow")


def read_texts(path: Path, limit: int | None = None) -> Iterator[str]:
    """Stream the texts of a ``.jsonl`` (``text`` field), ``.txt`` (a line each) or ``.arrow`` (``text`` column)
    file, at most ``limit``; bad lines are a DataError naming ``file:line``."""
    from kinject.api import DataError, iter_lines
    from kinject.tasks import read_jsonl, text_field

    path = Path(path)
    if path.suffix == ".arrow":
        texts: Iterator[str] = _arrow_texts(path)
    elif path.suffix == ".jsonl":
        texts = (text_field(row, "text", path, number, empty=True) for number, row in read_jsonl(path))
    elif path.suffix == ".txt":
        texts = (line for _, line in iter_lines(path) if line.strip())
    else:
        raise DataError(f"texts file: expected one of {', '.join(TEXT_SUFFIXES)}", path)
    return itertools.islice(texts, limit)


def _arrow_texts(path: Path) -> Iterator[str]:
    from datasets import Dataset

    for batch in Dataset.from_file(str(path)).iter(batch_size=1000):
        yield from batch["text"]


class Packer:
    """Fill ``[CLS] d1 [SEP] d2 [SEP] ...`` sequences of at most ``max_length`` tokens from documents."""

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer = tokenizer
        self.budget = max_length - 2  # room between [CLS] and the closing [SEP]
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        self.ids: list[np.ndarray] = []
        self.words: list[np.ndarray] = []
        self.length = 0
        self.next_word = 0
        self.documents = 0
        self.truncated_words = 0
        self.row_documents: list[int] = []  # the documents (numbered from 0) in the sequence being filled
        self.spans: list[tuple[int, int]] = []  # (first, last) document of each emitted sequence

    def _put(self, ids: np.ndarray, words: np.ndarray) -> None:
        self.ids.append(ids)
        self.words.append(words)
        self.length += len(ids)

    def _emit(self) -> dict | None:
        if not self.length:
            return None
        ids, words = np.concatenate(self.ids), np.concatenate(self.words)
        if ids[-1] == self.sep and words[-1] == SEP_WORD:  # a document separator doubles as the closing [SEP]
            ids, words = ids[:-1], words[:-1]
        row = {"input_ids": [self.cls, *ids.tolist(), self.sep], "word_ids": [SEP_WORD, *words.tolist(), SEP_WORD]}
        self.ids, self.words, self.length, self.next_word = [], [], 0, 0
        docs = self.row_documents or [max(self.documents - 1, 0)]
        self.spans.append((min(docs), max(docs)))
        self.row_documents = []
        return row

    def add(self, texts: list[str]) -> Iterator[dict]:
        """Sequences completed by these documents (a partial one is kept for the next call)."""
        encoded = self.tokenizer(texts, add_special_tokens=False, verbose=False)  # documents may exceed a sequence
        for i, ids in enumerate(encoded["input_ids"]):
            if not ids:
                continue
            self.documents += 1
            ids = np.asarray(ids, dtype=np.int64)
            word = np.array(encoded.word_ids(i), dtype=np.float64)  # None (an added token) -> nan: its own word
            starts = np.ones(len(ids), dtype=bool)
            starts[1:] = word[1:] != word[:-1]
            dense = np.cumsum(starts) - 1  # the token's word, numbered 0, 1, ... in the document
            ends = np.append(np.flatnonzero(starts)[1:], len(ids))  # where each word ends
            p = 0
            while p < len(ids):
                k = bisect.bisect_right(ends, p + self.budget - self.length) - 1  # the last word that fits
                if k >= 0 and ends[k] > p:
                    e = int(ends[k])
                elif self.length:  # the next word does not fit: a new sequence
                    yield self._emit()
                    continue
                else:  # a word longer than a whole sequence: truncated
                    e = p + self.budget
                    self.truncated_words += 1
                self._put(ids[p:e], dense[p:e] - dense[p] + self.next_word)
                self.row_documents.append(self.documents - 1)
                self.next_word += int(dense[e - 1] - dense[p]) + 1
                p = int(ends[bisect.bisect_right(ends, e - 1)]) if e < len(ids) else e
            if self.length < self.budget:
                self._put(np.array([self.sep]), np.array([SEP_WORD]))
            else:
                yield self._emit()

    def finish(self) -> Iterator[dict]:
        row = self._emit()
        if row is not None:
            yield row


def pack_to_arrow(texts: Iterable[str], tokenizer, max_length: int, path: Path, batch: int = 1000) -> dict:
    """Pack ``texts`` into ``path`` (an Arrow file ``datasets.Dataset.from_file`` memory-maps); returns counts."""
    from datasets import Features, Sequence, Value
    from datasets.arrow_writer import ArrowWriter

    from kinject.api import fact_key

    features = Features({"input_ids": Sequence(Value("int32")), "word_ids": Sequence(Value("int32"))})
    packer = Packer(tokenizer, max_length)
    sequences = tokens = 0
    keys: list[int] = []  # a key per packed (non-empty) document: what the dose's covered texts are
    writer = ArrowWriter(features=features, path=str(path), writer_batch_size=1000)
    try:
        chunk: list[str] = []

        def write(rows: Iterable[dict]) -> None:
            nonlocal sequences, tokens
            for row in rows:
                writer.write(row)
                sequences += 1
                tokens += len(row["input_ids"])

        def add(chunk: list[str]) -> None:
            before = packer.documents
            write(packer.add(chunk))
            kept = [t for t in chunk if tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"]] \
                if packer.documents - before != len(chunk) else chunk
            keys.extend(fact_key(text, "", "") for text in kept)

        from kinject.tasks import progress

        for text in progress(texts, "packing", unit=" texts"):
            chunk.append(text)
            if len(chunk) >= batch:
                add(chunk)
                chunk = []
        if chunk:
            add(chunk)
        write(packer.finish())
        writer.finalize()
    finally:
        writer.close()
    np.save(Path(path).parent / DOCUMENTS_FILE, np.asarray(packer.spans, dtype=np.int64).reshape(-1, 2),
            allow_pickle=False)
    np.save(Path(path).parent / DOCUMENT_KEYS_FILE, np.asarray(keys, dtype=np.uint64), allow_pickle=False)
    return {"documents": packer.documents, "sequences": sequences, "tokens": tokens,
            "truncated_words": packer.truncated_words, "max_length": max_length}


# -- the stage --------------------------------------------------------------------------------- #
class PackConfig(StageConfig):
    """Pack the texts of ``texts_stage`` with the tokenizer of ``vocab_stage`` (its ``tokenizer/`` folder), else
    of ``model``."""

    texts_stage: str = Field(description="The stage whose output folder holds the texts file.")
    texts_file: str = Field(TEXTS_FILE, description="The texts file in it: .jsonl, .txt or .arrow.")
    model: ModelRef | None = Field(None, description="The model whose tokenizer packs (when no vocab_stage).")
    vocab_stage: str | None = Field(None, description="The stage whose tokenizer/ folder packs.")
    max_length: int


def stage_tokenizer(model: ModelRef | None, vocab_stage: str | None, ctx: StageContext):
    """The tokenizer of stage ``vocab_stage`` (its ``tokenizer/`` folder), else ``model``'s."""
    from kinject.api import load_tokenizer

    return load_tokenizer(str(ctx.inputs[vocab_stage] / "tokenizer")) if vocab_stage else model.load_tokenizer()


def pack_body(cfg: PackConfig, ctx: StageContext) -> None:
    if not is_main_process():
        return
    tokenizer = stage_tokenizer(cfg.model, cfg.vocab_stage, ctx)
    stats = pack_to_arrow(read_texts(ctx.inputs[cfg.texts_stage] / cfg.texts_file), tokenizer, cfg.max_length,
                          ctx.out / PACKED_FILE)
    stats["useful_token_fraction"] = stats["tokens"] / max(1, stats["sequences"] * cfg.max_length)
    (ctx.out / "pack.json").write_text(json.dumps(stats, indent=2, default=str))


def mlm_model_ref(run, max_length: int) -> ModelRef:
    """The run's model as masked-LM stages hold it: ``max_length`` tokens a sequence; fine-tuning-only settings
    (pooling) left out, so runs for different tasks share their pretraining."""
    update = {"max_length": max_length, "pooling": "cls"}
    return run.model_ref().model_copy(update={k: v for k, v in update.items() if k in ModelRef.model_fields})


def pack_stage(run, name: str, texts_stage: str, texts_file: str = TEXTS_FILE, vocab_stage: str | None = None,
               max_length: int | None = None) -> Stage:
    """A stage packing the texts that stage ``texts_stage`` wrote to ``texts_file`` (see the module docstring)
    into sequences of ``max_length`` tokens (default: ``model.max_length``), tokenised by the ``tokenizer/``
    folder of stage ``vocab_stage``, else by the run's model. Checked here (SpecError): the file's suffix, the
    length, a fast tokenizer (whole-word masking needs word ids)."""
    max_length = max_length or run.spec.model.max_length
    if Path(texts_file).suffix not in TEXT_SUFFIXES:
        raise SpecError(f"{name}: texts_file {texts_file!r} must end in one of {', '.join(TEXT_SUFFIXES)}")
    if max_length < 8:
        raise SpecError(f"{name}: max_length {max_length} leaves no room for text (at least 8)")
    model = None if vocab_stage else mlm_model_ref(run, max_length)
    if model is not None and not model.load_tokenizer().is_fast:
        raise SpecError(f"{name}: model {run.spec.model.name!r} has no fast tokenizer (whole-word masking needs "
                        "word ids)")
    config = PackConfig(texts_stage=texts_stage, texts_file=texts_file, model=model, vocab_stage=vocab_stage,
                        max_length=max_length)
    return Stage(name=name, body=pack_body, inputs=tuple(s for s in (texts_stage, vocab_stage) if s), config=config)
