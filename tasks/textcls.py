"""`textcls`: a generic file-based text (pair) classification task."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from kinject.api import DataError, DataMissingError, Environment
from kinject.tasks.readers import read_jsonl, read_tsv, text_field
from kinject.tasks.sequence import PairTaskConfig, SequenceClassificationTask
from kinject.api import FILE_PATH


class TextClsConfig(PairTaskConfig):
    path: Path | None = Field(None, description="Folder with train/dev/test files (.jsonl or .tsv with a header).",
                              json_schema_extra=FILE_PATH)
    text_field: str = Field("text", description="Column holding the text.")
    text_pair_field: str | None = Field(None, description="Column holding the second text (pair tasks).")
    label_field: str = Field("label", description="Column holding the label.")
    multi_label: bool = Field(False, description="Labels are several per example, joined by label_separator.")
    label_separator: str = Field(",", description="Separator of labels when multi_label (TSV or strings).")
    group_field: str | None = Field(None, description="Column naming the unit an example belongs to (a document, a "
                                    "patient): examples of one group are resampled, limited and folded together.")


class TextClassificationTask(SequenceClassificationTask):
    """Text (pair) classification from JSONL or TSV files; single- or multi-label; accuracy and F1.

    Pairs of two labels can be scored by a bi-encoder (``task.encoder=bi``: a logistic loss on the cosine of the two
    texts' embeddings; the second label in sorted order is the positive one)."""

    Config: ClassVar = TextClsConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._cache: dict[str, list[dict]] = {}
        if self.config.multi_label:
            self.problem_type = "multi_label_classification"
            self.default_metrics = [{"name": "f1", "options": {"average": "micro"}}, {"name": "accuracy"}]

    def _folder(self, env: Environment) -> Path:
        if self.config.path is None:
            raise DataMissingError("task textcls needs a data folder: --set task.path=DIR "
                                   "(train/dev/test .jsonl or .tsv files)")
        return Path(self.config.path)

    def _file(self, split: str, env: Environment) -> Path:
        folder = self._folder(env)
        for suffix in (".jsonl", ".jsonl.gz", ".tsv"):
            candidate = folder / f"{split}{suffix}"
            if candidate.exists():
                return candidate
        raise DataMissingError(f"no {split}.jsonl or {split}.tsv (looked in {folder})")

    def check(self, env: Environment) -> None:
        for split in (self.train_split, *self.eval_splits):
            self._file(split, env)

    def describe_data(self, env: Environment) -> str:
        return f"textcls:{self.config.path}"

    def _rows(self, path: Path):
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            yield from read_jsonl(path)
            return
        rows = read_tsv(path, header=True)
        _, header = next(rows)
        for number, row in rows:
            yield number, dict(zip(header, row))

    def _label(self, row: dict, path: Path, number: int) -> str | list[str]:
        """A string (or JSON integer) label; multi-label: a list of strings or one string of joined labels."""
        cfg = self.config
        if not cfg.multi_label:
            return text_field(row, cfg.label_field, path, number)
        label = row.get(cfg.label_field)
        if isinstance(label, str):
            return [x.strip() for x in label.split(cfg.label_separator) if x.strip()]
        if isinstance(label, list) and all(isinstance(x, str) for x in label):
            return label
        raise DataError(f"field {cfg.label_field!r} must be a list of strings or a string of labels joined by "
                        f"{cfg.label_separator!r}" + ("" if cfg.label_field in row else " (missing)"), path, number)

    def examples(self, split: str, env: Environment) -> list[dict]:
        if split not in self._cache:
            cfg, path, out = self.config, self._file(split, env), []
            for number, row in self._rows(path):
                ident = text_field(row, "id", path, number) if row.get("id") is not None else f"{split}-{number}"
                ex = {"id": ident, "text": text_field(row, cfg.text_field, path, number),
                      "label": self._label(row, path, number), "where": f"{path}:{number}"}
                if cfg.text_pair_field:
                    ex["text_pair"] = text_field(row, cfg.text_pair_field, path, number)
                if cfg.group_field:
                    ex["group"] = text_field(row, cfg.group_field, path, number)
                out.append(ex)
            limit = env.limit if not cfg.group_field else None  # groups: the kernel keeps the first --limit whole
            self._cache[split] = out[:limit] if limit else out
        return self._cache[split]
