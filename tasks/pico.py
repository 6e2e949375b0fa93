"""EBM-NLP PICO (BLURB): tag participants, interventions and outcomes; word-level macro F1 over P/I/O.

Reads the EBM-NLP 2.0 release as published (``ebm_nlp_2_00/``): ``documents/<PMID>.tokens`` (the
abstract's tokens, whitespace/line separated) and, per element, comma-separated 0/1 word labels in
``annotations/aggregated/starting_spans/{participants,interventions,outcomes}/{train,test/gold}/
<PMID>.AGGREGATED.ann``. Abstracts are cut into sentences at ``.``/``?``/``!`` tokens.

Gold for scoring keeps every element of a word (about 3% of element words overlap). The tagger
learns one label per word: where elements overlap, the word goes to the element whose span around it
is shortest (the inner span, as in SciBERT's copy). The release has no dev split: a fixed
``dev_fraction`` of the training abstracts (chosen by a hash of the PMID) is held out, so dev is not
BLURB's exact dev list; test is the release's expert-annotated ``test/gold``.
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from kinject.api import DataError, DataMissingError, Environment, iter_lines
from kinject.tasks.catalogue import DatasetInfo
from kinject.tasks.sequence import evaluate_all, unit_ids
from kinject.tasks.token import CatalogueSplits, TokenClassificationTask, TokenTaskConfig, encode

log = logging.getLogger("kinject")
ELEMENTS = {"PAR": "participants", "INT": "interventions", "OUT": "outcomes"}
ANN = "annotations/aggregated/starting_spans"
SPLIT_DIRS = {"train": "train", "dev": "train", "test": "test/gold"}

EBMNLP = DatasetInfo(
    name="ebmpico", folder="ebm_nlp_2_00",
    splits={split: f"{ANN}/participants/{sub}" for split, sub in SPLIT_DIRS.items()},
    description="EBM-NLP 2.0 PICO spans (4,993 abstracts; test = expert 'gold' annotations)",
    how_to_get="kinject data download ebmpico (or unpack ebm_nlp_2_00.tar.gz from github.com/bepnye/EBM-NLP "
               "into <data_dir>/)",
    url="https://github.com/bepnye/EBM-NLP/raw/master/ebm_nlp_2_00.tar.gz")


def read_ann(path: Path) -> list[bool]:
    """Comma-separated word labels (0 = outside; any other integer = inside)."""
    values: list[bool] = []
    for number, line in iter_lines(path):
        for item in filter(None, (x.strip() for x in line.split(","))):
            if not item.lstrip("-").isdigit():
                raise DataError(f"unknown label {item!r} (expected integers, 0 = outside)", path, number)
            values.append(int(item) != 0)
    return values


def _ann_file(folder: Path, pmid: str) -> Path:
    for name in (f"{pmid}.AGGREGATED.ann", f"{pmid}_AGGREGATED.ann"):
        if (folder / name).exists():
            return folder / name
    return folder / f"{pmid}.AGGREGATED.ann"


def shortest_span_labels(flags: dict[str, list[bool]]) -> list[str | None]:
    """One element type per word: the element whose contiguous run around the word is shortest."""
    n = len(next(iter(flags.values())))
    runs: dict[str, list[int]] = {}
    for typ, values in flags.items():
        length = [0] * n
        i = 0
        while i < n:
            if values[i]:
                j = i
                while j < n and values[j]:
                    j += 1
                length[i:j] = [j - i] * (j - i)
                i = j
            else:
                i += 1
        runs[typ] = length
    out: list[str | None] = []
    for w in range(n):
        inside = [(runs[t][w], t) for t in flags if flags[t][w]]
        out.append(min(inside)[1] if inside else None)
    return out


def to_bio(types: list[str | None]) -> list[str]:
    return [("O" if t is None else f"{'I' if i and types[i - 1] == t else 'B'}-{t}") for i, t in enumerate(types)]


def read_document(root: Path, sub: str, pmid: str) -> list[dict]:
    tokens_path = root / "documents" / f"{pmid}.tokens"
    words = " ".join(line for _, line in iter_lines(tokens_path)).split()
    flags = {}
    for typ, element in ELEMENTS.items():
        path = _ann_file(root / ANN / element / sub, pmid)
        values = read_ann(path)
        if len(values) != len(words):
            raise DataError(f"{len(values)} labels but {len(words)} tokens in {tokens_path}", path, 1)
        flags[typ] = values
    if not words:
        return []
    tags = to_bio(shortest_span_labels(flags))
    elements = [[ELEMENTS[t] for t in ELEMENTS if flags[t][w]] for w in range(len(words))]
    out, start = [], 0
    for w, word in enumerate(words):
        if word in (".", "?", "!") or w == len(words) - 1:
            out.append({"id": f"{pmid}-{len(out)}", "group": pmid, "words": words[start:w + 1],
                        "tags": encode(tags[start:w + 1], "BIO"),  # a sentence opening inside a span: B-
                        "elements": elements[start:w + 1],
                        "where": f"{tokens_path} (words {start + 1}-{w + 1})"})
            start = w + 1
    return out


class PicoConfig(TokenTaskConfig):
    dev_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="Share of training abstracts held out as dev.")


class EBMPicoTask(CatalogueSplits, TokenClassificationTask):
    """EBM-NLP PICO: participants/interventions/outcomes word tagging, word-level macro F1 (BLURB)."""

    Config: ClassVar = PicoConfig
    info: ClassVar[DatasetInfo] = EBMNLP
    dataset: ClassVar[str] = EBMNLP.folder
    kind: ClassVar[str] = "pico"
    unit: ClassVar[str] = "abstract"
    example_unit: ClassVar[str] = "sentence"
    entity_types: ClassVar[tuple[str, ...]] = tuple(ELEMENTS)
    default_metrics: ClassVar[list[dict]] = [{"name": "pico-f1"}]

    def is_dev(self, pmid: str) -> bool:
        return zlib.crc32(pmid.encode()) % 10_000 < self.config.dev_fraction * 10_000

    def read_split(self, path: Path, split: str) -> list[dict]:
        root = path.parents[len(Path(self.info.splits[split]).parts) - 1]
        sub = SPLIT_DIRS[split]
        sets = []
        for element in ELEMENTS.values():
            folder = root / ANN / element / sub
            if not folder.is_dir():
                raise DataMissingError(f"dataset 'ebmpico': no folder {folder}; get it: {self.info.how_to_get}")
            sets.append({p.name.split(".")[0].split("_")[0] for p in folder.glob("*AGGREGATED.ann")})
        pmids = sorted(set.intersection(*sets))
        if len(pmids) < len(set.union(*sets)):
            log.warning("ebmpico %s: %d abstracts lack one of the P/I/O annotation files; skipped",
                        split, len(set.union(*sets)) - len(pmids))
        if split != "test":
            pmids = [p for p in pmids if self.is_dev(p) == (split == "dev")]
        if not pmids:
            raise DataError(f"no annotated abstracts for split {split!r}", root / ANN)
        return [sentence for pmid in pmids for sentence in read_document(root, sub, pmid)]

    def score(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
              env: Environment) -> dict[str, float]:
        predicted = self.predicted_tags(examples, features, predictions, env)
        words = [[ELEMENTS[t[2:]] if t != "O" else None for t in tags] for tags in predicted]
        return evaluate_all(self.metric_refs(), [ex["elements"] for ex in examples], words,
                            labels=self.labels(env))

    def predictions(self, split: str, examples: list[dict], features: list[dict], predictions: Any,
                    env: Environment) -> list[dict]:
        """One record per sentence: ``gold``/``pred`` = per word, the list of PICO elements it belongs to
        (gold keeps overlapping elements; a prediction has at most one), as ``pico-f1`` scores them."""
        predicted = self.predicted_tags(examples, features, predictions, env)
        return [{"id": i, "gold": ex["elements"], "pred": [[ELEMENTS[t[2:]]] if t != "O" else [] for t in tags]}
                for i, ex, tags in zip(unit_ids(split, examples), examples, predicted)]
