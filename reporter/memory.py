"""How much memory this process may still take: the budget that work on untrusted input
(a huge trace, a what-if at crafted shapes) is checked against before it allocates.

The least of what the machine has available (/proc/meminfo), what the address-space
limit leaves (``ulimit -v``, ``prlimit --as``) and what the cgroup leaves (a container's
memory limit). None where none of them can be read (not Linux).
"""

from __future__ import annotations

import resource
from pathlib import Path


def available() -> int | None:
    """Bytes this process can still allocate, or None when that cannot be told."""
    found = [b for b in (_meminfo(), _address_space(), _cgroup()) if b is not None]
    return max(0, min(found)) if found else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _meminfo() -> int | None:
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def _address_space() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("VmSize:"):
            return soft - int(line.split()[1]) * 1024
    return soft


def _cgroup() -> int | None:
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, used = _read(limit), _read(usage)
        if cap is None or used is None:
            continue
        cap, used = cap.strip(), used.strip()
        if cap.isdigit() and used.isdigit() and int(cap) < 1 << 60:
            return int(cap) - int(used)
    return None
