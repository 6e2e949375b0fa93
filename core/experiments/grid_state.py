"""Where each cell of a grid stands: done (its folder has metrics.json from its current spec), running (a live
process holds its lock), failed (its status file keeps the error line and traceback; or it was interrupted), pending.

Per cell, in ``<output>/_grid/status/<task>/<system>/``: ``seed-<s>.json`` (queued / running / done / failed, with
host, process, times and the hash of the cell's spec) and ``seed-<s>.lock`` (flock, held while the cell runs and
released by the kernel when its process dies).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from kinject.experiments.grid_file import Cell


def read_status(cell: Cell) -> dict:
    """The cell's status record ({} when there is none or it is damaged: the cell's run folder then says whether it
    is done; a damaged one is said once, and rewritten when the cell runs), read as user input is
    (:func:`kinject.api.read_record`)."""
    from kinject.api import DataError, DataMissingError, read_record

    try:
        return read_record(cell.status_file, limit=2**20)
    except DataMissingError:
        return {}
    except DataError as exc:
        if str(exc) not in _SAID:
            _SAID.add(str(exc))
            logging.getLogger("kinject").warning("grid cell status %s; ignored (its run folder says whether it is "
                                                 "done)", exc)
        return {}


_SAID: set[str] = set()  # damaged status records already said


def write_status(cell: Cell, **record: Any) -> None:
    import os
    import socket
    import time

    from kinject.api import atomic_write_text

    record = {"cell": cell.id, "spec": cell.spec_hash, "host": socket.gethostname(), "pid": os.getpid(),
              "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **record}
    cell.status_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cell.status_file, json.dumps(record, indent=2, default=str) + "\n")


def is_locked(cell: Cell) -> bool:
    """Whether a process is running the cell now (it holds the cell's lock; released when it dies)."""
    from kinject.cache import lock_held

    return lock_held(cell.lock_file)


def _spec_beside(cell: Cell) -> dict | None:
    import yaml

    try:
        return yaml.safe_load(cell.spec_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def is_done(cell: Cell, record: dict | None = None) -> bool:
    """A cell is done when its run folder has metrics.json from this cell's spec (its status record, else the spec
    written beside the run, says which spec made it)."""
    if not (cell.run_dir / "metrics.json").is_file():
        return False
    record = read_status(cell) if record is None else record
    if record.get("state") == "done":
        return record.get("spec") == cell.spec_hash
    return _spec_beside(cell) == cell.data


@dataclass
class CellState:
    state: str  # done | running | failed | pending
    detail: str = ""
    record: dict = field(default_factory=dict)


def cell_state(cell: Cell) -> CellState:
    record = read_status(cell)
    if is_locked(cell):
        return CellState("running", f"on {record.get('host', '?')} (process {record.get('pid', '?')}, since "
                                    f"{record.get('started', record.get('at', '?'))})", record)
    if is_done(cell, record):
        seconds = record.get("seconds")
        return CellState("done", f"{seconds:.0f} s" if isinstance(seconds, (int, float)) else "", record)
    if (cell.run_dir / "metrics.json").is_file():
        return CellState("pending", "spec changed since its run", record)
    if record.get("state") == "failed":
        return CellState("failed", record.get("error", "?"), record)
    if record.get("state") == "running":  # the process ended without a word (killed, out of memory, node lost)
        return CellState("failed", f"interrupted: started {record.get('started', '?')} on {record.get('host', '?')} "
                                   "and ended without a result", record)
    if record.get("state") == "queued":
        job = f" job {record['job']}" if record.get("job") else ""
        return CellState("pending", f"queued ({record.get('executor', '?')}{job})", record)
    return CellState("pending", "", record)


def states(cells: list[Cell]) -> dict[str, CellState]:
    return {cell.id: cell_state(cell) for cell in cells}


def counts(found: dict[str, CellState]) -> str:
    """``4 cells: 3 done, 0 running, 1 failed, 0 pending`` (``1 cell: ...``)."""
    from kinject.evidence import plural

    tally = {s: sum(1 for x in found.values() if x.state == s) for s in ("done", "running", "failed", "pending")}
    return f"{plural(len(found), 'cell')}: " + ", ".join(f"{n} {s}" for s, n in tally.items())


# -- a local worker stops with its grid ----------------------------------------------------------------- #
DRIVER = "KINJECT_GRID_DRIVER"  # the pid of the process running a grid's local workers (they stop when it dies)


def stop_with_the_driver() -> None:
    """In a local worker: a thread that sends this process SIGTERM (the cell stops as on the grid's Ctrl-C) once the
    grid process that started it is gone (killed with -9, out of memory): no cell trains on without its grid."""
    import os
    import signal
    import threading
    import time

    driver = int(os.environ.get(DRIVER) or 0)
    if not driver or driver == os.getpid() or getattr(stop_with_the_driver, "watching", False):
        return
    stop_with_the_driver.watching = True

    def watch() -> None:
        while _alive(driver):
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="kinject-grid-driver-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:  # no /proc (macOS): the signal answered
        return True
