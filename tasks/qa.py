"""Yes/no(/maybe) question answering as pair classification (BLURB): [CLS] over ``question [SEP] context``;
accuracy and macro F1. PubMedQA is split on the fly from the original JSON (cheap, seeded); BioASQ reads
BLURB's TSVs."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field

from kinject.api import DataError, Environment
from kinject.tasks.readers import read_tsv
from kinject.tasks.catalogue import DatasetInfo, split_file
from kinject.tasks.sequence import SequenceClassificationTask, SequenceTaskConfig
from kinject.tasks import prepare_pubmedqa

PUBMEDQA = DatasetInfo(
    name="pubmedqa", folder="pubmedqa", splits={"train": "ori_pqal.json", "dev": "ori_pqal.json",
                                                "test": "test_ground_truth.json"},
    description="PubMedQA PQA-L yes/no/maybe (reasoning-required): 450/50 seeded train/dev, official 500 test",
    how_to_get="data/ori_pqal.json and data/test_ground_truth.json from github.com/pubmedqa/pubmedqa into "
               "<data_dir>/pubmedqa/", prepare=prepare_pubmedqa.prepare,
    prepared_from="pubmedqa/ori_pqal.json + test_ground_truth.json")
BIOASQ = DatasetInfo(
    name="bioasq", folder="bioasq_yesno", splits={s: f"{s}.tsv" for s in ("train", "dev", "test")},
    description="BioASQ 7b yes/no questions (BLURB files: id, question, context, label)",
    how_to_get="BLURB's BioASQ train/dev/test.tsv into <data_dir>/bioasq_yesno/")


class QATask(SequenceClassificationTask):
    """Base of yes/no(/maybe) QA tasks: pairs (question, context), fixed labels."""

    label_set: ClassVar[tuple[str, ...]] = ()
    recommended: ClassVar[dict] = {"model": {"max_length": 256, "pooling": "mean"},
                                   "training": {"epochs": 3, "learning_rate": 1e-4, "head_learning_rate": 1e-2}}
    recommended_note: ClassVar[str] = (
        "swept on dev macro-F1 (docs/tasks.md), max_length 256, 3 epochs: kinject sweep finetune --task bioasq|pubmedqa "
        "--metric f1_macro over lr {3e-5,1e-4} x head lr {1e-3,1e-2} x pooling {cls,mean}. BioASQ dev (75 questions) "
        "0.654 with these vs 0.580 (head lr 1e-3) and 0.453 = the majority label (cls); PubMedQA dev (50) 0.359 vs "
        "0.210 (head lr 1e-3, cls or mean: the majority label). Dev sets this small move ~0.1 with one question")

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._cache: dict[str, list[dict]] = {}

    def labels(self, env: Environment) -> list[str]:
        return list(self.label_set)

    def _load(self, split: str, env: Environment) -> list[dict]:
        raise NotImplementedError

    def examples(self, split: str, env: Environment) -> list[dict]:
        if split not in self._cache:
            rows = self._load(split, env)
            self._cache[split] = rows[: env.limit] if env.limit else rows
        return self._cache[split]


class PubMedQAConfig(SequenceTaskConfig):
    split_seed: int = Field(prepare_pubmedqa.DEFAULT_SEED, description="Seed of the 450/50 train/dev split of "
                            "the 500 non-test items.")


class PubMedQATask(QATask):
    """PubMedQA yes/no/maybe (BLURB): question + abstract without its conclusion; accuracy, macro F1."""

    Config: ClassVar = PubMedQAConfig
    info: ClassVar[DatasetInfo] = PUBMEDQA
    dataset = "pubmedqa"
    label_set = prepare_pubmedqa.LABELS

    def check(self, env: Environment) -> None:
        for split in ("train", "test"):
            split_file(PUBMEDQA, split, env.data_dir)

    def describe_data(self, env: Environment) -> str:
        return f"pubmedqa:{Path(env.data_dir) / 'pubmedqa'} (train/dev split seed {self.config.split_seed})"

    def _load(self, split: str, env: Environment) -> list[dict]:
        if not hasattr(self, "_built"):
            self._built = prepare_pubmedqa.build(env.data_dir, self.config.split_seed)
        if split not in self._built:
            raise DataError(f"pubmedqa has no split {split!r} (train, dev, test)")
        return [dict(r, text=r["question"], text_pair=r["context"]) for r in self._built[split]]


class BioASQTask(QATask):
    """BioASQ 7b yes/no (BLURB): question + gold snippets; accuracy, macro F1."""

    Config: ClassVar = SequenceTaskConfig
    info: ClassVar[DatasetInfo] = BIOASQ
    dataset = "bioasq_yesno"
    label_set = ("yes", "no")

    def check(self, env: Environment) -> None:
        for split in (self.train_split, *self.eval_splits):
            split_file(BIOASQ, split, env.data_dir)

    def describe_data(self, env: Environment) -> str:
        return f"bioasq:{Path(env.data_dir) / BIOASQ.folder}"

    def _load(self, split: str, env: Environment) -> list[dict]:
        path, out = split_file(BIOASQ, split, env.data_dir), []
        for number, (qid, question, context, label) in read_tsv(path, columns=4):
            if label not in self.label_set:
                raise DataError(f"unknown label {label!r} (known: yes, no)", path, number)
            out.append({"id": qid, "text": question, "text_pair": context, "label": label,
                        "where": f"{path}:{number}"})
        return out
