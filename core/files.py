"""Files on disk: atomic writes and replaces, copies out of the cache, debris of dead processes, and
filesystem faults as one-line errors.

Temporary siblings are named ``.<target>.<what>-<host>-<pid>-<token>`` (what: ``tmp``, ``old``, ``damaged``), so
the next process that writes into the same folder can tell which belong to a process that no longer runs on
this host and remove them (:func:`remove_debris`); an ``old`` sibling whose target is missing (a crash in the
middle of a replace on a filesystem without atomic exchange) is put back instead.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from kinject.errors import KinjectError


HOST = socket.gethostname().replace("/", "_") or "localhost"
_DEBRIS = re.compile(r"^\.(?P<target>.+)\.(?P<what>tmp|old|damaged)-(?:(?P<host>.+)-)?(?P<pid>\d+)-(?P<token>[0-9a-f]{8})$")
FOREIGN_DEBRIS_AGE_S = 7 * 24 * 3600  # debris of another host is only removed once it is this old


class FilesystemError(KinjectError):
    """The disk refused a write (full, read-only, no permission, a file where a folder should be)."""


FAULTS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
          errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
          errno.EPERM: "operation not permitted", errno.ENOTDIR: "a part of the path is a file, not a folder",
          errno.EEXIST: "exists and is not a folder"}


# -- temporary siblings and debris ------------------------------------------------------------------ #
def sibling(target: Path, what: str) -> Path:
    """A fresh temporary path beside ``target`` that names this host and process."""
    return target.with_name(f".{target.name}.{what}-{HOST}-{os.getpid()}-{secrets.token_hex(4)}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _abandoned(match: re.Match, path: Path) -> bool:
    host, pid = match["host"] or HOST, int(match["pid"])
    if host == HOST:
        return pid != os.getpid() and not pid_alive(pid)
    try:
        return time.time() - path.lstat().st_mtime > FOREIGN_DEBRIS_AGE_S
    except OSError:
        return False


def remove_debris(folder: Path) -> int:
    """Remove the temporary siblings in ``folder`` left by processes that died (restoring an ``old`` one whose
    target is gone); returns how many were handled. Never raises."""
    handled = 0
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return 0
    for path in entries:
        match = _DEBRIS.match(path.name)
        if match is None or not _abandoned(match, path):
            continue
        try:
            target = path.with_name(match["target"])
            if match["what"] == "old" and not target.exists():
                path.rename(target)  # a replace cut off between its two renames: the old one is still the one
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            handled += 1
        except OSError:
            continue
    return handled


def discard(path: Path) -> None:
    """Remove a folder or file at once for every reader (renamed aside first, then deleted)."""
    aside = sibling(path, "damaged")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


# -- atomic writes ------------------------------------------------------------------------------------ #
def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def replace_folder(new: Path, target: Path) -> None:
    """Put folder ``new`` at ``target``, replacing what is there: an atomic exchange where the filesystem has
    one, else two renames (a crash between them leaves the old one aside, put back by :func:`remove_debris`)."""
    if not target.exists():
        new.rename(target)
        return
    if _exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)  # now holds the old one
        return
    old = sibling(target, "old")
    target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_directory(target: Path, *, replace: bool = False,
                     replaceable: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yield an empty folder beside ``target``; it becomes ``target`` when the block succeeds and is removed on
    any exception. If ``target`` exists by then: with ``replace``, it is swapped out and deleted (if
    ``replaceable(target)`` says so; else a FilesystemError and ``target`` is left as it was); without, the
    existing ``target`` wins (another process finished it first) and the new folder is discarded."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_debris(target.parent)
    tmp = sibling(target, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        if replace:
            if target.exists() and replaceable is not None and not replaceable(target):
                raise FilesystemError(f"{target}: appeared while the run was writing and is not a kinject run "
                                      "folder; left as it is")
            replace_folder(tmp, target)
        else:
            try:
                tmp.rename(target)
            except OSError:
                if not target.exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # the race: the finished target wins
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` when the block succeeds and is removed
    on any exception, so readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = sibling(path, "tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename)."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding=encoding)


# -- copies ------------------------------------------------------------------------------------------- #
def copy_file(src: str | Path, dst: str | Path) -> None:
    """Copy ``src`` to ``dst`` sharing no writable inode with it: a reflink (copy-on-write clone) where the
    filesystem has them, else a kernel-side copy. Editing the copy never changes the original."""
    import fcntl

    ficlone = 0x40049409  # _IOW(0x94, 9, int)
    try:
        with open(src, "rb") as source, open(dst, "wb") as target:
            fcntl.ioctl(target.fileno(), ficlone, source.fileno())
        return
    except OSError:
        pass
    shutil.copyfile(src, dst)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a folder (or a file) with :func:`copy_file`, merging into ``dst``."""
    src, dst = Path(src), Path(dst)
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=copy_file, dirs_exist_ok=True)
    else:
        copy_file(src, dst)


# -- faults ------------------------------------------------------------------------------------------- #
def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def disk_nearly_full(path: Path) -> bool:
    """Whether the filesystem holding ``path`` (or its nearest existing parent) has almost no room left."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    free, total = stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize
    return free < max(1 << 20, total // 200)


def filesystem_fault(exc: BaseException, where: Path) -> FilesystemError | None:
    """``exc`` as a one-line FilesystemError naming the path, when the disk caused it (full, read-only, no
    permission, a file in the way); None for anything else. Libraries that swallow the OSError (torch's zip
    writer: "unexpected pos", safetensors: "StorageFull") are recognised by a full disk under ``where``."""
    for error in _chain(exc):
        if isinstance(error, OSError) and error.errno in FAULTS:
            path = error.filename or where
            return FilesystemError(f"{path}: {FAULTS[error.errno]}")
    text = " ".join(str(error) for error in _chain(exc))
    if "No space left" in text or "StorageFull" in text or disk_nearly_full(where):
        return FilesystemError(f"{where}: {FAULTS[errno.ENOSPC]}")
    return None


def check_writable(folder: Path, what: str) -> None:
    """Create ``folder`` if needed and check that a file can be written in it; FilesystemError naming ``what``
    and the path otherwise (a read-only or full disk, no permission, a file in the way)."""
    import tempfile

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=".kinject-write-check-", dir=folder)
        os.close(handle)
        os.unlink(name)
    except OSError as exc:
        reason = FAULTS.get(exc.errno, exc.strerror or type(exc).__name__)
        raise FilesystemError(f"{what} {exc.filename or folder}: cannot write there ({reason})") from None


# -- weights a run reads back -------------------------------------------------------------------------------- #
def weights_problem(path: Path) -> str | None:
    """Why a safetensors file is not whole (None when it is): its header length, its JSON header and the bytes that
    header describes must all be in the file - what a write cut short (a power loss without fsync, a full disk)
    leaves out. Reads the header only."""
    import json

    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, not even a header"
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if 8 + length > size:
            return f"{size} bytes, shorter than its {length}-byte header says"
        try:
            header = json.loads(handle.read(length))
        except ValueError:
            return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a table of tensors"
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        return "its header is malformed"
    if 8 + length + end != size:
        return f"{size} bytes where its header describes {8 + length + end}"
    return None


def check_weights(folder: Path, what: str = "model") -> None:
    """One line (a DataError naming the file) when a model folder's weights are missing, cut short or damaged:
    every ``*.safetensors`` whole (:func:`weights_problem`), every shard a ``*.index.json`` names present."""
    import json

    from kinject.errors import DataError

    folder = Path(folder)
    tensors = sorted(folder.glob("*.safetensors"))
    if not tensors and not any(folder.glob("pytorch_model*.bin")):
        raise DataError(f"{what}: no weights in the folder (model.safetensors)", folder)
    for index in folder.glob("*.safetensors.index.json"):
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError):
            raise DataError(f"{what}: unreadable shard index", index) from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise DataError(f"{what}: shard {missing[0]} of the index is missing", index)
    for path in tensors:
        problem = weights_problem(path)
        if problem:
            raise DataError(f"{what}: damaged weights ({problem}); restore or re-create the file", path)
