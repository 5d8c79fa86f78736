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
        """The error as one line that a CI job's log cannot read as a workflow command:
        it starts with "reporter:", and a legacy ``##[`` from the input (a path, a label)
        gets a zero-width joiner, as render.markup.log_line does (not imported: start-up)."""
        text = " ".join(str(self).split()).replace("##[", "#\u200d#[")
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
# Until the command makes anything (a folder, a file, a child process), an interrupt ends
# the process at once: see install_signal_handlers.
_exit_at_once = False


class Terminated(KeyboardInterrupt):
    """SIGTERM (timeout, a CI runner, a scheduler): handled like Ctrl-C, exit code 143."""


def signalled() -> int | None:
    """The signal received from outside (SIGINT or SIGTERM), if any."""
    return _received[-1] if _received else None


def interrupted_line(terminated: bool) -> str:
    """What reporter says when a signal stops it: a report is published whole or not at all
    (reporter.render.report.write_reports), a run folder likewise (reporter.store), so
    whatever the moment, nothing half-written is left."""
    return (f"reporter: {'terminated' if terminated else 'interrupted'}; nothing half-written "
            "was kept")


def install_signal_handlers(exit_at_once: bool = False) -> Callable[[], None]:
    """Ctrl-C and SIGTERM raise (KeyboardInterrupt, Terminated) after being recorded;
    returns a function that puts the previous handlers back.

    With ``exit_at_once`` (reporter's own process), a signal that comes before the command
    has made anything (``work_begins``) prints the one line and ends the process there
    (exit 130, 143) rather than raising: the KeyboardInterrupt would be raised into
    whatever is loading, and torch's import loses it (numpy's import under torch's C++
    clears it: the run went on), turns it into another error (a RecursionError blamed on
    the target) or aborts (a pybind11 ``terminate``): 8 of 112 Ctrl-Cs while torch
    imported, in the 2026-12-03 review."""
    global _exit_at_once
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_signal(signum: int, frame: Any) -> None:
        _received.append(signum)
        if _exit_at_once:
            _exit_now(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    _received.clear()
    _exit_at_once = exit_at_once

    def restore() -> None:
        global _exit_at_once
        for s, handler in previous.items():
            signal.signal(s, handler)
        _exit_at_once = False
    return restore


def work_begins() -> None:
    """From here on, the command makes things a signal must not leave half-made: an
    interrupt raises (KeyboardInterrupt, Terminated), and the cleanup on the way out
    removes them. Called before any folder, file or child process is made."""
    global _exit_at_once
    _exit_at_once = False


def _exit_now(signum: int) -> None:
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe, a stream replaced by None
            pass
    try:
        os.write(2, (interrupted_line(signum == signal.SIGTERM) + "\n").encode())
    except OSError:
        pass
    os._exit(143 if signum == signal.SIGTERM else 130)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs (a few renames that must all
    happen, or be undone, together) and delivered after it, to the handlers there were.

    Held in Python, not with ``pthread_sigmask``: the kernel hands a process's signal to
    any thread that does not block it (torch's, say), and Python runs its handler in the
    main thread anyway. Outside the main thread a block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    previous: dict[int, Any] = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not None:  # None: a handler not set from Python
                previous[s] = signal.signal(s, hold)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):  # each once, in the order they came
            signal.raise_signal(signum)


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
