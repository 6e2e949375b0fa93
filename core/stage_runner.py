"""Running stages: each planned stage computed once across processes and machines (a lease on its cache folder,
fenced), in process or alone in a worker, finished by a rename, or read from the cache when another process
finished it first."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kinject import __version__
from kinject.cache import (StageLock, check_finished, clean_stage_folder, file_records, partial_path,
                           read_stage_info)
from kinject.distributed import _FENCES, barrier, broadcast, check_fence, is_main_process, rank, world_size
from kinject.errors import Interrupted, KinjectError
from kinject.files import discard, filesystem_fault
from kinject.interfaces import Stage, StageContext
from kinject.keys import PlannedStage, plan
from kinject.refs import fresh_held_out_views, held_out_removed

if TYPE_CHECKING:  # pragma: no cover
    from kinject.context import RunContext


log = logging.getLogger("kinject")


# -- running ----------------------------------------------------------------------------------- #
def stage_flops(config, run) -> float | None:
    """``config.cost(run)`` (stage.json's ``flops``, what ``--dry-run``'s estimator learns from); None when the
    stage states none or stating it failed (never fails a run)."""
    try:
        flops = config.cost(run)
        return None if flops is None else float(flops)
    except Exception as exc:  # an estimate is never worth a failed run or dry run
        log.debug("cost of %s: %s: %s", type(config).__name__, type(exc).__name__, exc)
        return None


def stage_cost(config, run) -> dict[str, float | None]:
    """What ``--dry-run``'s estimate knows of a stage before it runs: its FLOPs (:func:`stage_flops`), the share that
    scores rather than trains, and the seconds its cost's helpers note besides (``fixed_s``: featurizing the data it
    reads, loading the model)."""
    from kinject.training import fixed_costs

    with fixed_costs() as fixed:
        flops = stage_flops(config, run)
    return {"flops": flops, "scoring_flops": fixed.scoring_share(flops), "fixed_s": round(fixed.seconds, 3)}


#: the stage this process is computing, its work folder and when it started (what an interruption names)
RUNNING: list[tuple[str, Path, float]] = []


def run_stage(run: RunContext, planned: PlannedStage, stage_dirs: dict[str, Path],
              alone: bool = False) -> tuple[bool, float]:
    """Run one stage unless cached. Returns (cached, seconds).

    A finished stage is used when its files match their digests; otherwise this process takes the stage's lock
    (:class:`kinject.cache.StageLock`): whoever holds it computes, everybody else waits and then finds it finished
    (a cache hit). A damaged finished stage is recomputed, with a warning. ``alone``: this process runs the stage
    by itself (a spread stage under torchrun): no barriers, and the body runs in a fresh single-process worker
    (:mod:`kinject.worker`).
    """
    from kinject.errors import LeaseLost

    stage, key, folder = planned.stage, planned.key, planned.folder
    main = alone or is_main_process()
    start = time.perf_counter()
    lost = False
    with ExitStack() as stack:
        done = main and _intact(folder, stage.name, discard_damaged=False)
        lock = None
        if main and not done:
            lock = stack.enter_context(_Held(StageLock(folder, stage.name, run=str(run.output or ""))))
            done = _intact(folder, stage.name, discard_damaged=True)  # finished while we waited?
        if not alone:
            done = bool(broadcast(done))
        run.hooks().kinject_stage_start(stage=stage.name, key=key, cached=done)
        if not done:
            RUNNING.append((stage.name, partial_path(folder) / "work", time.time()))
            _FENCES.extend([lock] if lock is not None else [])
            try:
                _compute(run, planned, stage_dirs, alone, start)
            except LeaseLost as exc:
                lost = True
                log.warning("%s; leaving the stage to it and using its result", exc)
            except Exception:
                if main and lock is not None and not lock.holds():
                    lost = True  # a superseded holder's files were replaced under it: not its error to report
                    log.warning("stage %s: this process's lease expired and another process took the stage over; "
                                "leaving it and using its result", stage.name)
                elif main and check_finished(folder) == (True, []):  # another process finished it under us
                    lost = True
                    log.warning("stage %s: another process finished it while this one computed (its work folder "
                                "was taken over); using that result", stage.name)
                else:
                    raise
            finally:
                RUNNING.pop()
                Interrupted.defer(False)  # a training loop that ended without turning it off (an error)
                del _FENCES[len(_FENCES) - (lock is not None):]
    if lost:  # wait for the process that took the stage over, then read its result: a cache hit
        with StageLock(folder, stage.name, run=str(run.output or "")):
            done = _intact(folder, stage.name, discard_damaged=True)
        if not done:
            return run_stage(run, planned, stage_dirs, alone)
    elif not done:
        release_memory()
    seconds = time.perf_counter() - start
    run.hooks().kinject_stage_end(stage=stage.name, key=key, cached=done, seconds=seconds)
    return done, seconds


class _Held:
    """Enter a StageLock and hand back the lock itself (its ``holds()`` is the fence)."""

    def __init__(self, lock: StageLock):
        self.lock = lock

    def __enter__(self) -> StageLock:
        self.lock.__enter__()
        return self.lock

    def __exit__(self, *exc) -> bool:
        return self.lock.__exit__(*exc)


def release_memory() -> None:
    """Give the memory a finished stage freed back to the system: its models, optimizer state and batches are garbage
    once its body returns, but glibc's allocator keeps the pages, so without this a run's peak RSS grows stage by
    stage (the headline: 4.2 GB instead of 2.9)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)  # glibc; elsewhere there is nothing to call
    except (OSError, AttributeError):
        pass


_frozen = {"depth": 0, "outer": False}
_frozen_lock = threading.Lock()


@contextmanager
def _collections_skip_older_objects():
    """:func:`release_memory` collects after every stage. What existed before the run (the imported libraries:
    about a million objects, more in a test session) is frozen out of those collections, so each takes milliseconds
    instead of half a second. The stages' own garbage is collected as before; the freeze ends with the run."""
    import gc

    with _frozen_lock:
        if _frozen["depth"] == 0:
            _frozen["outer"] = gc.get_freeze_count() > 0  # frozen by someone else: theirs to end
        _frozen["depth"] += 1
        gc.collect()
        gc.freeze()
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen["depth"] -= 1
            if _frozen["depth"] == 0 and not _frozen["outer"]:
                gc.unfreeze()


def _intact(folder: Path, name: str, discard_damaged: bool) -> bool:
    """Whether the stage at ``folder`` is finished with every file as recorded. Under its lock
    (``discard_damaged``), a damaged one is removed (with a warning), as is a folder without stage.json."""
    finished, damaged = check_finished(folder)
    if finished and not damaged:
        return True
    if discard_damaged and folder.exists():
        if damaged:
            log.warning("stage %s: the cached result %s was changed since it was computed (%s); computing it again",
                        name, folder, ", ".join(damaged[:3]) + (" ..." if len(damaged) > 3 else ""))
        discard(folder)
    return False


def _compute(run: RunContext, planned: PlannedStage, stage_dirs: dict[str, Path], alone: bool, start: float) -> None:
    """Compute a stage this process holds the lock of (all processes of a launch take part unless ``alone``)."""
    stage, key, folder = planned.stage, planned.key, planned.folder
    sync = (lambda: None) if alone else barrier
    main = alone or is_main_process()
    partial = partial_path(folder)
    if main:
        clean_stage_folder(folder.parent)
        if partial.exists() and not run.resume:
            shutil.rmtree(partial)  # left by a process that died (we hold its lock)
        if (partial / "out").exists():
            shutil.rmtree(partial / "out")  # outputs are rewritten; checkpoints in work/ survive
        (partial / "out").mkdir(parents=True, exist_ok=True)
        (partial / "work").mkdir(parents=True, exist_ok=True)
    sync()
    ctx = StageContext(name=stage.name, key=key, out=partial / "out", work=partial / "work",
                       inputs={name: stage_dirs[name] for name in stage.inputs}, resume=run.resume,
                       cache_dir=run.env.cache_dir, offline=run.env.offline)
    fresh_held_out_views(stage.config)  # what held_out_record counts is this body's reading (a worker's: none here)
    try:
        if alone:
            _run_in_worker(stage, ctx)
        else:
            stage.body(stage.config, ctx)
        sync()
        if main:
            check_fence()  # a holder whose lease was taken over publishes nothing (the new holder's stage)
            info = {"stage": stage.name, "key": key, "record": planned.record, "code_modules": planned.code_modules,
                    "config": stage.config.model_dump(mode="json"), "kinject": __version__,
                    "seconds": round(time.perf_counter() - start, 3), "rank": rank(),
                    **stage_cost(stage.config, run),  # what --dry-run's estimates learn from
                    "files": file_records(partial / "out")}
            info.update(held_out_record(stage, ctx))  # what the hold-out removed from its knowledge (the dose's)
            (partial / "out" / "stage.json").write_text(json.dumps(info, indent=2, default=str))
            _finish(partial / "out", folder)
            shutil.rmtree(partial, ignore_errors=True)
    except ImportError as exc:
        raise KinjectError(f"stage {stage.name!r}: {type(exc).__name__}: {exc} (a package it needs is missing or "
                           "broken; its checkpoints are kept for --resume)") from None
    except Exception as exc:
        fault = None if isinstance(exc, KinjectError) else filesystem_fault(exc, partial)
        if fault is None or (_FENCES and not _FENCES[-1].holds()):
            raise  # (a superseded holder never touches the partial folder: it is the new holder's)
        if main:
            shutil.rmtree(partial, ignore_errors=True)  # a full disk gets its room back
        raise fault from None
    sync()


def held_out_record(stage: Stage, ctx: StageContext) -> dict:
    """stage.json's ``held_out``: the most triples or text statements the hold-out removed from the knowledge the
    stage's output derives from - the sources its body read, and its inputs' (their stage.json); {} for none."""
    from kinject.records import read_record

    counts = [held_out_removed(stage.config)]
    for folder in ctx.inputs.values():
        try:
            counts.append(read_record(Path(folder) / "stage.json").get("held_out"))
        except KinjectError:  # an input's record is checked where it is used; here it only adds a count
            continue
    counts = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    return {"held_out": max(counts)} if counts else {}


def _finish(out: Path, folder: Path) -> None:
    """Rename a computed stage into place; one that is already there and finished (a process that did not see
    this one's lock, e.g. on a filesystem without working locks) is as good: ours is dropped."""
    try:
        out.rename(folder)
    except OSError:
        if not (folder / "stage.json").exists():
            raise
        log.info("stage %s: finished by another process at the same time; using its result", folder.parent.name)


def _run_in_worker(stage: Stage, ctx: StageContext) -> None:
    import sys

    from kinject.worker import DISTRIBUTED_VARIABLES, job

    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_VARIABLES}
    result = subprocess.run([sys.executable, "-m", "kinject.worker"], input=json.dumps(job(stage, ctx)),
                            text=True, env=env)
    if result.returncode != 0:
        raise KinjectError(f"stage {stage.name!r} failed in its worker process (exit code {result.returncode}; "
                           "its error is printed above)")


def _claim(planned: PlannedStage, token: str) -> bool:
    """Take ``planned`` for this process: the first process to create its claim file (atomically) runs it."""
    path = planned.folder.with_name(f"{planned.folder.name}.claim-{token}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def run_stages(run: RunContext) -> list[tuple[PlannedStage, bool, float]]:
    """Run the plan in order. Under torchrun, each run of consecutive ``spread`` stages is a shared queue: every
    process takes the next stage nobody has taken (a claim file in the cache, per launch), so a process that
    finishes a short stage takes another while a long one runs; all wait for the whole group before going on."""
    with _collections_skip_older_objects():
        return _run_planned(run, plan(run))


def _run_planned(run: RunContext, planned_stages: list[PlannedStage]) -> list[tuple[PlannedStage, bool, float]]:
    stage_dirs: dict[str, Path] = {}
    out: list[tuple[PlannedStage, bool, float]] = []
    i = 0
    while i < len(planned_stages):
        planned = planned_stages[i]
        if not (planned.stage.spread and world_size() > 1):
            cached, seconds = run_stage(run, planned, stage_dirs)
            stage_dirs[planned.stage.name] = planned.folder
            out.append((planned, cached, seconds))
            i += 1
            continue
        group = []
        while i < len(planned_stages) and planned_stages[i].stage.spread:
            group.append(planned_stages[i])
            i += 1
        token = broadcast(uuid.uuid4().hex)  # one per launch: a resumed launch ignores an earlier one's claims
        mine = {}
        for j, member in enumerate(group):
            if member.cached:  # nothing to run: process 0 reports the cache hit, the others read it back
                if is_main_process():
                    mine[j] = run_stage(run, member, stage_dirs, alone=True)
                continue
            if _claim(member, token):
                mine[j] = run_stage(run, member, stage_dirs, alone=True)
        barrier()
        if is_main_process():
            for member in group:
                member.folder.with_name(f"{member.folder.name}.claim-{token}").unlink(missing_ok=True)
        for j, member in enumerate(group):
            stage_dirs[member.stage.name] = member.folder
            out.append((member, *mine.get(j, _finished_elsewhere(member))))
    return out


def _finished_elsewhere(planned: PlannedStage) -> tuple[bool, float]:
    """(cached, seconds) of a spread stage another process ran: read back from its stage.json."""
    info = read_stage_info(planned.folder)
    if info is None:
        return True, 0.0
    ran_now = not planned.cached
    return (not ran_now, float(info.get("seconds") or 0.0) if ran_now else 0.0)
