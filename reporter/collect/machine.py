"""Read the counters that tell whether a measurement was disturbed (Linux /proc).

``read()`` takes one reading (reporter.model.contention.Counters); ``Watch`` measures
the disturbance of a block of code. Every counter the kernel does not provide is None,
and a reading never fails: on another system the runs just cannot tell.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

from ..model.contention import Counters, Disturbance, between

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _thread_wait_s() -> float | None:
    """Run-queue wait of this process's threads (schedstat's second field, ns)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    total, seen = 0, False
    for tid in tids:
        text = _read(f"/proc/self/task/{tid}/schedstat")
        if text is None:
            continue  # the thread ended meanwhile
        fields = text.split()
        if len(fields) >= 2 and fields[1].isdigit():
            total += int(fields[1])
            seen = True
    return total / 1e9 if seen else None


def _descendants() -> Iterator[str]:
    """The pids of this process's live descendants (DataLoader workers, say)."""
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return
    parent: dict[str, str] = {}
    for pid in pids:
        text = _read(f"/proc/{pid}/stat")
        if text:
            rest = text.rpartition(")")[2].split()  # after "(comm)": state, ppid, ...
            if len(rest) > 1:
                parent[pid] = rest[1]
    for pid, ppid in parent.items():
        seen = 0
        while ppid in parent and ppid != me and seen < 64:  # a cycle cannot hold us up
            ppid, seen = parent[ppid], seen + 1
        if ppid == me and pid != me:
            yield pid


def _children_s() -> float:
    """On-CPU time (user + system) of the live descendants."""
    total = 0
    for pid in _descendants():
        text = _read(f"/proc/{pid}/stat")
        rest = text.rpartition(")")[2].split() if text else []
        if len(rest) > 12 and rest[11].isdigit() and rest[12].isdigit():
            total += int(rest[11]) + int(rest[12])  # utime, stime
    return total / _TICK


def _machine_s() -> tuple[float | None, float | None, float | None, int | None]:
    """The machine's stolen, total and not idle CPU time, all CPUs, and how many CPUs
    (/proc/stat)."""
    text = _read("/proc/stat")
    if not text:
        return None, None, None, None
    lines = text.split("\n")
    fields = lines[0].split()
    if len(fields) < 6 or fields[0] != "cpu" or not all(f.isdigit() for f in fields[1:]):
        return None, None, None, None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    steal = ticks[7] if len(ticks) > 7 else 0
    total = sum(ticks)
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    return steal / _TICK, total / _TICK, (total - ticks[3] - ticks[4]) / _TICK, cpus or None


def _pressure_s() -> float | None:
    text = _read("/proc/pressure/cpu")
    if not text:
        return None
    for word in text.split("\n", 1)[0].split():
        if word.startswith("total=") and word[6:].isdigit():
            return int(word[6:]) / 1e6
    return None


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def faults() -> tuple[int, int]:
    """The process's (minor, major) page faults so far (resource.getrusage)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return int(use.ru_minflt), int(use.ru_majflt)


def read() -> Counters:
    """One reading of the counters (a millisecond or two)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)  # children that ended, waited for
    steal, machine, busy, cpus = _machine_s()
    return Counters(wall_s=time.perf_counter(), cpu_s=usage.ru_utime + usage.ru_stime,
                    wait_s=_thread_wait_s(),
                    children_s=_children_s() + ended.ru_utime + ended.ru_stime,
                    nivcsw=int(usage.ru_nivcsw), steal_s=steal, machine_s=machine,
                    busy_s=busy, cpus=cpus, pressure_s=_pressure_s(), load1=_load1())


class Watch:
    """The disturbance of what runs between ``start()`` and ``stop()``."""

    def __init__(self, threads: int):
        self.threads = threads
        self._start = read()

    def stop(self) -> Disturbance:
        return between(self._start, read(), self.threads)


_SPIN = "import time\nend = time.time() + float({seconds})\nwhile time.time() < end: pass"
_LAUNCH = ("import subprocess, sys\n"
           "print(subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
           "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
           "stderr=subprocess.DEVNULL).pid)")


@contextmanager
def cpu_hogs(count: int, seconds: float = 120.0) -> Iterator[list[int]]:
    """``count`` processes that spin on a CPU for at most ``seconds``, ended by their pids
    when the block ends: the other work of a shared machine, for tests and benchmarks.
    They are started through a launcher that exits at once, so they are not this
    process's descendants (whose CPU time counts as the workload's own)."""
    pids: list[int] = []
    try:
        for _ in range(count):
            out = subprocess.run([sys.executable, "-c", _LAUNCH, _SPIN.format(seconds=seconds)],
                                 capture_output=True, text=True, check=True, timeout=30)
            pids.append(int(out.stdout))
        time.sleep(0.3)  # let them start spinning
        yield pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
