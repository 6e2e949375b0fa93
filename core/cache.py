"""The stage cache on disk: one lock per stage key, a digest of every file a finished stage holds, and the
check of those digests on every cache hit.

Under ``<cache>/stages/<stage name>/``:

* ``<key>/`` a finished stage; its ``stage.json`` (written last) lists every file with size and sha256.
* ``<key>.partial/`` the stage being computed (``out/``, and ``work/`` with trainer checkpoints for --resume).
* ``<key>.lock`` the lock: only its holder creates, resumes, finishes or deletes ``<key>.partial/``. Held through
  ``flock`` (released by the kernel when the holder dies, also on NFS); ``KINJECT_LOCK=lease`` uses a lease
  file refreshed by a heartbeat instead, for shared filesystems whose ``flock`` is local to one node (Lustre's
  ``localflock``): a holder that stops refreshing for ``KINJECT_LOCK_LEASE`` seconds (default 120) loses it.
* ``<key>.owner`` who holds the lock (host, pid, since, run), for the message a waiting process prints.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from kinject.files import HOST, atomic_write_text


log = logging.getLogger("kinject")

POLL_S = 1.0  # how often a waiting process looks again


def lock_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


def owner_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".owner")


def partial_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".partial")


class StageLock:
    """Exclusive hold on one stage key for this process, across processes and machines that share the cache.

    ``with StageLock(folder, label, run=...) as waited:`` blocks until the lock is free (saying once who holds it)
    and yields whether it had to wait."""

    def __init__(self, folder: Path, label: str, run: str = ""):
        import uuid

        self.folder, self.label, self.run = Path(folder), label, run
        self._lock = _make_lock(lock_path(self.folder))
        self.token = uuid.uuid4().hex  # this hold's generation: a holder that took the stage over writes its own

    def __enter__(self) -> bool:
        from filelock import Timeout

        waited_since = None
        while True:
            try:
                self._lock.acquire(timeout=POLL_S if waited_since is None else POLL_S * 5)
                break
            except Timeout:
                if waited_since is None:
                    waited_since = time.monotonic()
                    log.info("stage %s: waiting for %s, which is computing it", self.label, self.holder())
        info = {"host": HOST, "pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run": self.run,
                "token": self.token}
        try:
            atomic_write_text(owner_path(self.folder), json.dumps(info))
        except OSError:
            pass  # the owner file feeds messages and, for leases, the fence
        if waited_since is not None:
            log.info("stage %s: free after %.0f s", self.label, time.monotonic() - waited_since)
        return waited_since is not None

    def __exit__(self, *exc) -> bool:
        if self.holds():  # a holder whose lease was taken over leaves the new holder's records alone
            owner_path(self.folder).unlink(missing_ok=True)
        try:
            self._lock.release()
        except Exception:  # noqa: BLE001 - a lease another process took over is not this process's to release
            pass
        return False

    def holds(self) -> bool:
        """Whether this process still holds the stage: always with flock (the kernel keeps the lock until the
        process dies); with leases, while the owner file still carries this hold's token (a process that stalled
        past the lease - Ctrl-Z, a suspended VM - finds another's token there: the stage was taken over)."""
        if os.environ.get("KINJECT_LOCK", "flock") != "lease":
            return True
        return _owner(self.folder).get("token") == self.token

    def holder(self) -> str:
        """Who holds the lock, as far as its owner file says."""
        info = _owner(self.folder)
        if not info:
            return "another process"
        where = f"process {info.get('pid')} on {info.get('host')}"
        return f"{where} (since {info.get('since')}{', run ' + info['run'] if info.get('run') else ''})"


def _owner(folder: Path) -> dict:
    """The owner file of a stage's lock ({} when there is none or it is damaged: it feeds messages and the fence)."""
    from kinject.errors import DataError
    from kinject.records import read_record

    try:
        return read_record(owner_path(folder), limit=2**16)
    except DataError:
        return {}


def _make_lock(path: Path):
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    if os.environ.get("KINJECT_LOCK", "flock") == "lease":
        from filelock import SoftFileLease

        return SoftFileLease(str(path), lease_duration=float(os.environ.get("KINJECT_LOCK_LEASE", "120")),
                             thread_local=False)
    return FileLock(str(path), thread_local=False)


def make_lock(path: Path):
    """A cross-process lock file at ``path`` of the kind the stage cache uses (flock, or ``KINJECT_LOCK=lease``
    for filesystems without working flock): for tools that lock their own work (e.g. a grid's cells)."""
    return _make_lock(Path(path))


def lock_held(path: Path) -> bool:
    """Whether some process holds the lock file ``path`` (a :func:`make_lock` lock) right now."""
    from filelock import Timeout

    if not Path(path).exists():
        return False
    lock = _make_lock(Path(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


# -- what a finished stage holds ----------------------------------------------------------------------- #
def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_records(folder: Path) -> dict[str, dict[str, Any]]:
    """Every file under ``folder`` (but stage.json): relative path -> size, mtime (ns) and sha256."""
    out = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.name != "stage.json":
            stat = path.stat()
            out[path.relative_to(folder).as_posix()] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                                        "sha256": _sha256(path)}
    return out


def damaged_files(folder: Path, records: dict[str, dict[str, Any]] | None) -> list[str]:
    """Files of a finished stage that differ from its records (changed, missing, or added). A file whose size
    and modification time are as recorded is taken as intact; any other is hashed."""
    if records is None:
        return ["stage.json (no file records)"]
    damaged = []
    present = {path.relative_to(folder).as_posix() for path in Path(folder).rglob("*")
               if path.is_file() and path.name != "stage.json"}
    for name in sorted(present - set(records)):
        damaged.append(f"{name} (added)")
    for name, record in records.items():
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            damaged.append(f"{name} (missing)")
            continue
        if stat.st_size != record["size"]:
            damaged.append(f"{name} (size)")
        elif stat.st_mtime_ns != record["mtime_ns"] and _sha256(path) != record["sha256"]:
            damaged.append(f"{name} (content)")
    return damaged


class _FileRecord(BaseModel):
    size: StrictInt = Field(ge=0)
    mtime_ns: StrictInt
    sha256: StrictStr


class StageInfo(BaseModel):
    """A finished stage's stage.json, the fields the cache reads back (every file's digest; seconds spent)."""

    model_config = ConfigDict(extra="allow")
    files: dict[str, _FileRecord]
    seconds: Optional[StrictFloat] = Field(None, ge=0, allow_inf_nan=False)


def stage_info_problem(folder: Path) -> tuple[dict | None, str | None]:
    """(stage.json of the stage at ``folder``, None) when it reads back as the cache wrote it; (None, why not)
    otherwise: bounded and schema-checked (:func:`kinject.records.read_record`), a missing one is (None, None)."""
    from kinject.errors import DataError, DataMissingError
    from kinject.records import read_record

    try:
        return read_record(folder / "stage.json", StageInfo), None
    except DataMissingError:
        return None, None
    except DataError as exc:
        return None, exc.reason


def read_stage_info(folder: Path) -> dict | None:
    """The stage.json of a finished stage (None when it has none or it is damaged)."""
    return stage_info_problem(folder)[0]


def check_finished(folder: Path) -> tuple[bool, list[str]]:
    """(finished, damaged files) of the stage at ``folder``: finished when its stage.json is there; a stage.json
    that does not read back as written (cut short, a list, a FIFO...) is a damaged file of a finished stage."""
    info, problem = stage_info_problem(folder)
    if problem is not None:
        return True, [f"stage.json ({problem})"]
    if info is None:
        return False, []
    return True, damaged_files(folder, info.get("files"))


CLAIM_AGE_S = 24 * 3600  # spread-stage claims of a launch that ended without removing them


def clean_stage_folder(folder: Path) -> None:
    """Remove what dead processes left in one stage's folder: temporary siblings (:func:`kinject.files.remove_debris`)
    and day-old claim files of spread stages. ``<key>.partial`` folders stay: they are resumable, and only the
    holder of their lock may remove them."""
    from kinject.files import remove_debris

    remove_debris(folder)
    now = time.time()
    for claim in Path(folder).glob("*.claim-*"):
        try:
            if now - claim.stat().st_mtime > CLAIM_AGE_S:
                claim.unlink()
        except OSError:
            continue
