"""BIOSSES: biomedical sentence similarity (BLURB), regression on [CLS] of ``s1 [SEP] s2``, Pearson r.

TSV with header ``pair_id<TAB>sent1<TAB>sent2<TAB>score``, score in [0, 4] (mean of five annotators);
the Peng et al. split (64/16/20 pairs). One linear output, MSE loss.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

from kinject.api import DataError
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.sequence import SequenceClassificationTask
from kinject.tasks.token import CatalogueSplits, read_table

HEADER = ["pair_id", "sent1", "sent2", "score"]


def read_biosses(path: Path) -> list[dict]:
    out = []
    for number, (pair_id, first, second, score) in read_table(path, HEADER):
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not 0.0 <= value <= 4.0:
            raise DataError(f"score {score!r} is not a number in [0, 4]", path, number)
        out.append({"id": pair_id, "text": first, "text_pair": second, "label": value, "where": f"{path}:{number}"})
    return out


BIOSSES = DatasetInfo(
    name="biosses", folder="biosses", splits={"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"},
    description="BIOSSES sentence pairs with similarity 0-4, BLURB/Peng et al. split (64/16/20)",
    how_to_get="run BLURB's data preparation (https://microsoft.github.io/BLURB/) and put BIOSSES "
               "train/dev/test.tsv (header pair_id<TAB>sent1<TAB>sent2<TAB>score) in <data_dir>/biosses/",
    count=lambda folder: {s: len(read_biosses(Path(folder) / f)) for s, f in BIOSSES.splits.items()})


class BIOSSESTask(CatalogueSplits, SequenceClassificationTask):
    """BIOSSES: sentence-pair similarity regression (0-4), Pearson correlation."""

    info: ClassVar[DatasetInfo] = BIOSSES
    dataset: ClassVar[str] = BIOSSES.folder
    kind: ClassVar[str] = "sentence_similarity"
    problem_type: ClassVar[str] = "regression"
    default_metrics: ClassVar[list[dict]] = [{"name": "pearson"}]
    recommended: ClassVar[dict] = {"training": {"min_steps": 100}}
    recommended_note: ClassVar[str] = (
        "not swept (BIOSSES is not in the project's data folder): 64 training pairs give 12 optimiser steps in 3 "
        "epochs, which left predictions near-constant in a review; min_steps 100 gives the head time to move. "
        "Targets are standardised on the train split (SequenceClassificationTask.standardize_targets).")

    def read_split(self, path: Path, split: str) -> list[dict]:
        return read_biosses(path)
