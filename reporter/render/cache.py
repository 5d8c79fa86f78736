"""The user's cache folder for what a render can keep between processes: the compiled
report templates (reporter.render.report.template_cache) and the fonts' advance widths
(reporter.render.columns). Nothing in it is needed: a folder that cannot be used means
each process works it out again."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def folder(name: str) -> Path | None:
    """``$XDG_CACHE_HOME/reporter/<name>`` (``~/.cache`` by default), made if need be, or
    None: where it cannot be made, is not a folder of the user's own, or others could
    write to it (mode 0700, as Jinja asks of its own cache: what is read back from it is
    compiled code), or ``REPORTER_CACHE=0`` turns the caches off."""
    if os.environ.get("REPORTER_CACHE", "1") == "0" or not hasattr(os, "getuid"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "reporter", name)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() \
            or stat.S_IMODE(st.st_mode) & 0o077:  # another user could write code into it
        return None
    return Path(path)
