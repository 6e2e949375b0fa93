"""The dataset catalogue: what kinject knows how to read, where it looks, how to get it.

Task modules describe their datasets with :func:`register_dataset`; ``kinject data list|prepare|download``
read the catalogue (after importing the task plugins). Third-party task packages register the same way.
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


_CATALOGUE: dict[str, DatasetInfo] = {}


def register_dataset(info: DatasetInfo) -> DatasetInfo:
    _CATALOGUE[info.name] = info
    return info


def catalogue(errors: dict[str, str] | None = None) -> dict[str, DatasetInfo]:
    """Every registered dataset (imports the task plugins first so they can register). A task plugin that
    fails to import is recorded in ``errors`` (task name -> error text) when given."""
    from kinject.api import registry

    tasks = registry("tasks")
    for name in tasks.names():
        problem = tasks.check(name)
        if problem and errors is not None:
            errors[name] = problem
    return dict(sorted(_CATALOGUE.items()))


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


def require(info: DatasetInfo, data_dir: Path, splits: tuple[str, ...] | None = None) -> None:
    for split in splits or tuple(info.splits):
        split_file(info, split, data_dir)
