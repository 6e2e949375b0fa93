"""Text corpora for domain pretraining: user text/JSONL files (streamed, any size) and the in-domain text of
benchmark tasks read through each task's own reader (``task.examples``; train and dev splits only).

No test text reaches the corpus: every test split of the corpus's tasks (and of ``exclude_tasks``, and of
any task a caller adds, e.g. the pretraining run's own task) and every evaluation split of a retrieval task
(each evaluated CAPR query and passage) goes into a :class:`HeldOutText` filter first; a corpus text is
dropped when it equals one of those texts or shares a sentence with one (compared lower-cased, without ASCII
punctuation and spaces, so tokenisation and spacing differences do not hide an overlap). Deduplication
keeps one 64-bit key per text in an on-disk SQLite table, so memory stays flat in the corpus size.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import Field, field_validator

from kinject.api import DataError, DataMissingError, Environment, KnowledgeSource, PluginConfig, Task
from kinject.knowledge.sources.filters import BadRows
from kinject.knowledge.sources.readers import iter_text_lines
from kinject.api import FILE_PATH, files_fingerprint

log = logging.getLogger("kinject")

#: the in-domain tasks ``tasks: [all]`` reads (those whose data is missing are skipped with a warning)
ALL_TASKS: dict[str, dict[str, Any]] = {
    "pubmedqa": {}, "bioasq": {}, "hoc": {}, "chemprot": {}, "ddi": {}, "gad": {}, "biosses": {},
    "ncbi-disease": {}, "bc5chem": {}, "bc5disease": {}, "bc2gm": {}, "jnlpba": {}, "ebmpico": {},
    "capr": {"dataset": "medquad"},
}
#: task options the corpus sets unless the entry sets them: relation mentions kept as text (markers are
#: stripped), every retrieval query and candidate read (each evaluated one then excluded)
READER_OPTIONS: dict[str, Any] = {"entity_style": "markers", "max_train_queries": None, "max_eval_queries": None,
                                  "train_negatives": 100}
_MARKERS = re.compile(r"\[/?E[12]\]")
_DROP = bytes(c for c in range(128) if not chr(c).isalnum())  # ASCII punctuation, spaces, controls


# -- what must not reach a corpus ---------------------------------------------------------------- #
def signature(text: str) -> bytes:
    """The text lower-cased, UTF-8, without ASCII punctuation and whitespace (for overlap tests)."""
    return text.lower().encode("utf-8").translate(None, _DROP)


def sentence_signatures(text: str) -> list[bytes]:
    """Signatures of the text's sentences (split after . ! ? followed by a space); joined, they are the
    text's signature."""
    text = " ".join(text.split())
    return [signature(part) for part in text.replace("? ", ". ").replace("! ", ". ").split(". ")]


def example_texts(example: dict) -> Iterator[str]:
    """The texts of one task example: its words (token tasks), ``text`` and ``text_pair`` (markers removed)."""
    if isinstance(example.get("words"), list):
        yield " ".join(example["words"])
    for key in ("text", "text_pair"):
        value = example.get(key)
        if isinstance(value, str):
            yield _MARKERS.sub(" ", value)


class HeldOutText:
    """Texts a corpus must not contain: whole-text and per-sentence signatures (sentences of at least
    ``min_sentence`` signature characters, so "Yes." or "Results:" never matches everything)."""

    def __init__(self, min_sentence: int = 20):
        self.min_sentence = min_sentence
        self.keys: set[int] = set()
        self.texts = 0

    def _keys(self, text: str) -> list[int]:
        parts = sentence_signatures(text)
        whole = b"".join(parts)
        return ([hash(whole)] if whole else []) + [hash(p) for p in parts if len(p) >= self.min_sentence]

    def add(self, text: str) -> None:
        self.texts += 1
        self.keys.update(self._keys(text))

    def add_task(self, task: Task, env: Environment, keep: tuple[str, ...] = ("train", "dev")) -> None:
        """Every text of the task's splits outside ``keep`` (retrieval tasks: every evaluation split)."""
        for split in held_out_splits(task, keep):
            for example in task.examples(split, env):
                for text in example_texts(example):
                    self.add(text)

    def blocks(self, text: str) -> bool:
        return bool(self.keys) and any(key in self.keys for key in self._keys(text))


def corpus_splits(task: Task, keep: tuple[str, ...]) -> list[str]:
    """The splits of ``task`` whose text may join a corpus (retrieval tasks: only the train split)."""
    if task.kind == "retrieval":
        return [task.train_split]
    return [s for s in dict.fromkeys((task.train_split, *task.eval_splits)) if s in keep and s != "test"]


def held_out_splits(task: Task, keep: tuple[str, ...]) -> list[str]:
    used = corpus_splits(task, keep)
    return [s for s in dict.fromkeys((task.train_split, *task.eval_splits)) if s not in used]


class DiskSet:
    """A set of 64-bit keys in an SQLite table (memory flat in the number of keys)."""

    def __init__(self, folder: Path):
        self.db = sqlite3.connect(str(Path(folder) / "seen.sqlite"))
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE seen (key INTEGER PRIMARY KEY)")

    def add(self, key: int) -> bool:
        """Add ``key``; False when it was there already."""
        return self.db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (key,)).rowcount == 1

    def close(self) -> None:
        self.db.close()


# -- the source ---------------------------------------------------------------------------------- #
TaskEntry = str | dict[str, Any]


class CorpusSource(KnowledgeSource):
    """Text corpus: .txt / .jsonl files, and the train+dev text of tasks through their own readers."""

    kind = "corpus"

    class Config(PluginConfig):
        paths: list[str] = Field(default_factory=list, description="Files or folders (.txt: one text per "
                                 "non-empty line; .jsonl: the text_field of each object; .gz allowed); streamed.",
                                 json_schema_extra=FILE_PATH)
        text_field: str = Field("text", description="JSONL key holding the text.")
        tasks: list[TaskEntry] = Field(default_factory=list, description="Tasks whose train/dev text joins the "
                                       "corpus, read by the task itself: names or {name: ..., <task options>}; "
                                       f"'all' = {', '.join(ALL_TASKS)} (those without data are skipped).")
        splits: list[Literal["train", "dev"]] = Field(["train", "dev"], description="Which splits of each task "
                                                      "join (test never; retrieval tasks: train only).")
        exclude_tasks: list[TaskEntry] = Field(default_factory=list, description="Tasks whose test text is "
                                               "removed from the corpus without adding any of their text.")
        min_chars: int = Field(20, ge=0, description="Drop texts shorter than this (after whitespace "
                               "normalisation).")
        dedupe: bool = Field(True, description="Drop repeated texts (one 64-bit key per text, kept on disk).")
        max_texts: int | None = Field(None, ge=1, description="Stop after N texts.")
        on_bad_rows: Literal["error", "skip"] = Field("error", description="A malformed line (invalid UTF-8 or "
                                                      "JSON): 'error' (file:line) or 'skip' (counted).")

        @field_validator("tasks", "exclude_tasks")
        @classmethod
        def _entries(cls, value: list[TaskEntry]) -> list[TaskEntry]:
            from kinject.api import registry

            known = registry("tasks").names()
            for entry in value:
                name = entry.get("name") if isinstance(entry, dict) else entry
                if not isinstance(name, str):
                    raise ValueError("a task entry is a name or a mapping with a 'name'")
                if name != "all" and name not in known:
                    raise ValueError(f"unknown task {name!r}; known: {', '.join(known)} or 'all'")
            return value

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self._tasks: dict[str, list[tuple[str, Task]]] = {}
        self.stats: Counter = Counter()

    # -- tasks ----------------------------------------------------------------------------------- #
    def task_list(self, env: Environment, which: str = "tasks") -> list[tuple[str, Task]]:
        """(label, task) of ``tasks`` or ``exclude_tasks``, built, checked and read once (missing data is an
        error for a named task and a warning under 'all')."""
        if which in self._tasks:
            return self._tasks[which]
        from kinject.api import registry

        out: list[tuple[str, Task]] = []
        for entry in getattr(self.config, which):
            name, options = (entry, {}) if isinstance(entry, str) else (entry["name"], {
                k: v for k, v in entry.items() if k != "name"})
            expanded = ALL_TASKS.items() if name == "all" else [(name, options)]
            for task_name, task_options in expanded:
                cls = registry("tasks").get(task_name)
                fields = cls.Config.model_fields
                merged = {k: v for k, v in READER_OPTIONS.items() if k in fields} | dict(task_options)
                task = cls(cls.Config.model_validate(merged))
                try:
                    task.prepare_data(env)
                except DataMissingError as exc:
                    if name != "all":
                        raise
                    log.warning("corpus: task %s skipped (%s)", task_name, exc)
                    continue
                out.append((task_name, task))
        self._tasks[which] = out
        return out

    def task_modules(self, env: Environment) -> list[str]:
        """Modules of the tasks whose readers feed this corpus (for code fingerprints)."""
        return sorted({type(t).__module__ for which in ("tasks", "exclude_tasks")
                       for _, t in self.task_list(env, which)})

    def held_out(self, env: Environment) -> HeldOutText:
        """The test text of ``tasks`` and ``exclude_tasks``."""
        held = HeldOutText()
        for which in ("tasks", "exclude_tasks"):
            for _, task in self.task_list(env, which):
                held.add_task(task, env, tuple(self.config.splits))
        return held

    # -- files ----------------------------------------------------------------------------------- #
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

    def _file_texts(self, path: Path, bad: BadRows) -> Iterator[str]:
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

    def _check_file(self, path: Path, env: Environment) -> int:
        """Read the whole file once (invalid UTF-8 / JSON -> DataError file:line) and count its usable texts;
        the result is remembered in the cache for the file's size and mtime."""
        key = hashlib.sha256(json.dumps([files_fingerprint([path]), self.config.text_field, self.config.min_chars,
                                         self.config.on_bad_rows]).encode()).hexdigest()[:32]
        marker = Path(env.cache_dir) / "corpus-checks" / f"{key}.json"
        if marker.exists():
            return json.loads(marker.read_text())["usable"]
        usable = sum(1 for text in self._file_texts(path, BadRows(self.config.on_bad_rows))
                     if len(" ".join(text.split())) >= self.config.min_chars)
        from kinject.api import atomic_write_text

        atomic_write_text(marker, json.dumps({"path": str(path), "usable": usable}))
        return usable

    # -- the KnowledgeSource interface ------------------------------------------------------------ #
    def check(self, env: Environment) -> None:
        """Files exist and decode (file:line otherwise), tasks read, and the corpus is not empty."""
        if not self.config.paths and not self.config.tasks:
            raise DataError("corpus source: set paths and/or tasks")
        usable = sum(self._check_file(path, env) for path in self._files())
        for _, task in self.task_list(env, "tasks"):
            usable += sum(1 for split in corpus_splits(task, tuple(self.config.splits))
                          for example in task.examples(split, env) for text in example_texts(example)
                          if len(" ".join(text.split())) >= self.config.min_chars)
        self.task_list(env, "exclude_tasks")
        if usable == 0:
            where = ", ".join([*self.config.paths, *(label for label, _ in self.task_list(env, "tasks"))])
            raise DataError(f"corpus source: empty corpus (no text of at least {self.config.min_chars} characters "
                            f"in {where or 'the configured paths and tasks'})")

    def fingerprint(self, env: Environment) -> str:
        tasks = {which: [(label, task.describe_data(env), files_fingerprint(task.data_files(env)))
                         for label, task in self.task_list(env, which)] for which in ("tasks", "exclude_tasks")}
        data = {"config": self.config.model_dump(mode="json"), "files": files_fingerprint(self._files()),
                "tasks": tasks}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def _raw(self, env: Environment) -> Iterator[tuple[str, str]]:
        """(origin, text) of every file line and every corpus-split example text, in order."""
        bad = self.bad_rows = BadRows(self.config.on_bad_rows)
        for path in self._files():
            for text in self._file_texts(path, bad):
                yield f"file:{path.name}", text
        for label, task in self.task_list(env, "tasks"):
            for split in corpus_splits(task, tuple(self.config.splits)):
                for example in task.examples(split, env):
                    for text in example_texts(example):
                        yield f"task:{label}/{split}", text

    def iter_texts(self, env: Environment, exclude: HeldOutText | None = None) -> Iterator[str]:
        """Stream the corpus: whitespace-normalised, at least ``min_chars``, no held-out (test) text - the
        source's own plus ``exclude`` - and, with ``dedupe``, each text once. Counts go to ``self.stats``."""
        held = self.held_out(env)
        if exclude is not None:
            held.keys |= exclude.keys
        stats = self.stats = Counter()
        with tempfile.TemporaryDirectory(prefix="corpus-dedupe-", dir=_tmp_root(env)) as folder:
            seen = DiskSet(Path(folder)) if self.config.dedupe else None
            try:
                for origin, text in self._raw(env):
                    text = " ".join(text.split())
                    stats["read"] += 1
                    if len(text) < self.config.min_chars:
                        stats["too_short"] += 1
                    elif seen is not None and not seen.add(hash(text)):
                        stats["duplicates"] += 1
                    elif held.blocks(text):
                        stats["held_out_overlap"] += 1
                    else:
                        stats["kept"] += 1
                        stats[f"kept {origin}"] += 1
                        yield text
                        if self.config.max_texts is not None and stats["kept"] >= self.config.max_texts:
                            return
            finally:
                if seen is not None:
                    seen.close()


def _tmp_root(env: Environment) -> str | None:
    root = Path(env.cache_dir) / "tmp"
    try:
        root.mkdir(parents=True, exist_ok=True)
        return str(root)
    except OSError:
        return None
