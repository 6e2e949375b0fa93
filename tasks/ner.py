"""BLURB named-entity recognition: BC5-chem, BC5-disease, NCBI-disease, BC2GM, JNLPBA (entity-level F1).

Data: CoNLL ``token<TAB>tag`` files (Crichton et al. 2017 copies; JNLPBA in BLURB's untyped BIO form)
in ``<data_dir>/<folder>/``. Model: a linear layer per word (first sub-token), BIO tags by default
(``--set task.scheme=IO|BIOUL``); see :mod:`kinject.tasks.token`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import ClassVar

from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.token import CatalogueSplits, TokenClassificationTask, read_conll

CRICHTON = ("https://raw.githubusercontent.com/cambridgeltl/MTL-Bioinformatics-2016/"
            "df0df02fae6dbb87d88ffcf323b9096528f06f84/data/{corpus}/{{file}}")
KEBIOLM = "https://raw.githubusercontent.com/hieunguyen7337/KeBioLM/bc7c3667c786236252ba5b26b3b921197465b7a3/data/{corpus}/{{file}}"


def count_sentences(folder: Path, info: DatasetInfo) -> dict[str, int]:
    """Sentences per split (blank-line separated, DOCSTART lines not counted)."""
    out = {}
    for split, name in info.splits.items():
        out[split] = sum(1 for _ in read_conll(Path(folder) / name))
    return out


def _register(name: str, folder: str, corpus: str, base: str, dev: str, hashes: tuple[str, str, str],
              description: str) -> DatasetInfo:
    splits = {"train": "train.tsv", "dev": dev, "test": "test.tsv"}
    info = DatasetInfo(
        name=name, folder=folder, splits=splits, description=description,
        how_to_get=f"kinject data download {name} (or copy {corpus}/{{train,{dev[:-4]},test}}.tsv from "
                   f"{base.split('/data/')[0].replace('raw.githubusercontent.com', 'github.com')}) into "
                   f"<data_dir>/{folder}/",
        url=base.format(corpus=corpus),
        file_sha256=dict(zip(splits.values(), hashes)))
    info.count = lambda path, _info=info: count_sentences(path, _info)
    return info


BC5CHEM = _register("bc5chem", "bc5cdr_chem", "BC5CDR-chem-IOB", CRICHTON, "devel.tsv", (
    "165c4cd2efadd0caf1bb8f3c6bcd3acca199446bb3d55eb06d9137114c9a0b2d",
    "3f1df5cfcff95735663ffc37121fd3687e82b1e9a019bec0480491502652721b",
    "6fce42139a9d819151eff3ab8cb0eda6fbf861fd17d4cfe6be2123f010a3b6c5"), "BC5CDR chemicals, IOB (BLURB NER)")
BC5DISEASE = _register("bc5disease", "bc5cdr_disease", "BC5CDR-disease-IOB", CRICHTON, "devel.tsv", (
    "d630dafe7dd67e21350cc3278dbdcfadcccbb2b63d0fda83b2427853988e5ad9",
    "8c3af95475029c2100c2b7c0108b2715bc700ac198c7a21d587f11f1d06b17bd",
    "a530bf9e17a4122b101b09cedd5f3cf8e6307d6a0093146c33b8de2e69ec0fa3"), "BC5CDR diseases, IOB (BLURB NER)")
NCBI = _register("ncbi-disease", "ncbi_disease", "NCBI-disease-IOB", CRICHTON, "devel.tsv", (
    "58379baf4614b8d757d93dd7a21b202849ca99f9b9d71b49185523ff5443300c",
    "b4e1e7efcc2a35047bf2f3d281648357470e674f555d4a26a0049ac37d59cc61",
    "8f088ce45dc4746592188f9e69de3d89d87f3bb8f0ed8c4a287d018123fa148d"), "NCBI disease corpus, IOB (BLURB NER)")
BC2GM = _register("bc2gm", "bc2gm", "BC2GM-IOB", CRICHTON, "devel.tsv", (
    "46e17f4e1509483b82c03f27d6f0214020f738fb71704356fb3445eb824ab38d",
    "33a94577aa22f1e70ec9e02781a05baa4e1390e866d28bf2b344888e4e3d4103",
    "30d7a4f571ca8ed22a044528063ba5d0388d666d8b8b329733d6927e5fb30764"), "BioCreative II gene mentions, IOB")
JNLPBA = _register("jnlpba", "jnlpba", "JNLPBA", KEBIOLM, "dev.tsv", (
    "e3bd594512fcffd9d79dbf4785e805f87c31d576692eeae33458c54b0416a8e0",
    "ac56df325166c779c76177de16efff624f0cdb0e9a6a406c13dbd02b712b1e7c",
    "6da4243aa7b9822c188bb81391689bcec22756f2ae653b823cfb9cf21d7eb938"), "JNLPBA bio-entities, untyped BIO (BLURB)")


class ConllNERTask(CatalogueSplits, TokenClassificationTask):
    """Named-entity recognition from a CoNLL dataset of the catalogue (entity-level F1)."""

    kind: ClassVar[str] = "ner"
    default_type: ClassVar[str] = "ENT"  # type given to untyped B/I tags
    recommended: ClassVar[dict] = {"training": {"epochs": 2, "learning_rate": 2e-4, "head_learning_rate": 1e-4}}
    recommended_note: ClassVar[str] = (
        "swept on NCBI-disease dev entity F1 (docs/tasks.md), used for every CoNLL NER set: kinject sweep finetune "
        "--task ncbi-disease --trials 5 over epochs {1,2} x lr {5e-5,1e-4,2e-4} x head lr {1e-4,1e-3,1e-2}: 0.815 "
        "here, 0.796-0.799 at lr 1e-4, 0.773 at 5e-5, 0.712 with 1 epoch at 5e-5")

    unit: ClassVar[str] = "document"  # the sentences after one -DOCSTART- line
    example_unit: ClassVar[str] = "sentence"  # a file without -DOCSTART- lines: each sentence is a unit

    def read_split(self, path: Path, split: str) -> list[dict]:
        sentences = list(read_conll(path, self.entity_types, self.default_type))
        marked = any(s["doc"] for s in sentences)  # grouped by document only where the file marks documents
        return [{"id": f"{split}-{i}", "words": s["words"], "tags": s["tags"], "where": f"{path}:{s['line']}",
                 **({"group": s["doc"]} if marked else {})} for i, s in enumerate(sentences)]

    def describe_data(self, env) -> str:
        """The dataset, and what a unit is where its files mark no documents (recorded in run.json's ``data``)."""
        from kinject.api import KinjectError

        unmarked = []
        for split in (self.train_split, *self.eval_splits):
            try:
                path = self.split_path(split, env)
            except KinjectError:
                continue
            if not _marks_documents(str(path), path.stat().st_mtime_ns):
                unmarked.append(path.name)
        note = f" (units: sentences; no -DOCSTART- document markers in {', '.join(unmarked)})" if unmarked else ""
        return super().describe_data(env) + note


@functools.lru_cache(maxsize=32)
def _marks_documents(path: str, mtime_ns: int) -> bool:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return any(line.startswith("-DOCSTART-") for line in handle)


class BC5ChemTask(ConllNERTask):
    """BC5-chem: chemical mention recognition (BioCreative V CDR), entity-level F1."""

    info: ClassVar[DatasetInfo] = BC5CHEM
    dataset: ClassVar[str] = BC5CHEM.folder
    entity_types: ClassVar[tuple[str, ...]] = ("Chemical",)


class BC5DiseaseTask(ConllNERTask):
    """BC5-disease: disease mention recognition (BioCreative V CDR), entity-level F1."""

    info: ClassVar[DatasetInfo] = BC5DISEASE
    dataset: ClassVar[str] = BC5DISEASE.folder
    entity_types: ClassVar[tuple[str, ...]] = ("Disease",)


class NCBIDiseaseTask(ConllNERTask):
    """NCBI-disease: disease mention recognition, entity-level F1."""

    info: ClassVar[DatasetInfo] = NCBI
    dataset: ClassVar[str] = NCBI.folder
    entity_types: ClassVar[tuple[str, ...]] = ("Disease",)


class BC2GMTask(ConllNERTask):
    """BC2GM: gene/protein mention recognition (BioCreative II), entity-level F1."""

    info: ClassVar[DatasetInfo] = BC2GM
    dataset: ClassVar[str] = BC2GM.folder
    entity_types: ClassVar[tuple[str, ...]] = ("GENE",)


class JNLPBATask(ConllNERTask):
    """JNLPBA: bio-entity recognition (protein, DNA, RNA, cell line/type merged, as BLURB), entity-level F1."""

    info: ClassVar[DatasetInfo] = JNLPBA
    dataset: ClassVar[str] = JNLPBA.folder
    entity_types: ClassVar[tuple[str, ...]] = ("ENT",)
