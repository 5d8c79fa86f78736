"""Errors that reach the user as one line and an exit code.

Every error the CLI expects carries a short id (shown in brackets) so that a
user can search for it, and an exit code: 2 for bad usage or bad input, 1 for a
failure while working. Anything else is a bug and shows a traceback only with
``--debug``.
"""

from __future__ import annotations

import errno
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator


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


# errno values that say the machine, not the input, is at fault.
_SYSTEM_ERRNOS = {errno.ENOSPC, errno.EIO, errno.ENOMEM, errno.EDQUOT, errno.EROFS,
                  errno.EMFILE, errno.ENFILE}


def read_error(path: Any, exc: OSError, error_id: str = "bad-input") -> ReporterError:
    """The error for a file that could not be read: the user's input (exit 2) unless the
    system failed (a full disk, an I/O error: ``[io]``, exit 1)."""
    why = exc.strerror or str(exc)
    if exc.errno in _SYSTEM_ERRNOS:
        return WorkFailed(f"{path}: {why}", error_id="io")
    return BadInput(f"{path}: cannot read: {why}", error_id=error_id)


# Signals from outside. The CLI's handlers record the signal before raising, so that a
# KeyboardInterrupt that user code raised itself is told apart from a real Ctrl-C.
_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM (timeout, a CI runner, a scheduler): handled like Ctrl-C, exit code 143."""


def signalled() -> int | None:
    """The signal received from outside (SIGINT or SIGTERM), if any."""
    return _received[-1] if _received else None


def install_signal_handlers() -> Callable[[], None]:
    """Ctrl-C and SIGTERM raise (KeyboardInterrupt, Terminated) after being recorded;
    returns a function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: Any) -> None:
        _received.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    _received.clear()

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return restore


@contextmanager
def user_code(what: str, error: type[ReporterError] = WorkFailed,
              error_id: str = "target-raised") -> Iterator[None]:
    """Run a target's own code: whatever it raises, ``sys.exit`` and a KeyboardInterrupt
    it raised itself included, becomes one ReporterError; a real interrupt goes on."""
    try:
        yield
    except ReporterError:
        raise
    except KeyboardInterrupt:
        if signalled() is not None:
            raise
        raise error(f"{what}: the target raised KeyboardInterrupt itself",
                    error_id=error_id) from None
    except SystemExit as exc:
        raise error(f"{what}: the target called sys.exit({exc.code!r})",
                    error_id=error_id) from None
    except Exception as exc:
        raise error(f"{what}: {type(exc).__name__}: {exc}", error_id=error_id) from exc
