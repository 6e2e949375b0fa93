"""`kinject data list|prepare|download`: the dataset catalogue, converters and verified downloads.

Data dir: ``--data-dir``, else $KINJECT_DATA_DIR, else the user cache (kinject.spec.default_data_dir).
``prepare`` and ``download`` write to ``--output DIR`` (default: the data dir) and never leave a
half-written dataset: they build a temporary folder next to the target and rename it into place.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import typer

from kinject.api import atomic_directory

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Datasets: list, prepare, download.")


def _data_dir(data_dir: Optional[Path]) -> Path:
    from kinject.api import default_data_dir

    return Path(data_dir) if data_dir else default_data_dir()


def _writable(folder: Path, what: str) -> None:
    from kinject.api import KinjectError

    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise KinjectError(f"{folder}: not writable ({what}); pass --output DIR (a writable folder) and then "
                           f"use --data-dir DIR or KINJECT_DATA_DIR=DIR for runs")


RAW = "raw present, prepared on first use"
COLOURS = {"present": "green", "prepared": "green", RAW: "cyan", "missing": "yellow"}


def _line_counts(folder: Path, info) -> dict[str, int]:
    from kinject.tasks.readers import count_lines

    return {split: count_lines(folder / Path(file).name) for split, file in info.splits.items()
            if (folder / Path(file).name).exists()}


def status(info, data_dir: Path, cache_dir: Path | None = None) -> tuple[str, dict[str, int] | None, str]:
    """(state, split sizes or None, detail); state: present | prepared (a ``prepared_on_use`` dataset whose
    prepared files exist, in the data dir or the cache) | RAW (only its raw release is there) | missing |
    unreadable."""
    from kinject.tasks.catalogue import prepared_cache
    from kinject.api import KinjectError

    folder = data_dir / info.folder
    missing = [f for f in dict.fromkeys(info.splits.values()) if not (folder / f).exists()]
    state = "prepared" if info.prepared_on_use else "present"
    try:
        if info.splits and not missing:
            return state, info.count(folder) if info.count else None, str(folder)
        if info.prepared_on_use:
            cached = prepared_cache(info, cache_dir) if cache_dir else None
            if cached is not None and (cached / "manifest.json").exists():
                return state, _line_counts(cached, info), str(cached)
            raw = info.raw_files(data_dir) if info.raw_files else []
            if raw and all(path.exists() for path in raw):
                return RAW, None, f"{info.prepared_from or folder}: converted into the cache by the first run"
            absent = next((path for path in raw if not path.exists()), None)
            if absent is not None:
                return "missing", None, f"no {absent}"
    except (KinjectError, OSError, ValueError) as exc:
        return "unreadable", None, str(exc)
    return "missing", None, f"no {', '.join(missing) or 'split files'} in {folder}"


@app.command("list")
def list_datasets(data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Datasets folder")):
    """Every dataset kinject knows, present or missing, with split sizes when present; broken task plugins."""
    from rich.console import Console
    from rich.table import Table

    from kinject.tasks.catalogue import catalogue
    from kinject.api import default_cache_dir

    root = _data_dir(data_dir)
    table = Table(title=f"datasets in {root}", title_justify="left")
    for col in ("name", "folder", "status", "splits", "how to get / description"):
        table.add_column(col, overflow="fold")
    broken: dict[str, str] = {}
    for name, info in catalogue(broken).items():
        state, sizes, detail = status(info, root, default_cache_dir())
        shown = " / ".join(f"{s} {n}" for s, n in sizes.items()) if sizes else ""
        note = info.description if state in ("present", "prepared") else (
            f"{detail}; " + (info.description if state == RAW else
                             f"prepare: kinject data prepare {name}" if info.prepare else info.how_to_get))
        table.add_row(name, info.folder, f"[{COLOURS.get(state, 'red')}]{state}[/]", shown, note)
    for name, error in sorted(broken.items()):
        table.add_row(f"task {name}", "", "[red]broken[/]", "", f"the task plugin does not load: {error}")
    Console().print(table)


def parse_options(args: list[str]) -> dict[str, Any]:
    """``--key value``, ``--key=value`` and bare ``--flag`` (True) -> {key: value}; dashes -> underscores."""
    from kinject.api import KinjectError

    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise KinjectError(f"unexpected argument {arg!r}: dataset options are --name value")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                value, i = args[i + 1], i + 1
            else:
                value = True
        out[key.replace("-", "_")] = value
        i += 1
    return out


def _check_options(fn, options: dict[str, Any], name: str) -> None:
    from kinject.api import KinjectError

    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [p for p in params if p not in ("data_dir", "out")]
    unknown = [k for k in options if k not in params]
    if unknown:
        raise KinjectError(f"dataset {name!r}: unknown option --{unknown[0].replace('_', '-')}; accepted: "
                           + (", ".join(f"--{p.replace('_', '-')}" for p in accepted) or "none"))


def prepared_folder(info) -> Path:
    """The folder (relative to the data dir) the split files live in: what ``prepare`` writes."""
    parents = {Path(f).parent for f in info.splits.values()}
    common = Path(os.path.commonpath([str(p) for p in parents])) if parents else Path(".")
    return Path(info.folder) / common


def _move_files(tmp: Path, target: Path) -> None:
    """Move every file the converter wrote into ``target`` (other files there, e.g. sources, stay)."""
    for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
        destination = target / path.relative_to(tmp)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, destination)


@app.command("prepare", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def prepare(ctx: typer.Context, name: str = typer.Argument(..., help="Dataset name (see `kinject data list`)"),
            data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Where the source files are read"),
            output: Optional[Path] = typer.Option(None, "--output", "-o", help="Data dir to write to "
                                                  "(default: the data dir; must be writable)")):
    """Run a dataset's converter; any further --name value options go to it (e.g. --mimic-dir DIR)."""
    from rich.console import Console

    from kinject.api import KinjectError
    from kinject.tasks.catalogue import dataset

    info = dataset(name)
    if info.prepare is None:
        raise KinjectError(f"dataset {name!r} needs no preparation (nothing to convert); get it: {info.how_to_get}")
    source = _data_dir(data_dir)
    options = parse_options(list(ctx.args))
    _check_options(info.prepare, options, name)
    for key, value in options.items():
        if key.endswith(("_dir", "_path", "_file")) and isinstance(value, str):
            options[key] = Path(value).expanduser()
    target = (Path(output) if output else source) / prepared_folder(info)
    _writable(target.parent, f"output of 'kinject data prepare {name}'")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.tmp-", dir=target.parent) as tmp:
        result = info.prepare(data_dir=source, out=Path(tmp), **options)
        _move_files(Path(tmp), target)  # file by file: other files in the target folder stay
    shown = f" {result}" if result else ""
    Console().print(f"prepared {name} -> {target}{shown}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(url: str, destination: Path, expected: str | None) -> str:
    """Download ``url`` to ``destination``; KinjectError if the sha256 differs from ``expected``."""
    import urllib.error
    import urllib.request

    from kinject.api import KinjectError

    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(destination, "wb") as handle:
            shutil.copyfileobj(response, handle)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise KinjectError(f"{url}: download failed ({getattr(exc, 'reason', exc)})") from None
    digest = sha256_of(destination)
    if expected and digest != expected.lower():
        raise KinjectError(f"{url}: sha256 mismatch (expected {expected}, got {digest}); nothing was written")
    return digest


@app.command("download")
def download(name: str = typer.Argument(..., help="Dataset name (see `kinject data list`)"),
             output: Optional[Path] = typer.Option(None, "--output", "-o", help="Data dir to write to "
                                                   "(default: the data dir)"),
             force: bool = typer.Option(False, "--force", help="Replace the dataset folder if it exists")):
    """Fetch a dataset from its public URL, verify its sha256, and install it atomically."""
    import tarfile
    import zipfile

    from rich.console import Console

    from kinject.api import KinjectError
    from kinject.tasks.catalogue import dataset

    info = dataset(name)
    if not info.url:
        raise KinjectError(f"dataset {name!r} has no public download; get it: {info.how_to_get}")
    root = Path(output) if output else _data_dir(None)
    target = root / info.folder
    if target.exists() and not force:
        raise KinjectError(f"{target} exists; pass --force to replace it")
    _writable(root, f"output of 'kinject data download {name}'")
    console = Console(stderr=True)
    with atomic_directory(target, replace=force) as out:
        tmp = out / ".download"
        if "{file}" in info.url:
            for relative in dict.fromkeys(info.splits.values()):
                fetch(info.url.format(file=relative), tmp / info.folder / relative, info.file_sha256.get(relative))
        else:
            archive = tmp / Path(info.url.split("?")[0]).name
            digest = fetch(info.url, archive, info.sha256)
            if not info.sha256:
                console.print(f"[yellow]warning:[/] no checksum registered for {name}; got sha256 {digest}")
            if archive.name.endswith((".tar.gz", ".tgz", ".tar")):
                with tarfile.open(archive) as tar:
                    tar.extractall(tmp, filter="data")
                archive.unlink()
            elif archive.name.endswith(".zip"):
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(tmp)
                archive.unlink()
            else:
                (tmp / info.folder).mkdir(exist_ok=True)
                archive.rename(tmp / info.folder / archive.name)
        if not (tmp / info.folder).is_dir():
            raise KinjectError(f"{info.url}: the download holds no folder {info.folder!r}")
        for item in (tmp / info.folder).iterdir():
            item.rename(out / item.name)
        shutil.rmtree(tmp)
    Console().print(f"downloaded {name} -> {target}")
