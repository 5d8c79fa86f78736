"""The user's cache folder for what a render can keep between processes: the compiled
report templates (reporter.render.report.template_cache) and the fonts' advance widths
(reporter.render.columns). Nothing in it is needed: a folder or an entry that cannot be
trusted or read means each process works it out again.

What is read back from the template cache is compiled code, so the cache is trusted only
as far as no one else could have written it, checked at each read and write rather than
once (another user who can swap a folder between the check and the open would get their
code run): the folder is opened component by component from ``/`` without following a
link at its own two levels (``reporter/<name>``), each folder above owned by the user or
root and not writable by others unless sticky (as /tmp); the cache folder itself the
user's, mode 0700. An entry is opened relative to that descriptor, without following a
link and without blocking (a FIFO), and read only when it is a regular file of the
user's with one link (another user who kept a hard link could still rewrite it), that
others cannot write, and of at most ``limit`` bytes.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

MAX_ENTRY = 32 << 20  # bytes: a compiled report template is some 100 kB, a font's widths 1 MB

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _usable() -> bool:
    return (os.environ.get("REPORTER_CACHE", "1") != "0" and hasattr(os, "geteuid")
            and bool(_NOFOLLOW) and os.open in os.supports_dir_fd)


def _base() -> str:
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def _safe_parent(st: os.stat_result, me: int) -> bool:
    """A folder above the cache: no one but the user and root can rename what is in it."""
    return (stat.S_ISDIR(st.st_mode) and st.st_uid in (0, me)
            and (not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX)))


def _own_folder(st: os.stat_result, me: int) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == me and not stat.S_IMODE(st.st_mode) & 0o077


def _open_folder(name: str) -> int | None:
    """A descriptor of ``$XDG_CACHE_HOME/reporter/<name>`` (made if need be) when the whole
    path can be trusted (see the module's docstring), else None. The caller closes it."""
    if not _usable():
        return None
    me = os.geteuid()
    try:
        base = _base()
        os.makedirs(base, exist_ok=True)
        # Links above the cache's own levels are followed once, here (~/.cache may be a
        # link): each folder of the real path is then checked as it is opened.
        parts = [p for p in os.path.realpath(base).split(os.sep) if p]
        fd = os.open(os.sep, _DIR)
    except (OSError, ValueError):
        return None
    try:
        if not _safe_parent(os.fstat(fd), me):
            os.close(fd)
            return None
        for i, part in enumerate([*parts, "reporter", name]):
            if i >= len(parts):  # the cache's own levels: made here, 0700
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            below = os.open(part, _DIR | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
            st = os.fstat(fd)
            last = i == len(parts) + 1
            if not (_own_folder(st, me) if last else _safe_parent(st, me)):
                os.close(fd)
                return None
        return fd
    except OSError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise


def folder(name: str) -> Path | None:
    """``$XDG_CACHE_HOME/reporter/<name>`` (``~/.cache`` by default), made if need be, or
    None: where it cannot be made, is not a folder of the user's own, others could write
    to it or to a folder above it, or ``REPORTER_CACHE=0`` turns the caches off. Only a
    first answer: ``read`` and ``write`` check the path again each time."""
    fd = _open_folder(name)
    if fd is None:
        return None
    os.close(fd)
    return Path(_base(), "reporter", name)


def _entry_name(entry: str) -> bool:
    return bool(entry) and "/" not in entry and entry not in (".", "..") and "\0" not in entry


def read(name: str, entry: str, limit: int = MAX_ENTRY) -> bytes | None:
    """The bytes of the cache ``name``'s ``entry``, or None: not there, or not one to
    trust or read (see the module's docstring)."""
    if not _entry_name(entry):
        return None
    where = _open_folder(name)
    if where is None:
        return None
    try:
        try:
            fd = os.open(entry, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_CLOEXEC", 0), dir_fd=where)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                    or st.st_nlink != 1 or st.st_mode & 0o022 or st.st_size > limit):
                return None
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks) if size <= limit else None
        except OSError:
            return None
        finally:
            os.close(fd)
    finally:
        os.close(where)


def write(name: str, entry: str, data: bytes) -> bool:
    """Keep ``data`` as the cache ``name``'s ``entry`` (a file of the user's, 0600, put in
    place whole by a rename); False where there is no cache to keep it in, or the disk is
    full."""
    if not _entry_name(entry):
        return False
    where = _open_folder(name)
    if where is None:
        return False
    tmp = f".{entry}.{secrets.token_hex(6)}.tmp"
    made = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                     | getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=where)
        made = True
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, entry, src_dir_fd=where, dst_dir_fd=where)
        made = False
        return True
    except OSError:
        return False
    finally:
        if made:
            try:
                os.unlink(tmp, dir_fd=where)
            except OSError:
                pass
        os.close(where)
