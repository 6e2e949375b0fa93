"""Relation extraction as sentence classification (BLURB): ChemProt and DDI.

The input is the sentence with the two argument mentions replaced by dummies (``@CHEMICAL$``/``@GENE$``,
``@DRUG$``) or, with ``entity_style=markers``, wrapped in ``[E1] .. [/E1]`` / ``[E2] .. [/E2]``; the
[CLS] vector goes through a linear layer. Metric: micro F1 over the positive classes (every class but
the negative one). Instances come from ``kinject data prepare chemprot|ddi`` (or are converted once from
the original releases into the cache, see :func:`kinject.tasks.prepare_util.ensure_prepared`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, ClassVar, Literal

from pydantic import Field

from kinject.errors import DataError
from kinject.interfaces import Environment
from kinject.io import read_jsonl
from kinject.tasking.datasets import DatasetInfo, register_dataset
from kinject.tasking.sequence import SequenceClassificationTask, SequenceTaskConfig
from kinject.tasks import prepare_chemprot, prepare_ddi
from kinject.tasks.prepare_util import ensure_prepared, render


class RelationConfig(SequenceTaskConfig):
    path: Path | None = Field(None, description="Folder with prepared train/dev/test.jsonl (default: "
                              "<data_dir>/<dataset>/prepared, else converted from the original release "
                              "into the cache).")
    entity_style: Literal["dummy", "markers"] = Field(
        "dummy", description="dummy: replace the mentions by @TYPE$ (BLURB); markers: keep them, wrapped in "
        "[E1]..[/E1] / [E2]..[/E2].")


def _count(folder: str) -> Callable[[Path], dict[str, int]]:
    def count(data_dir: Path) -> dict[str, int]:
        base = Path(data_dir) / folder / "prepared"
        return {split: sum(1 for _ in open(base / f"{split}.jsonl", "rb"))
                for split in ("train", "dev", "test") if (base / f"{split}.jsonl").exists()}
    return count


CHEMPROT = register_dataset(DatasetInfo(
    name="chemprot", folder="chemprot",
    splits={s: f"prepared/{s}.jsonl" for s in ("train", "dev", "test")},
    description="ChemProt (BioCreative VI) chemical-protein relations, BLURB sentence-level pairs, 5 classes + false",
    how_to_get="the BioCreative VI ChemProt release into <data_dir>/chemprot/biocreative6_original/, then "
               "`kinject data prepare chemprot`",
    prepare=prepare_chemprot.prepare, prepared_from="chemprot/biocreative6_original/*.tsv(.gz)",
    count=_count("chemprot")))
DDI = register_dataset(DatasetInfo(
    name="ddi", folder="ddi",
    splits={s: f"prepared/{s}.jsonl" for s in ("train", "dev", "test")},
    description="DDI 2013 drug-drug interactions, BLURB pairs (@DRUG$), 4 classes + DDI-false",
    how_to_get="DDICorpus-2013.zip (github.com/isegura/DDICorpus) into <data_dir>/ddi/, then "
               "`kinject data prepare ddi`",
    prepare=prepare_ddi.prepare, prepared_from="ddi/DDICorpus-2013.zip", count=_count("ddi")))


class RelationTask(SequenceClassificationTask):
    """Base of sentence-level relation classification over prepared JSONL instances."""

    Config: ClassVar = RelationConfig
    info: ClassVar[DatasetInfo]
    label_set: ClassVar[tuple[str, ...]] = ()
    negative: ClassVar[str] = "false"
    prepare_version: ClassVar[str] = "1"

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._cache: dict[str, list[dict]] = {}
        positive = [label for label in self.label_set if label != self.negative]
        self.default_metrics = [{"name": "f1", "options": {"average": "micro", "positive": positive}},
                                {"name": "f1", "options": {"average": "macro", "positive": positive}}]

    def labels(self, env: Environment) -> list[str]:
        return list(self.label_set)

    def folder(self, env: Environment) -> Path:
        module = {"chemprot": prepare_chemprot, "ddi": prepare_ddi}[self.info.name]
        return ensure_prepared(self.info.name, module.prepare, env, self.config.path, self.prepare_version)

    def check(self, env: Environment) -> None:
        folder = self.folder(env)
        for split in (self.train_split, *self.eval_splits):
            if not (folder / f"{split}.jsonl").exists():
                raise DataError(f"no {split}.jsonl in the prepared folder", folder)

    def describe_data(self, env: Environment) -> str:
        return f"{self.info.name}:{self.folder(env)} ({self.config.entity_style})"

    def examples(self, split: str, env: Environment) -> list[dict]:
        if split not in self._cache:
            path, out = self.folder(env) / f"{split}.jsonl", []
            for number, row in read_jsonl(path):
                missing = [k for k in ("id", "label", "sentence", "spans") if k not in row]
                if missing:
                    raise DataError(f"missing field {missing[0]!r}", path, number)
                if row["label"] not in self.label_set:
                    raise DataError(f"unknown label {row['label']!r} (known: {', '.join(self.label_set)})",
                                    path, number)
                if self.config.entity_style == "markers":
                    text = render(row["sentence"], row["spans"], "markers")
                else:
                    text = row.get("text") or render(row["sentence"], row["spans"])
                out.append({"id": row["id"], "text": text, "label": row["label"], "where": f"{path}:{number}"})
                if env.limit and len(out) >= env.limit:
                    break
            self._cache[split] = out
        return self._cache[split]


class ChemProtTask(RelationTask):
    """ChemProt chemical-protein relations (BLURB): CPR:3/4/5/6/9 + false, micro F1 over the five."""

    info = CHEMPROT
    dataset = "chemprot"
    label_set = prepare_chemprot.LABELS
    negative = "false"


class DDITask(RelationTask):
    """DDI 2013 drug-drug interactions (BLURB): advise/effect/int/mechanism + false, micro F1 over the four."""

    info = DDI
    dataset = "ddi"
    label_set = prepare_ddi.LABELS
    negative = "DDI-false"

from kinject.tasks.gad import GADTask  # noqa: E402,F401  (declared entry point kinject.tasks.relation:GADTask)
