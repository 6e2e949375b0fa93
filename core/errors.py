"""User-facing errors: each renders as one line and makes the CLI exit with code 2."""

from __future__ import annotations

from pathlib import Path

__kinject_fingerprint__ = False  # messages only


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
