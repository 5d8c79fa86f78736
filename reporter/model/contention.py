"""Was a measurement disturbed by other work on the machine? Pure arithmetic.

The runner reads the machine's counters before and after each timed window, each
profiled window, the peak calibration and the timed replacements
(reporter.collect.machine); ``between`` turns two readings into a ``Disturbance``.

The decisive figure is the run-queue wait of the process's own threads (Linux
schedstat): the time they were ready to run and no CPU was free for them. On a quiet
machine it stays under 3% of the thread time a window has (wall time x torch's
threads), and under 8% for a target whose DataLoader workers compete with it; beside
one CPU hog on the 2-core development machine it is 24-56%, beside two 48-73% (a small
MLP, 512x512 matrix products and the built-in targets, 2 threads). A window is
disturbed above ``DISTURBED`` (15%): clear of both. Time the hypervisor stole (``steal`` in
/proc/stat) counts too: the guest's threads "ran" while the host ran something else.

The process's own children (DataLoader workers) compete with its threads for the same
CPUs; that wait is the workload's, not a disturbance. The on-CPU time of its
descendants (live ones from /proc, ended ones from getrusage) is therefore taken off the
wait (at most all of it).

The other counters (involuntary context switches, CPU pressure from /proc/pressure/cpu,
the load average, the process's CPU time over wall x threads) are kept with each
window to explain a verdict; they decide nothing: a process whose threads spin at a
barrier is "busy" by CPU time, and the pressure and load count the process itself.
"""

from __future__ import annotations

from dataclasses import dataclass

# Share of a window's thread time spent waiting for a CPU above which it is disturbed.
DISTURBED = 0.15
# Undisturbed windows a throughput needs for its median and interval to be printed.
MIN_CLEAN = 3
# The resolution of /proc/stat's counters (USER_HZ, 100 on Linux): a reading of the
# machine's time may be a tick short on each CPU, which is allowed for.
TICK_S = 0.01


@dataclass(frozen=True)
class Counters:
    """One reading of the machine's and the process's counters (None: not available)."""

    wall_s: float
    cpu_s: float  # the process's user + system time, all threads
    wait_s: float | None  # run-queue wait of the process's threads (schedstat)
    children_s: float | None  # on-CPU time of the live descendant processes
    nivcsw: int  # involuntary context switches of the process
    steal_s: float | None  # the machine's stolen time, all CPUs (/proc/stat)
    machine_s: float | None  # the machine's total CPU time, all CPUs (/proc/stat)
    busy_s: float | None  # the machine's CPU time not idle, all CPUs (/proc/stat)
    cpus: int | None  # the CPUs /proc/stat counts
    pressure_s: float | None  # /proc/pressure/cpu "some" total
    load1: float | None  # the one-minute load average


@dataclass(frozen=True)
class Disturbance:
    """What disturbed one measured interval, as shares of it."""

    wall_s: float
    threads: int
    share: float | None  # disturbed share of the thread time (None: cannot tell here)
    wait: float | None  # run-queue wait over wall x threads, the children's time taken off
    steal: float | None  # stolen CPU time over the machine's CPU time
    pressure: float | None  # CPU pressure ("some") over wall time
    cpu: float  # the process's CPU time over wall x threads
    nivcsw: int
    load1: float | None
    # The share of the threads that other processes' CPU time left no CPU for
    others: float | None = None

    @property
    def disturbed(self) -> bool:
        return self.share is not None and self.share > DISTURBED


# Another attempt after a disturbed one is worth its cost only while the machine quietens:
# an attempt about as disturbed as the one before (this share of its disturbance or more)
# says the machine stays busy, and a third would cost as much and be disturbed too (a busy
# machine's default suite took 14 min 46 s of wall and 5 min 58 s of CPU against about a
# minute quiet, retrying every profile three times and every calibration four; issue #68).
STILL_BUSY = 0.75


def stays_busy(before: "Disturbance | None", now: "Disturbance") -> bool:
    """Whether ``now``, an attempt after ``before``, finds the machine as busy: both
    disturbed, and ``now`` at least STILL_BUSY of ``before``'s disturbed share."""
    return (before is not None and before.disturbed and now.disturbed
            and (now.share or 0.0) >= STILL_BUSY * (before.share or 0.0))


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


def between(before: Counters, after: Counters, threads: int) -> Disturbance:
    """The disturbance of the interval between two readings, for a process that runs
    ``threads`` threads of work (torch's intra-op threads)."""
    wall = max(after.wall_s - before.wall_s, 1e-9)
    capacity = wall * max(threads, 1)
    wait = _delta(before.wait_s, after.wait_s)
    children = _delta(before.children_s, after.children_s) or 0.0
    wait_share = max(0.0, wait - children) / capacity if wait is not None else None
    steal, machine = _delta(before.steal_s, after.steal_s), _delta(before.machine_s,
                                                                      after.machine_s)
    # /proc/stat counts in ticks: a reading may be a tick short on each CPU.
    tick = TICK_S * (after.cpus or 1)
    steal_share = max(0.0, steal - tick) / machine if steal is not None and machine else None
    pressure = _delta(before.pressure_s, after.pressure_s)
    cpu = max(0.0, after.cpu_s - before.cpu_s)
    busy = _delta(before.busy_s, after.busy_s)
    others = _others(max(0.0, busy - tick) if busy is not None else None, cpu + children,
                     wall, threads, after.cpus)
    contended = max((x for x in (wait_share, others) if x is not None), default=None)
    parts = [x for x in (contended, steal_share) if x is not None]
    return Disturbance(
        wall_s=wall, threads=threads,
        share=min(1.0, sum(parts)) if parts else None,
        wait=wait_share, others=others, steal=steal_share,
        pressure=min(1.0, pressure / wall) if pressure is not None else None,
        cpu=cpu / capacity,
        nivcsw=max(0, after.nivcsw - before.nivcsw), load1=after.load1)


def _others(busy: float | None, own: float, wall: float, threads: int,
            cpus: int | None) -> float | None:
    """The share of the process's threads that found no CPU free of other processes'
    work: the CPUs other processes kept busy (the machine's busy time less this process
    and its children), plus this process's threads, beyond the machine's CPUs."""
    if busy is None or not cpus:
        return None
    other_cpus = max(0.0, busy - own) / wall
    return min(1.0, max(0.0, other_cpus + threads - cpus) / max(threads, 1))


def disturbed_time(items: list[Disturbance]) -> float | None:
    """The share of the measured wall time that fell in disturbed intervals (None when
    none of them could tell)."""
    known = [d for d in items if d.share is not None]
    wall = sum(d.wall_s for d in known)
    if not known or wall <= 0:
        return None
    return sum(d.wall_s for d in known if d.disturbed) / wall


def mean_share(items: list[Disturbance]) -> float | None:
    """The wall-weighted mean disturbed share of the thread time."""
    known = [d for d in items if d.share is not None]
    wall = sum(d.wall_s for d in known)
    if not known or wall <= 0:
        return None
    return sum(d.wall_s * (d.share or 0.0) for d in known) / wall
