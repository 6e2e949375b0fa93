"""Relation extraction as sentence classification (BLURB): ChemProt and DDI.

The input is the sentence with the two argument mentions replaced by dummies (``@CHEMICAL$``/``@GENE$``,
``@DRUG$``) or, with ``entity_style=markers``, wrapped in ``[E1] .. [/E1]`` / ``[E2] .. [/E2]``; the
[CLS] vector goes through a linear layer. Metric: micro F1 over the positive classes (every class but
the negative one). Instances come from ``kinject data prepare chemprot|ddi`` (or are converted once from
the original releases into the cache, see :func:`kinject.tasks.prepare_util.ensure_prepared`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from kinject.api import DataError, Environment, FILE_PATH
from kinject.tasks.readers import read_jsonl, text_field
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.sequence import SequenceClassificationTask, SequenceTaskConfig
from kinject.tasks import prepare_chemprot, prepare_ddi
from kinject.tasks.prepare_util import ensure_prepared, render


class RelationConfig(SequenceTaskConfig):
    path: Path | None = Field(None, description="Folder with prepared train/dev/test.jsonl (default: "
                              "<data_dir>/<dataset>/prepared, else converted from the original release "
                              "into the cache).", json_schema_extra=FILE_PATH)
    entity_style: Literal["dummy", "markers"] = Field(
        "dummy", description="dummy: replace the mentions by @TYPE$ (BLURB); markers: keep them, wrapped in "
        "[E1]..[/E1] / [E2]..[/E2].")


def _count(folder: Path) -> dict[str, int]:
    """Instances per split of a prepared folder (one JSON line each)."""
    base = Path(folder) / "prepared"
    from kinject.tasks.readers import count_lines

    return {split: count_lines(base / f"{split}.jsonl")
            for split in ("train", "dev", "test") if (base / f"{split}.jsonl").exists()}


def _relation_dataset(name: str, module, description: str, how_to_get: str, prepared_from: str) -> DatasetInfo:
    return DatasetInfo(
        name=name, folder=name, splits={s: f"prepared/{s}.jsonl" for s in ("train", "dev", "test")},
        description=description, how_to_get=how_to_get, prepare=module.prepare, prepared_from=prepared_from,
        count=_count, raw_files=module.raw_files, prepared_on_use=True, prepare_version="1")


CHEMPROT = _relation_dataset(
    "chemprot", prepare_chemprot,
    "ChemProt (BioCreative VI) chemical-protein relations, BLURB sentence-level pairs, 5 classes + false",
    "the BioCreative VI ChemProt release into <data_dir>/chemprot/biocreative6_original/ (converted on first "
    "use, or `kinject data prepare chemprot`)", "chemprot/biocreative6_original/*.tsv(.gz)")
DDI = _relation_dataset(
    "ddi", prepare_ddi, "DDI 2013 drug-drug interactions, BLURB pairs (@DRUG$), 4 classes + DDI-false",
    "DDICorpus-2013.zip (github.com/isegura/DDICorpus) into <data_dir>/ddi/ (converted on first use, or "
    "`kinject data prepare ddi`)", "ddi/DDICorpus-2013.zip")


class RelationTask(SequenceClassificationTask):
    """Base of sentence-level relation classification over prepared JSONL instances."""

    recommended: ClassVar[dict] = {"training": {"epochs": 1, "learning_rate": 1e-4, "head_learning_rate": 2e-2}}
    recommended_note: ClassVar[str] = (
        "checked on dev, not swept (one setting; 17-24 CPU-min per trial): 1 epoch at lr 1e-4, head lr 2e-2 (HoC's), "
        "seed 42: ChemProt dev micro-F1 0.639 (macro 0.623), DDI dev micro-F1 0.753 (macro 0.604); 300 steps at the "
        "encoder's rate had reached 0.31 (ChemProt) and 0.02-0.20 (DDI) on test (docs/results-history.md)")
    Config: ClassVar = RelationConfig
    info: ClassVar[DatasetInfo]
    label_set: ClassVar[tuple[str, ...]] = ()
    negative: ClassVar[str] = "false"

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._cache: dict[str, list[dict]] = {}
        positive = [label for label in self.label_set if label != self.negative]
        self.default_metrics = [{"name": "f1", "options": {"average": "micro", "positive": positive}},
                                {"name": "f1", "options": {"average": "macro", "positive": positive}}]

    def labels(self, env: Environment) -> list[str]:
        return list(self.label_set)

    def folder(self, env: Environment) -> Path:
        return ensure_prepared(self.info, env, self.config.path)

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
                ident, label = text_field(row, "id", path, number), text_field(row, "label", path, number)
                sentence = text_field(row, "sentence", path, number)
                if not isinstance(row.get("spans"), list):
                    raise DataError("field 'spans' must be a list of [start, end, type]", path, number)
                if label not in self.label_set:
                    raise DataError(f"unknown label {label!r} (known: {', '.join(self.label_set)})", path, number)
                if self.config.entity_style == "markers":
                    text = render(sentence, row["spans"], "markers")
                elif row.get("text") is not None:
                    text = text_field(row, "text", path, number)
                else:
                    text = render(sentence, row["spans"])
                out.append({"id": ident, "text": text, "label": label, "where": f"{path}:{number}"})
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
