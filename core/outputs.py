"""Where and how a run writes: the default run folder, the rule for replacing one (only a folder a run wrote), the run
folder written atomically, and the text describing what a run reads (``--dry-run``)."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kinject import __version__
from kinject.errors import SpecError
from kinject.interfaces import Environment
from kinject.spec import RunSpec
from kinject.context import RunContext
from kinject.distributed import is_main_process



log = logging.getLogger("kinject")


def describe_data(run: RunContext) -> str:
    """What data the run's task reads (or that it has no task)."""
    return run.task.describe_data(run.env) if run.task is not None else "(no task)"


def default_output(spec: RunSpec) -> Path:
    return Path("runs") / (f"{spec.strategy.name}-{spec.task.name}" if spec.task else spec.strategy.name)


# -- the run folder ---------------------------------------------------------------------------------- #
RUN_MARKER = ".kinject-run"  # in every folder a run writes: what lets a later run replace it


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a folder a kinject run wrote (its marker, or a run.json of a run made before it)."""
    path = Path(path)
    if (path / RUN_MARKER).is_file():
        return True
    try:
        info = json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and {"spec", "stages"} <= set(info)


def _replaceable(path: Path) -> bool:
    return path.is_dir() and (not any(path.iterdir()) or is_run_folder(path))


def check_output(output: Path, env: Environment) -> Path:
    """The run folder ``output`` as an absolute path, after checking that a run may replace it: it does not exist,
    is empty or is an earlier run, and neither is nor holds the current folder, the cache or the data dir.
    SpecError (one line naming the folder) otherwise."""
    import os

    out = Path(os.path.normpath(Path(output).absolute()))
    cwd = Path.cwd()
    if out == cwd or out in cwd.parents:
        raise SpecError(f"output: {output} is the current folder or holds it, and a run replaces its folder as a "
                        "whole; name a folder for the run, e.g. -o runs/NAME")
    for what, folder in (("stage cache", env.cache_dir), ("data dir", env.data_dir)):
        folder = Path(os.path.normpath(Path(folder).absolute()))
        if folder == out or out in folder.parents:
            raise SpecError(f"output: {output} holds the {what} ({folder}); name another folder for the run")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SpecError(f"output: {output} exists and is not a folder; name a folder for the run")
    if out.is_dir() and not _replaceable(out):
        entries = sorted(p.name for p in out.iterdir())
        shown = ", ".join(repr(e) for e in entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
        raise SpecError(f"output: {output} exists and is not a kinject run folder (it holds {shown}); a run replaces "
                        "only an empty folder or an earlier run: choose another -o")
    return out


@contextmanager
def run_folder(output: Path, run: RunContext, kind: str = "run") -> Iterator[Path | None]:
    """The folder a run writes into, put in place of ``output`` atomically when the block succeeds (the earlier
    run there is kept until then; a failure leaves it as it was). Checks ``output`` first
    (:func:`check_output`); yields None in processes other than the main one."""
    from kinject.files import atomic_directory, check_writable

    output = check_output(output, run.env)
    if not is_main_process():
        yield None
        return
    check_writable(output.parent, "output folder")
    with atomic_directory(output, replace=True, replaceable=_replaceable) as tmp:
        (tmp / RUN_MARKER).write_text(json.dumps({"kinject": __version__, "kind": kind}) + "\n")
        yield tmp


