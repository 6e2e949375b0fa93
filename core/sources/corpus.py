"""Text corpora for domain pretraining: plain-text / JSONL files, and an in-domain corpus assembled from
the text of the benchmark datasets in the data dir (train and dev splits only; test splits never)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable, Iterator

from pydantic import Field, field_validator

from kinject.errors import DataError, DataMissingError
from kinject.interfaces import Environment, KnowledgeSource, PluginConfig
from kinject.sources.filters import BadRows
from kinject.sources.readers import iter_text_lines
from kinject.sources.triples import file_fingerprint

_HEADERS = ("sentence", "text", "question", "context", "abstract")
_MARKERS = re.compile(r"<<\s*|\s*>>|\[\[\s*|\s*\]\]")


def _tsv_column(name: str, column: int, splits=("train", "dev")) -> Callable[[Path], Iterator[str]]:
    def read(root: Path) -> Iterator[str]:
        for split in splits:
            path = root / f"{split}.tsv"
            if path.exists():
                for number, line in iter_text_lines(path, BadRows("skip")):
                    cells = line.split("\t")
                    if len(cells) <= column or (number == 1 and cells[column].strip().lower() in _HEADERS):
                        continue
                    yield cells[column]
    read.__name__ = name
    return read


def _conll(root: Path) -> Iterator[str]:
    for split in ("train", "devel", "dev"):
        path = root / f"{split}.tsv"
        if not path.exists():
            continue
        words: list[str] = []
        for line in open(path, encoding="utf-8", errors="replace"):
            token = line.split("\t")[0].strip()
            if not token or token.startswith("-DOCSTART-"):
                if words:
                    yield " ".join(words)
                words = []
            else:
                words.append(token)
        if words:
            yield " ".join(words)


def _pubmedqa(root: Path) -> Iterator[str]:
    items = json.loads((root / "ori_pqal.json").read_text(encoding="utf-8"))
    test_path = root / "test_ground_truth.json"
    test = set(json.loads(test_path.read_text(encoding="utf-8"))) if test_path.exists() else set()
    for pmid, item in items.items():
        if pmid in test:
            continue
        yield " ".join(item.get("CONTEXTS", []))
        if item.get("LONG_ANSWER"):
            yield item["LONG_ANSWER"]


def _chemprot(root: Path) -> Iterator[str]:
    for split in ("train", "dev"):
        path = root / "scibert" / f"{split}.jsonl"
        if path.exists():
            for _, line in iter_text_lines(path, BadRows("skip")):
                yield _MARKERS.sub(" ", json.loads(line)["text"]).strip()


def _medquad(root: Path) -> Iterator[str]:
    for _, line in iter_text_lines(root / "medquad.jsonl.gz", BadRows("skip")):
        yield json.loads(line).get("answer", "")


# dataset folder -> reader of its train/dev text. medquad has no split and CAPR evaluates on it, so it is
# only used when named explicitly.
DATASET_TEXT: dict[str, Callable[[Path], Iterator[str]]] = {
    "pubmedqa": _pubmedqa,
    "bioasq_yesno": _tsv_column("bioasq_yesno", 2),
    "hoc": _tsv_column("hoc", 1),
    "chemprot": _chemprot,
    "ncbi_disease": _conll, "bc5cdr_chem": _conll, "bc5cdr_disease": _conll, "bc2gm": _conll, "jnlpba": _conll,
    "medquad": _medquad,
}
DEFAULT_DATASETS = [name for name in DATASET_TEXT if name != "medquad"]


class CorpusSource(KnowledgeSource):
    """Text corpus: .txt (one text per line) / .jsonl files, and/or the train+dev text of local datasets."""

    kind = "corpus"

    class Config(PluginConfig):
        paths: list[str] = Field(default_factory=list, description="Files or folders (.txt: one text per "
                                 "non-empty line; .jsonl: the text_field of each object; .gz allowed).")
        text_field: str = Field("text", description="JSONL key holding the text.")
        datasets: list[str] = Field(default_factory=list, description="Data-dir datasets whose train/dev text "
                                    f"joins the corpus ('all' = {', '.join(DEFAULT_DATASETS)}; medquad on request).")
        min_chars: int = Field(20, ge=0, description="Drop texts shorter than this.")
        dedupe: bool = Field(True, description="Drop repeated texts.")
        max_texts: int | None = Field(None, ge=1, description="Stop after N texts.")
        on_bad_rows: str = Field("error", description="'error' or 'skip' for malformed lines.")

        @field_validator("datasets")
        @classmethod
        def _known(cls, value: list[str]) -> list[str]:
            out = DEFAULT_DATASETS if value == ["all"] else value
            unknown = [v for v in out if v not in DATASET_TEXT]
            if unknown:
                raise ValueError(f"unknown dataset {unknown[0]!r}; known: {', '.join(DATASET_TEXT)} or 'all'")
            return list(out)

        @field_validator("on_bad_rows")
        @classmethod
        def _mode(cls, value: str) -> str:
            if value not in ("error", "skip"):
                raise ValueError("must be 'error' or 'skip'")
            return value

    def _files(self) -> list[Path]:
        files = []
        for entry in self.config.paths:
            path = Path(entry).expanduser()
            if path.is_dir():
                files += sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(
                    (".txt", ".jsonl", ".txt.gz", ".jsonl.gz")))
            elif path.exists():
                files.append(path)
            else:
                raise DataMissingError("corpus file not found", path)
        return files

    def check(self, env: Environment) -> None:
        if not self.config.paths and not self.config.datasets:
            raise DataError("corpus source: set paths and/or datasets")
        self._files()
        for name in self.config.datasets:
            if not (env.data_dir / name).is_dir():
                raise DataMissingError(f"corpus source: dataset folder {name!r} not found", env.data_dir / name)

    def fingerprint(self, env: Environment) -> str:
        files = self._files() + [p for n in self.config.datasets for p in sorted((env.data_dir / n).rglob("*"))
                                 if p.is_file()]
        data = {"config": self.config.model_dump(mode="json"), "files": file_fingerprint(files)}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def _raw(self, env: Environment) -> Iterator[str]:
        bad = self.bad_rows = BadRows(self.config.on_bad_rows)
        for path in self._files():
            jsonl = path.name.removesuffix(".gz").endswith(".jsonl")
            for number, line in iter_text_lines(path, bad):
                if not jsonl:
                    yield line
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    bad(f"invalid JSON ({exc.msg})", path, number)
                    continue
                text = row.get(self.config.text_field) if isinstance(row, dict) else None
                if not isinstance(text, str):
                    bad(f"no string field {self.config.text_field!r}", path, number)
                    continue
                yield text
        for name in self.config.datasets:
            yield from DATASET_TEXT[name](env.data_dir / name)

    def iter_texts(self, env: Environment) -> Iterator[str]:
        """Stream the corpus texts (whitespace-normalised, filtered, deduplicated)."""
        seen: set[int] = set()
        count = 0
        for text in self._raw(env):
            text = " ".join(text.split())
            if len(text) < self.config.min_chars:
                continue
            if self.config.dedupe:
                key = hash(text)
                if key in seen:
                    continue
                seen.add(key)
            yield text
            count += 1
            if self.config.max_texts is not None and count >= self.config.max_texts:
                return
