"""Errors that reach the user as one line and an exit code.

Every error the CLI expects carries a short id (shown in brackets) so that a
user can search for it, and an exit code: 2 for bad usage or bad input, 1 for a
failure while working. Anything else is a bug and shows a traceback only with
``--debug``.
"""

from __future__ import annotations


class ReporterError(Exception):
    """Base class: an error that the CLI prints as one line."""

    exit_code = 1
    error_id = "failed"

    def __init__(self, message: str, *, error_id: str | None = None):
        super().__init__(message)
        if error_id:
            self.error_id = error_id

    def one_line(self) -> str:
        text = " ".join(str(self).split())
        return f"reporter: error [{self.error_id}]: {text}"


class BadInput(ReporterError):
    """The user asked for something we cannot do: exit code 2."""

    exit_code = 2
    error_id = "bad-input"


class WorkFailed(ReporterError):
    """Something failed while working (a target raised, say): exit code 1."""

    exit_code = 1
    error_id = "failed"
