"""`textcls`: a generic file-based text (pair) classification task."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from kinject.errors import DataError, DataMissingError
from kinject.interfaces import Environment
from kinject.io import read_jsonl, read_tsv
from kinject.tasking.sequence import SequenceClassificationTask, SequenceTaskConfig


class TextClsConfig(SequenceTaskConfig):
    path: Path | None = Field(None, description="Folder with train/dev/test files (.jsonl or .tsv with a header).")
    text_field: str = Field("text", description="Column holding the text.")
    text_pair_field: str | None = Field(None, description="Column holding the second text (pair tasks).")
    label_field: str = Field("label", description="Column holding the label.")
    multi_label: bool = Field(False, description="Labels are several per example, joined by label_separator.")
    label_separator: str = Field(",", description="Separator of labels when multi_label (TSV or strings).")


class TextClassificationTask(SequenceClassificationTask):
    """Text (pair) classification from JSONL or TSV files; single- or multi-label; accuracy and F1."""

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

    def examples(self, split: str, env: Environment) -> list[dict]:
        if split not in self._cache:
            cfg, path, out = self.config, self._file(split, env), []
            for number, row in self._rows(path):
                for fieldname in filter(None, (cfg.text_field, cfg.text_pair_field, cfg.label_field)):
                    if fieldname not in row:
                        raise DataError(f"missing field {fieldname!r}", path, number)
                label = row[cfg.label_field]
                if cfg.multi_label and isinstance(label, str):
                    label = [x.strip() for x in label.split(cfg.label_separator) if x.strip()]
                elif not cfg.multi_label:
                    label = str(label)
                ex = {"id": row.get("id", f"{split}-{number}"), "text": str(row[cfg.text_field]), "label": label,
                      "where": f"{path}:{number}"}
                if cfg.text_pair_field:
                    ex["text_pair"] = str(row[cfg.text_pair_field])
                out.append(ex)
            self._cache[split] = out[: env.limit] if env.limit else out
        return self._cache[split]
