"""Running a grid's cells: one cell (:func:`run_cell`, what every executor calls, in whatever process), the
dry-run's plan, and the executors: ``debug`` in this process (a plain loop), ``local`` N worker processes (submitit's
LocalExecutor), ``slurm`` one array job (submitit's AutoExecutor).

A cell holds its lock (``<output>/_grid/status/.../seed-<s>.lock``, flock: released when its process dies) while it
runs and writes its status file (running -> done | failed, with the error's line). A cell another process is
running is skipped; a finished one is not run again. Stages shared by cells are computed once (the engine's lock
per stage key): the second cell waits for the first, then finds the stage cached.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

from kinject.api import Interrupted, KinjectError, SpecError
from kinject.evidence import plural
from kinject.experiments.grid_file import Cell, Grid
from kinject.experiments.grid_state import DRIVER, is_done, read_status, stop_with_the_driver, write_status


POLL_S = 0.5
#: a worker's python never puts the working folder on sys.path (``-P``, Python 3.11+): a ``kinject/`` folder there
#: (a clone) would otherwise be imported as kinject, and every cell would fail
SAFE_PATH: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()


def payload(cell: Cell, threads: int | None = None) -> dict[str, Any]:
    """What a worker needs to run ``cell`` (plain data: pickled to other processes and machines)."""
    return {"id": cell.id, "task": cell.task, "strategy": cell.strategy, "system": cell.system, "seed": cell.seed,
            "values": cell.values, "data": cell.data, "run_dir": str(cell.run_dir.absolute()),
            "state_dir": str(cell.state_dir.absolute()), "threads": threads}


def _cell(job: dict[str, Any]) -> Cell:
    return Cell(job["task"], job["strategy"], job["system"], job["seed"], job["values"], job["data"],
                Path(job["run_dir"]), Path(job["state_dir"]))


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if isinstance(exc, KinjectError):
        return text[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b:?.*$")


def worker_error(exc: BaseException, job: Any = None) -> str:
    """The cause of a worker's failure in one line: the last exception line of the trace submitit reports (or of the
    worker's stderr log), not submitit's "Job (task=0) failed during processing with trace:"."""
    texts = [str(exc)]
    try:
        texts.append(job.stderr() or "" if job is not None else "")
    except Exception:  # noqa: BLE001 - no log to read: the exception's own text
        pass
    for text in texts:
        lines = [line.strip() for line in text.splitlines()]
        found = [line for line in lines if _EXCEPTION_LINE.match(line) and "FailedJobError" not in line]
        if found:
            return found[-1]
    return _error_line(exc).splitlines()[0]


def _job_id() -> str | None:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")


def run_cell(job: dict[str, Any]) -> dict[str, Any]:
    """Run one cell as ``kinject run --config <its spec> -o <its folder>`` would; never raises (the outcome is
    returned and written to the cell's status file): ``{"id", "state": done|failed|running, ...}``."""
    import traceback

    import yaml
    from filelock import Timeout

    from kinject.cache import make_lock
    from kinject.evidence.learned import run_not_learned

    threads = job.get("threads") if "OMP_NUM_THREADS" not in os.environ else None  # the user's setting wins
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    cell = _cell(job)
    _stop_on_sigterm()
    cell.lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = make_lock(cell.lock_file)  # the cache's kind: flock, or KINJECT_LOCK=lease
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return {"id": cell.id, "state": "running", "detail": "another process is running it"}
    try:
        if is_done(cell):
            return {"id": cell.id, "state": "done", "seconds": read_status(cell).get("seconds"), "skipped": True}
        started, clock = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
        write_status(cell, state="running", started=started, job=_job_id())
        try:
            from kinject import api
            from kinject.api import atomic_write_text

            if threads:
                import torch

                torch.set_num_threads(int(threads))
            cell.run_dir.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(cell.spec_file, f"# kinject grid cell {cell.id}\n"
                              + yaml.safe_dump(cell.data, sort_keys=False))
            command = ["kinject", "run", cell.data["strategy"]["name"], "--config", str(cell.spec_file),
                       "-o", str(cell.run_dir)]
            run, = api.prepare_runs(api.build_spec({**cell.data, "output": str(cell.run_dir)}), resume=True,
                                    command=command)  # the automatic decisions, as its recorded command takes them
            api.execute(run, cell.run_dir)
        except BaseException as exc:  # noqa: BLE001 - recorded for `kinject grid status`; Ctrl-C still stops
            seconds = round(time.perf_counter() - clock, 3)
            write_status(cell, state="failed", started=started, seconds=seconds, error=_error_line(exc),
                         traceback=traceback.format_exc(), job=_job_id())
            if isinstance(exc, KeyboardInterrupt):
                raise
            if isinstance(exc, Interrupted):  # stopped by the grid's Ctrl-C: the stage's checkpoints are kept
                return {"id": cell.id, "state": "failed", "error": "interrupted", "seconds": seconds}
            return {"id": cell.id, "state": "failed", "error": _error_line(exc), "seconds": seconds}
        seconds = round(time.perf_counter() - clock, 3)
        write_status(cell, state="done", started=started, seconds=seconds, job=_job_id())
        flag = run_not_learned(cell.run_dir)  # said per cell, as `kinject run` says it per run (the board flags it too)
        return {"id": cell.id, "state": "done", "seconds": seconds,
                **({"not_learned": flag["reason"]} if flag and flag.get("reason") else {})}
    finally:
        lock.release()


def _stop_on_sigterm() -> None:
    """SIGTERM (what the grid sends its workers on Ctrl-C) stops the cell now: submitit's job environment ignores
    SIGTERM (it waits for a requeue signal), which left a stopped grid's cells training to their end. The kernel's
    interrupt handler, the CLI's (:meth:`kinject.api.Interrupted.install`)."""
    import signal

    Interrupted.install((signal.SIGTERM,))
    stop_with_the_driver()


# -- the dry run ------------------------------------------------------------------------------------- #
def plan_cell(cell: Cell) -> tuple[int, int, list[str], dict | None]:
    """(stages cached, stages, keys of the stages to compute, the choice it will make first: ``{fold_runs, key}``
    or None) of a cell, as ``kinject run --dry-run`` plans it."""
    from kinject import api

    run, = api.prepare_runs(api.build_spec({**cell.data, "output": str(cell.run_dir)}), dry_run=True,
                            announce=lambda line: None)  # a cached choice applied, as the cell will run
    runs = [member for _, member, _ in run.members if member is not None] or [run]
    planned = [p for r in runs for p in api.plan(r)]
    choice = run.chosen if (run.chosen or {}).get("planned") else None
    return sum(p.cached for p in planned), len(planned), [p.key for p in planned if not p.cached], choice


# -- executors ---------------------------------------------------------------------------------------- #
def _record(result: dict, cell: Cell, announce: Callable[[str], None]) -> dict:
    state = result.get("state")
    tail = f"({result['seconds']:.1f} s)" if isinstance(result.get("seconds"), (int, float)) else ""
    if result.get("skipped"):
        tail = "(already done)"
    line = f"{cell.id}: {state} {tail}".rstrip()
    if state == "failed":
        line += f": {result.get('error', '?')}"
    elif state == "running":
        line += f" ({result.get('detail', '')}; skipped)"
    elif result.get("not_learned"):
        line += f"; warning: learned nothing on test: {result['not_learned']} (a comparison with it says nothing)"
    announce(line)
    return result


def _gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no usable torch/CUDA: CPU workers
        return []


def run_debug(grid: Grid, cells: list[Cell], announce: Callable[[str], None]) -> list[dict]:
    """Every cell in this process, one after another (for tests and debugging: a breakpoint in a stage stops)."""
    results = []
    for cell in cells:
        announce(f"{cell.id}: running -> {cell.run_dir}")
        results.append(_record(run_cell(payload(cell)), cell, announce))
    return results


def run_local(grid: Grid, cells: list[Cell], workers: int, announce: Callable[[str], None],
              gpus_per_cell: int | None = None, timeout_min: int | None = None) -> list[dict]:
    """Each cell in its own process (submitit's LocalExecutor), ``workers`` at a time; a worker slot owns a GPU
    (round robin over the visible ones) when there are any, and an equal share of the CPU threads."""
    import submitit

    options = grid.file.local
    gpus = _gpus()
    per_cell = options.gpus_per_cell if gpus_per_cell is None else gpus_per_cell
    per_cell = (1 if gpus else 0) if per_cell is None else per_cell
    if per_cell and len(gpus) < per_cell:
        raise SpecError(f"local.gpus_per_cell={per_cell}: {len(gpus)} GPU(s) visible")
    threads = max(1, (os.cpu_count() or 1) // workers)
    os.environ[DRIVER] = str(os.getpid())  # the workers inherit it: they stop when this process dies
    executor = submitit.LocalExecutor(folder=str(grid.state_dir / "logs"),
                                      python=shlex.join([sys.executable, *SAFE_PATH]))
    executor.update_parameters(timeout_min=timeout_min or options.timeout_min)
    queue, running, results = list(cells), {}, []
    free = list(range(workers))
    try:
        while queue or running:
            while queue and free:
                slot, cell = free.pop(0), queue.pop(0)
                if per_cell:
                    first = (slot * per_cell) % len(gpus)
                    chosen = [int(gpus[(first + i) % len(gpus)]) for i in range(per_cell)]
                    executor.update_parameters(gpus_per_node=per_cell, visible_gpus=chosen)
                write_status(cell, state="queued", executor="local")
                job = _submit_quietly(executor, payload(cell, threads))
                announce(f"{cell.id}: running in process {job.job_id}" + (f" (GPU {chosen})" if per_cell else ""))
                running[job.job_id] = (job, cell, slot)
            time.sleep(POLL_S)
            for job_id, (job, cell, slot) in list(running.items()):
                if not job.done():
                    continue
                del running[job_id]
                free.append(slot)
                try:
                    result = job.result()
                except Exception as exc:  # noqa: BLE001 - the worker died (killed, timeout): record it
                    result = {"id": cell.id, "state": "failed", "error": f"worker process {job_id} ended: "
                              + worker_error(exc, job)[:300]}
                    if read_status(cell).get("state") in ("running", "queued", None):
                        write_status(cell, state="failed", error=result["error"])
                results.append(_record(result, cell, announce))
                _eta(results, len(cells), workers, announce)
    except (KeyboardInterrupt, Interrupted) as exc:  # one line for the user; the workers are stopped
        import signal

        for job, cell, _ in running.values():
            process = getattr(job, "_process", None)  # the worker's controller forwards SIGTERM to the cell
            process.send_signal(signal.SIGTERM) if process is not None else job.cancel(check=False)
            if read_status(cell).get("state") in ("running", "queued"):
                write_status(cell, state="failed", error="interrupted")
        done = sum(1 for r in results if r.get("state") == "done")
        raise Interrupted(getattr(exc, "signum", 2), f"{done} of {len(cells)} cell(s) done here, {len(running)} "
                          "stopped; run the same grid command again to continue (finished cells are skipped, "
                          "cached stages reused)") from None
    return results


def _eta(results: list[dict], total: int, workers: int, announce: Callable[[str], None]) -> None:
    """After a finished cell: how many are done and, from the cells run so far, about when the rest will be."""
    seconds = [r["seconds"] for r in results if isinstance(r.get("seconds"), (int, float)) and not r.get("skipped")]
    left = total - len(results)
    if left and seconds:
        eta = sum(seconds) / len(seconds) * left / max(1, workers)
        announce(f"  {len(results)} of {plural(total, 'cell')} finished; about {eta / 60:.0f} min for the {left} left "
                 f"({workers} at a time)")


def _submit_quietly(executor, job: dict):
    """Submit a cell to submitit's local executor with Ctrl-C ignored in the worker processes it starts: the
    terminal's SIGINT reaches the whole process group, and only this process should answer it (one line; it stops
    the workers with SIGTERM), not every worker with its own traceback."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return executor.submit(run_cell, job)
    finally:
        signal.signal(signal.SIGINT, previous)


def _minutes(value: int | str | None) -> int | None:
    """Slurm time (minutes, or [D-]HH:MM[:SS]) in minutes."""
    if value is None or isinstance(value, int):
        return value
    text = str(value).strip()
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")] if clock.replace(":", "").isdigit() else None
    if not parts or len(parts) > 3 or (days and not days.isdigit()):
        raise SpecError(f"slurm.time {value!r}: expected minutes or [D-]HH:MM[:SS]")
    hours, minutes = (parts + [0])[:2] if len(parts) > 1 else (0, parts[0])
    seconds = parts[2] if len(parts) == 3 else 0
    return int(days or 0) * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def _gigabytes(value: int | float | str | None) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    text = str(value).strip().upper().removesuffix("B")
    scale = {"K": 1 / 1024 ** 2, "M": 1 / 1024, "G": 1, "T": 1024}.get(text[-1:], None)
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise SpecError(f"slurm.mem {value!r}: expected GB or e.g. 32G") from None


def slurm_parameters(grid: Grid, overrides: dict[str, Any]) -> dict[str, Any]:
    """submitit AutoExecutor parameters from the grid file's ``slurm:`` section, command-line values winning."""
    options = grid.file.slurm.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    gres = options.gres or (f"gpu:{options.gpus}" if options.gpus else None)
    params = {"name": f"kinject-grid-{grid.name}", "timeout_min": _minutes(options.time) or 60 * 24,
              "cpus_per_task": options.cpus, "mem_gb": _gigabytes(options.mem), "slurm_partition": options.partition,
              "slurm_gres": gres, "slurm_array_parallelism": options.parallelism, "slurm_account": options.account,
              "slurm_qos": options.qos, "slurm_constraint": options.constraint,
              "slurm_setup": list(options.setup) or None,
              "slurm_additional_parameters": dict(options.additional) or None}
    return {k: v for k, v in params.items() if v is not None}


def slurm_script(grid: Grid, cells: list[Cell], overrides: dict[str, Any]) -> tuple[str, Path]:
    """The sbatch script of ``cells`` as one array job - every array task runs one readable ``kinject run --config
    <cell spec> -o <cell folder>`` (the cells' specs are written beside their folders) - and where it goes
    (``<output>/_grid/slurm/<grid>.sbatch``)."""

    params = slurm_parameters(grid, overrides)
    logs = (grid.state_dir / "logs").absolute()
    lines = ["#!/bin/bash", f"#SBATCH --job-name={params['name']}",
             f"#SBATCH --array=0-{len(cells) - 1}" + (f"%{params['slurm_array_parallelism']}"
                                                      if params.get("slurm_array_parallelism") else ""),
             f"#SBATCH --output={shlex.quote(f'{logs}/%A_%a.out')}",  # a folder with spaces stays one value
             f"#SBATCH --error={shlex.quote(f'{logs}/%A_%a.err')}", "#SBATCH --nodes=1",
             "#SBATCH --ntasks=1", f"#SBATCH --time={params['timeout_min']}"]
    for key, flag in (("slurm_partition", "partition"), ("slurm_gres", "gres"), ("cpus_per_task", "cpus-per-task"),
                      ("slurm_account", "account"), ("slurm_qos", "qos"), ("slurm_constraint", "constraint")):
        if params.get(key) is not None:
            lines.append(f"#SBATCH --{flag}={params[key]}")
    if params.get("mem_gb") is not None:
        lines.append(f"#SBATCH --mem={params['mem_gb']:g}GB")
    for key, value in (params.get("slurm_additional_parameters") or {}).items():
        lines.append(f"#SBATCH --{key.replace('_', '-')}={value}")
    kinject = [sys.executable, *SAFE_PATH, "-m", "kinject"]  # the venv this grid was submitted from
    commands = [shlex.join([*kinject, "run", c.data["strategy"]["name"], "--config", str(c.spec_file.absolute()),
                            "-o", str(c.run_dir.absolute())]) for c in cells]
    lines += ["", "set -euo pipefail", f"cd {shlex.quote(str(Path.cwd()))}",
              *(["# the grid file's setup lines", *params.get("slurm_setup", [])] if params.get("slurm_setup") else []),
              f"export OMP_NUM_THREADS=${{SLURM_CPUS_PER_TASK:-{params.get('cpus_per_task') or 1}}}", "",
              "# one cell per array task: an ordinary run of the cell's spec (kinject grid status follows them)",
              "cells=(", *(f"  {shlex.quote(c)}" for c in commands), ")", 'eval "${cells[$SLURM_ARRAY_TASK_ID]}"']
    return "\n".join(lines) + "\n", grid.state_dir / "slurm" / f"{grid.name}.sbatch"


def write_slurm(grid: Grid, cells: list[Cell], overrides: dict[str, Any]) -> Path:
    """Write the cells' specs beside their folders and the array job's sbatch script; returns the script."""
    import yaml

    from kinject.api import atomic_write_text

    text, script = slurm_script(grid, cells, overrides)
    for cell in cells:
        cell.run_dir.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cell.spec_file, yaml.safe_dump({**cell.data, "output": str(cell.run_dir.absolute())},
                                                         sort_keys=False))
    script.parent.mkdir(parents=True, exist_ok=True)
    (grid.state_dir / "logs").mkdir(parents=True, exist_ok=True)
    atomic_write_text(script, text)
    return script


def submit_slurm(grid: Grid, cells: list[Cell], overrides: dict[str, Any], announce: Callable[[str], None],
                 dry_run: bool = False) -> dict[str, Any]:
    """All ``cells`` as one Slurm array job (:func:`slurm_script`, submitted with ``sbatch``); returns {job, script,
    cells}. Does not wait. ``dry_run``: write the script and the cells' specs, submit nothing. Off a Slurm
    machine (no ``sbatch``) or when sbatch refuses: one line."""
    import shutil
    import subprocess

    if not cells:
        raise SpecError("slurm: no cell to submit (every cell is done or running)")
    script = write_slurm(grid, cells, overrides)
    if dry_run:
        announce(f"wrote {script} (array of {len(cells)} cell(s); each runs `kinject run STRATEGY --config <cell>.yaml -o "
                 f"<cell>`) and the cells' specs; submit it with: sbatch {script}")
        return {"job": None, "script": str(script), "cells": len(cells)}
    if shutil.which("sbatch") is None:
        raise SpecError(f"--executor slurm: sbatch is not on this machine's PATH (not a Slurm login node); the array "
                        f"job is written to {script} (submit it from the cluster with `sbatch {script}`), or run the "
                        "cells here with --executor local")
    for cell in cells:  # before the array exists: a cell that starts at once overwrites it, never the reverse
        write_status(cell, state="queued", executor="slurm")
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SpecError(f"--executor slurm: sbatch refused {script}: {reason}")
    array = done.stdout.strip().split(";")[0].split()[-1]
    for i, cell in enumerate(cells):
        if read_status(cell).get("state") == "queued":
            write_status(cell, state="queued", executor="slurm", job=f"{array}_{i}")
    announce(f"submitted {len(cells)} cell(s) as Slurm array job {array} ({script}); follow it with "
             f"kinject grid status {grid.path}")
    return {"job": array, "script": str(script), "cells": len(cells)}
