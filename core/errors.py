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
    the command that was interrupted has to say (cells done, how to continue)."""

    NAMES = {2: "Ctrl-C (SIGINT)", 15: "SIGTERM"}

    def __init__(self, signum: int = 2, detail: str = ""):
        super().__init__(signum, detail)
        self.signum, self.detail = signum, detail
        import sys

        running = getattr(sys.modules.get("kinject.stage_runner"), "RUNNING", None)
        self.stage = running[-1] if running else None  # where it struck (unwinding forgets it)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def message(self) -> str:
        where = f" during stage {self.stage}" if self.stage else ""
        detail = self.detail or ("nothing is half-written and a stage's checkpoints are kept: run the same command "
                                 "again (with --resume to continue from its checkpoints)")
        return f"interrupted by {self.NAMES.get(self.signum, f'signal {self.signum}')}{where}: {detail}"

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
