"""User-facing errors: each renders as one line and makes the CLI exit with code 2."""

from __future__ import annotations

from pathlib import Path


class KinjectError(Exception):
    """An error caused by the user's input (config, data, names). One line, exit code 2."""

    exit_code = 2


class SpecError(KinjectError):
    """A run spec or plugin config does not validate. The message names the field path."""


class UnknownNameError(KinjectError):
    """A plugin name that no registry knows; the message carries did-you-mean suggestions."""


class PluginLoadError(KinjectError):
    """A plugin is declared but cannot be imported or is not of the expected kind."""


class DataError(KinjectError):
    """Malformed or missing data. ``path``/``line`` locate the problem when known."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.path, self.line, self.reason = path, line, message
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class DataMissingError(DataError):
    """A dataset was not found where kinject looked."""


class LeaseLost(KinjectError):
    """This process's lease on a stage expired (it stalled past ``KINJECT_LOCK_LEASE``) and another process took the
    stage over: this one stops computing it, publishes nothing, and waits for the other's result."""


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) or SIGTERM while a command runs: unwinds like KeyboardInterrupt (locks released, temporary
    folders removed, checkpoints kept), then one line and exit code 128 + the signal (130, 143). ``detail``: what
    the command that was interrupted has to say (cells done, how to continue); else the line says what is kept of
    the stage it struck: the checkpoint a training loop saved on the signal (``saved_step``), the newest one its
    work folder holds, or that its work is lost."""

    NAMES = {2: "Ctrl-C (SIGINT)", 15: "SIGTERM"}

    def __init__(self, signum: int = 2, detail: str = "", saved_step: int | None = None):
        super().__init__(signum, detail)
        self.signum, self.detail, self.saved_step = signum, detail, saved_step
        import sys

        running = getattr(sys.modules.get("kinject.stage_runner"), "RUNNING", None)
        # where it struck (unwinding forgets it): the stage's name, its work folder, when it started
        self.stage, self.work, self.started = running[-1] if running else (None, None, None)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self) -> str:
        where = f" during stage {self.stage}" if self.stage else ""
        return f"interrupted by {self.NAMES.get(self.signum, f'signal {self.signum}')}{where}: " + \
            (self.detail or self.kept())

    def kept(self) -> str:
        """What the interrupted stage leaves for ``--resume``, or what is lost."""
        again = "run the same command with --resume"
        if self.saved_step is not None:
            return f"checkpoint saved at step {self.saved_step}: --resume continues from it ({again})"
        if self.stage is None:
            return "nothing is half-written; finished stages are kept in the cache (run the same command again)"
        step = newest_checkpoint(self.work)
        if step is not None:
            return (f"nothing is half-written; its checkpoint at step {step} is kept: --resume continues from it, "
                    f"the steps after it are lost ({again})")
        import time

        spent = f" ({time.time() - self.started:.0f} s)" if self.started else ""
        return (f"stage {self.stage} had saved no checkpoint, so its work{spent} is lost and it starts over; "
                "nothing is half-written and finished stages are kept in the cache (run the same command again)")

    @classmethod
    def defer(cls, on: bool = True) -> None:
        """``on``: a training loop (one process) takes an interrupt at the end of its current step, saving a
        checkpoint first (:meth:`deferred` tells it); a second signal still stops at once. Off: a signal taken
        but not yet acted on is raised at the next check (:meth:`raise_pending`)."""
        _DEFERRING[:] = [on]
        if not on and _DEFERRED:
            _PENDING.extend(_DEFERRED)
            _DEFERRED.clear()

    @classmethod
    def deferred(cls) -> int | None:
        """The signal a deferring training loop has to act on at the end of this step (None: none)."""
        return _DEFERRED[0] if _DEFERRED else None

    @classmethod
    def take_deferred(cls) -> int | None:
        """:meth:`deferred`, which the loop now acts on (it is no longer pending anywhere)."""
        return _DEFERRED.pop() if _DEFERRED else None

    @classmethod
    def install(cls, signals: tuple[int, ...] | None = None) -> None:
        """Make SIGINT and SIGTERM (or ``signals``) raise :class:`Interrupted` in the main thread (no-op in another):
        the one interrupt handler of the CLI and of a grid's workers. A signal that strikes inside a logging handler,
        whose ``emit`` may catch any exception (tqdm's does: the run would go on), is kept instead and raised by
        :meth:`raise_pending` at the next check - the next log record, training step or stage, or the command's end."""
        import logging
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return

        def interrupt(signum, frame):
            if _DEFERRING[0] and not _DEFERRED:  # a training loop saves a checkpoint, then raises it
                _DEFERRED.append(signum)
                return
            if _in_logging_handler(frame):
                _PENDING.append(signum)
                return
            raise cls(signum)

        for signum in signals or (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, interrupt)
        factory = logging.getLogRecordFactory()
        if not getattr(factory, "raises_pending_interrupts", False):  # a log record is a check (outside any handler)
            def record(*args, **kwargs):
                cls.raise_pending()
                return factory(*args, **kwargs)

            record.raises_pending_interrupts = True
            logging.setLogRecordFactory(record)

    @classmethod
    def raise_pending(cls) -> None:
        """Raise the interrupt a signal left pending (it struck inside a logging handler); nothing when none did."""
        if _PENDING:
            signum = _PENDING[0]
            _PENDING.clear()
            raise cls(signum)


_PENDING: list[int] = []  # signals that struck inside a logging handler, raised at the next check
_DEFERRING: list[bool] = [False]  # whether a training loop takes an interrupt at the end of its step
_DEFERRED: list[int] = []  # the signal it takes


def newest_checkpoint(work) -> int | None:
    """The step of the newest complete Trainer checkpoint in the work folder ``work`` (its trainer_state.json, written
    last, reads back as of that step); None when it holds none."""
    import re
    from pathlib import Path

    from kinject.records import read_record

    steps = []
    for folder in Path(work).glob("checkpoint-*") if work else ():
        match = re.fullmatch(r"checkpoint-(\d+)", folder.name)
        try:
            state = read_record(folder / "trainer_state.json") if match else {}
        except DataError:
            continue
        if match and state.get("global_step") == int(match.group(1)):
            steps.append(int(match.group(1)))
    return max(steps, default=None)


def _in_logging_handler(frame) -> bool:
    """Whether ``frame`` runs inside a logging handler's code (emit, flush, handleError, a stream it writes to)."""
    import sys

    logging = sys.modules.get("logging")
    depth = 0
    while frame is not None and logging is not None and depth < 64:
        if isinstance(frame.f_locals.get("self"), logging.Handler):
            return True
        frame, depth = frame.f_back, depth + 1
    return False
