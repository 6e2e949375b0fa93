"""Clinical outcome prediction from admission notes (van Aken et al. 2021; KIMERA 3.3): cop-mp, cop-los,
cop-dia, cop-pro. Reads the published CSV format (``id,text,<label>``; multi-label codes comma-separated),
either ``<folder>/{train,dev,test}.csv`` (what ``kinject data prepare cop --mimic-dir DIR`` writes) or the
published file names (``MP_IN_adm_train.csv``, ... ``_val``, ``_test``). Metric: AUROC (macro, weighted).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from kinject.api import DataError, DataMissingError, Environment
from kinject.tasks.readers import read_csv_columns
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.sequence import SequenceClassificationTask, SequenceTaskConfig
from kinject.tasks import prepare_cop
from kinject.api import FILE_PATH

COP = DatasetInfo(
    name="cop", folder="cop", splits={f"{t}/{s}": f"{t}/{s}.csv" for t in prepare_cop.LABEL_COLUMNS for s in ("train", "dev", "test")},
    description="MIMIC-III admission notes for clinical outcome prediction (mp, los, dia, pro)",
    how_to_get="credentialed MIMIC-III (physionet.org/content/mimiciii), then "
               "`kinject data prepare cop --mimic-dir DIR`",
    prepare=prepare_cop.prepare, prepared_from="MIMIC-III NOTEEVENTS, ADMISSIONS, DIAGNOSES_ICD, PROCEDURES_ICD")
_CODE = re.compile(r"^(\d{2,3}|V\d{2}|E\d{3})$")  # a 3-digit ICD-9 category (procedures may have 2)


class CopConfig(SequenceTaskConfig):
    path: Path | None = Field(None, description="Folder with the task's CSVs (default <data_dir>/cop/<task>).",
                              json_schema_extra=FILE_PATH)
    label_column: str | None = Field(None, description="Label column (default: the published name, e.g. "
                                     "hospital_expire_flag, los_label, short_codes).")


def read_csv_rows(path: Path, label_column: str):
    """(line, id, text, label string) per row; bad UTF-8, empty file, wrong column count -> file:line."""
    rows = 0
    for line, row in read_csv_columns(path, ("id", "text", label_column)):
        rows += 1
        yield line, row["id"], row["text"], row[label_column].strip()
    if rows == 0:
        raise DataError("no data rows", path)


class CopTask(SequenceClassificationTask):
    """Base of the COP tasks: admission note -> outcome; AUROC."""

    Config: ClassVar = CopConfig
    info: ClassVar[DatasetInfo] = COP
    dataset = "cop"
    short: ClassVar[str] = ""  # mp | los | dia | pro
    published: ClassVar[str] = ""  # published file prefix
    label_set: ClassVar[tuple[str, ...]] = ()  # fixed labels (single-label tasks)
    default_metrics: ClassVar[list[dict]] = [{"name": "auroc", "options": {"averages": ["macro", "weighted"]}},
                                             {"name": "f1", "options": {"average": "macro"}}]

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._cache: dict[str, list[dict]] = {}

    def folder(self, env: Environment) -> Path:
        return Path(self.config.path) if self.config.path else Path(env.data_dir) / "cop" / self.short

    def file(self, split: str, env: Environment) -> Path:
        folder = self.folder(env)
        names = (f"{split}.csv", f"{self.published}_{'val' if split == 'dev' else split}.csv")
        for name in names:
            if (folder / name).exists():
                return folder / name
        raise DataMissingError(f"cop-{self.short}: no {' or '.join(names)} in {folder}; get it: "
                               f"{COP.how_to_get}")

    def check(self, env: Environment) -> None:
        for split in (self.train_split, *self.eval_splits):
            self.file(split, env)

    def describe_data(self, env: Environment) -> str:
        return f"cop-{self.short}:{self.folder(env)}"

    def parse_label(self, value: str, path: Path, line: int):
        if value not in self.label_set:
            raise DataError(f"unknown label {value!r} (known: {', '.join(self.label_set)})", path, line)
        return value

    def labels(self, env: Environment) -> list[str]:
        return list(self.label_set)

    def examples(self, split: str, env: Environment) -> list[dict]:
        if split not in self._cache:
            path, out = self.file(split, env), []
            column = self.config.label_column or prepare_cop.LABEL_COLUMNS[self.short]
            for line, ident, text, label in read_csv_rows(path, column):
                out.append({"id": ident, "text": text, "label": self.parse_label(label, path, line),
                            "where": f"{path}:{line}"})
                if env.limit and len(out) >= env.limit:
                    break
            self._cache[split] = out
        return self._cache[split]


class MortalityTask(CopTask):
    """COP in-hospital mortality from admission notes (binary); AUROC."""

    short, published, label_set = "mp", "MP_IN_adm", ("0", "1")


class LengthOfStayTask(CopTask):
    """COP length of stay from admission notes (<3 d, 3-7 d, 1-2 wk, >2 wk); AUROC."""

    short, published, label_set = "los", "LOS_WEEKS_adm", ("0", "1", "2", "3")


class CodesTask(CopTask):
    """Base of the multi-label 3-digit ICD-9 tasks: labels = every code seen in any split."""

    problem_type = "multi_label_classification"

    def parse_label(self, value: str, path: Path, line: int):
        codes = [c.strip() for c in value.split(",") if c.strip()]
        bad = [c for c in codes if not _CODE.match(c)]
        if bad:
            raise DataError(f"unknown label {bad[0]!r} (3-digit ICD-9 codes, comma-separated)", path, line)
        return codes

    def labels(self, env: Environment) -> list[str]:
        if "_labels" not in self.__dict__:
            seen = {c for split in (self.train_split, *self.eval_splits) for ex in self.examples(split, env)
                    for c in ex["label"]}
            self._labels = sorted(seen)
        return self._labels


class DiagnosesTask(CodesTask):
    """COP diagnoses (multi-label 3-digit ICD-9) from admission notes; AUROC."""

    short, published = "dia", "DIA_GROUPS_3_DIGITS_adm"


class ProceduresTask(CodesTask):
    """COP procedures (multi-label 3-digit ICD-9) from admission notes; AUROC."""

    short, published = "pro", "PRO_3_DIGITS_adm"
