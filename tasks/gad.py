"""GAD (Genetic Association Database, BLURB split): does the sentence assert a gene-disease association?

TSV with header ``index<TAB>sentence<TAB>label``; mentions are already replaced by ``@GENE$`` and
``@DISEASE$``; label 1/0. Scored with the F1 of the positive class (BLURB's micro F1 for GAD).
Re-exported by :mod:`kinject.tasks.relation` (the declared entry point).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from kinject.api import DataError, Environment
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.sequence import SequenceClassificationTask
from kinject.tasks.token import CatalogueSplits, read_table

HEADER = ["index", "sentence", "label"]


def read_gad(path: Path) -> list[dict]:
    out = []
    for number, (index, sentence, label) in read_table(path, HEADER):
        if label.strip() not in ("0", "1"):
            raise DataError(f"unknown label {label!r} (expected 1 or 0)", path, number)
        out.append({"id": index, "text": sentence, "label": label.strip(), "where": f"{path}:{number}"})
    return out


GAD = DatasetInfo(
    name="gad", folder="gad", splits={"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"},
    description="GAD gene-disease association sentences, BLURB split (4261/534/535 examples)",
    how_to_get="run BLURB's data preparation (https://microsoft.github.io/BLURB/) and put GAD's "
               "train/dev/test.tsv (header index<TAB>sentence<TAB>label) in <data_dir>/gad/",
    count=lambda folder: {s: len(read_gad(Path(folder) / f)) for s, f in GAD.splits.items()})


class GADTask(CatalogueSplits, SequenceClassificationTask):
    """GAD: gene-disease association relation extraction (binary), F1 of the positive class."""

    info: ClassVar[DatasetInfo] = GAD
    dataset: ClassVar[str] = GAD.folder
    kind: ClassVar[str] = "relation_extraction"
    default_metrics: ClassVar[list[dict]] = [{"name": "f1", "options": {"average": "binary", "positive": ["1"]}},
                                             {"name": "accuracy"}]

    def read_split(self, path: Path, split: str) -> list[dict]:
        return read_gad(path)

    def labels(self, env: Environment) -> list[str]:
        return ["0", "1"]
