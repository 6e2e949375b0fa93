"""The dataset catalogue: what kinject knows how to read, where it looks, how to get it.

A task describes the dataset it reads as its ``info`` (and any other it can read as ``extra_datasets``); the
catalogue is derived from the registered tasks, so a third-party task package's datasets appear in
``kinject data list|prepare|download`` with nothing else to register.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kinject.api import DataMissingError, KinjectError


@dataclass
class DatasetInfo:
    """One dataset: its folder under the data dir, the files each split reads, and how to get it."""

    name: str
    folder: str
    splits: dict[str, str] = field(default_factory=dict)  # split -> file relative to the folder
    description: str = ""
    how_to_get: str = ""  # one line: URL / command
    url: str | None = None  # canonical public download (for `kinject data download`)
    sha256: str | None = None
    file_sha256: dict[str, str] = field(default_factory=dict)  # url has "{file}": sha256 per fetched file
    prepare: Callable[..., None] | None = None  # prepare(data_dir: Path, **options) -> None
    prepared_from: str = ""  # what `prepare` reads (for messages)
    count: Callable[[Path], dict[str, int]] | None = None  # split sizes when present (given the folder)
    raw_files: Callable[[Path], list[Path]] | None = None  # the files `prepare` reads (given the data dir)
    prepared_on_use: bool = False  # tasks run `prepare` themselves on first use, into the cache
    prepare_version: str = "1"  # bump when `prepare`'s output changes (a new cache folder)


def datasets_of(task_cls: type) -> list[DatasetInfo]:
    """The datasets a task class reads: its ``info`` and its ``extra_datasets``."""
    found = [getattr(task_cls, "info", None), *getattr(task_cls, "extra_datasets", ())]
    return [info for info in found if isinstance(info, DatasetInfo)]


def catalogue(errors: dict[str, str] | None = None) -> dict[str, DatasetInfo]:
    """Every dataset of every registered task (imports the task plugins). A task plugin that fails to import is
    recorded in ``errors`` (task name -> error text) when given."""
    from kinject.api import KinjectError, registry

    tasks = registry("tasks")
    found: dict[str, DatasetInfo] = {}
    for name in tasks.names():
        try:
            infos = datasets_of(tasks.get(name))
        except KinjectError as exc:
            if errors is not None:
                errors[name] = str(exc)
            continue
        for info in infos:
            found.setdefault(info.name, info)
    return dict(sorted(found.items()))


def prepared_cache(info: DatasetInfo, cache_dir: Path) -> Path:
    """Where a ``prepared_on_use`` dataset is converted to on first use: <cache>/prepared/<name>-v<version>."""
    return Path(cache_dir) / "prepared" / f"{info.name}-v{info.prepare_version}"


def dataset(name: str) -> DatasetInfo:
    known = catalogue()
    if name not in known:
        import difflib

        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
        raise KinjectError(f"unknown dataset {name!r}." + (f" Did you mean {' or '.join(map(repr, close))}?"
                                                           if close else f" Known: {', '.join(known)}"))
    return known[name]


def split_file(info: DatasetInfo, split: str, data_dir: Path) -> Path:
    """The file of one split; DataMissingError (where it looked, how to get it) if absent."""
    path = Path(data_dir) / info.folder / info.splits[split]
    if not path.exists():
        hint = f"; get it: {info.how_to_get}" if info.how_to_get else ""
        raise DataMissingError(f"dataset {info.name!r} not found: looked for {path}{hint}")
    return path

