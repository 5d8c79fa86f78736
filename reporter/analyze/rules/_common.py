"""Helpers the rule families share: severities, ranked operators, the host's calls that
wait (synchronisations, copies)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ...model.profile import Op, Profile
from ..findings import Basis, basis, operators, share, step_share


def severity(value: float, high: float) -> str:
    return "high" if value >= high else "medium"


def largest_in_step(profile: Profile, rows: list[Op], limit: float
                     ) -> tuple[Op, float, float] | None:
    """The row with the most inclusive CPU time, its share of the profiled steps' wall
    time and that wall time, when the share is above ``limit``; else None."""
    if not rows:
        return None
    top = max(rows, key=lambda o: o.cpu_total_us)
    s, wall = step_share(profile, top.cpu_total_us)
    return (top, s, wall) if s > limit else None


def ranked(profile: Profile, names: set[str]) -> tuple[Basis, list[Op], float]:
    """The named operators, largest first on the profile's basis, and their joint share."""
    b = basis(profile)
    ops = sorted((o for o in operators(profile) if o.name in names),
                 key=lambda o: getattr(o, b.attr), reverse=True)
    return b, ops, share(ops, b)


def idle_sync_part(of_copies: bool) -> Callable[[Profile], float]:
    """The part of the device's idle time in synchronisations that copies (or, with
    ``of_copies`` false, synchronisations proper) own: the host's time in their calls over
    its time in both."""
    def owned(profile: Profile) -> float:
        copies = sum(o.self_cpu_us for o in profile.ops if o.name in COPY_CALLS)
        syncs = sum(o.self_cpu_us for o in sync_calls(profile)[0])
        if copies + syncs <= 0:
            return 1.0
        return (copies if of_copies else syncs) / (copies + syncs)
    return owned


SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "hipStreamSynchronize", "hipDeviceSynchronize", "aten::item",
            "aten::_local_scalar_dense")


def host_calls(profile: Profile, names: tuple[str, ...]) -> tuple[list[Op], float]:
    """The rows of these calls with self CPU time, longest first, and their share of the
    CPU time (the host blocked in them)."""
    rows = sorted((o for o in profile.ops if o.name in names and o.self_cpu_us > 0),
                  key=lambda o: o.self_cpu_us, reverse=True)
    return rows, sum(o.self_cpu_us for o in rows) / profile.self_cpu_us


# The runner's own wait at the end of a profiled window (breakdown.DRAIN_MARK) is one of
# these calls: cudaDeviceSynchronize (cudaEventSynchronize in runs before the drain waited
# for every stream).
DRAIN_CALLS = ("cudaDeviceSynchronize", "cudaEventSynchronize")


def sync_calls(profile: Profile) -> tuple[list[Op], float]:
    """host_calls of SYNC_OPS inside the steps, less the runner's own drain: the host's
    time in the ``drain`` phase of the step breakdown comes off the drain's call, and a
    trace's calls outside its steps (the profiler's closing cudaDeviceSynchronize) come
    off theirs, so that a synchronisation the model never made is not read as one."""
    rows, _ = host_calls(profile, SYNC_OPS)
    b = profile.breakdown
    left = sum(b.host_us.get("drain") or []) if b is not None and b.host_us else 0.0
    outside = b.sync_outside if b is not None else {}
    out = []
    for o in rows:
        if o.name in outside:
            us, calls = outside[o.name]
            o = replace(o, self_cpu_us=max(0.0, o.self_cpu_us - us),
                        calls=max(o.calls - int(calls), 0))
        if left > 0 and o.name in DRAIN_CALLS:
            cut = min(left, o.self_cpu_us)
            left -= cut
            o = replace(o, self_cpu_us=o.self_cpu_us - cut, calls=max(o.calls - 1, 0))
        if o.self_cpu_us > 0 and o.calls > 0:
            out.append(o)
    out.sort(key=lambda o: o.self_cpu_us, reverse=True)
    cpu = profile.self_cpu_us
    return out, (sum(o.self_cpu_us for o in out) / cpu if cpu > 0 else 0.0)


# Runtime calls in which the host waits for a copy: from pageable memory, or behind the
# queue (a synchronous cudaMemcpy; an Async one from pageable memory is synchronous too).
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync", "cudaMemcpy2D",
              "hipMemcpyAsync", "hipMemcpy", "hipMemcpyWithStream")
