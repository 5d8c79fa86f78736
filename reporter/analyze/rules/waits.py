"""Rules about waiting: for the input pipeline, in synchronisations, on kernel launches, a
device left idle."""

from __future__ import annotations

from dataclasses import dataclass

from ...model.choice import (OVER_STEPS, OVER_STEPS_OR_ALL, always, either, first, of, on_gpu,
                             steps, when)
from ...model.finding import Evidence, Finding, opt
from ...model.profile import KIND_KERNEL, Profile
from .. import savings
from ..compiled import GRAPH_LAUNCHES
from ..findings import dataloader_rows, rule, step_share
from ._common import idle_sync_part, severity, sync_calls


def _waits_longer(waiting: Finding, dominant: Finding) -> bool:
    """The input pipeline is waited on for longer than the operator runs: work done
    inside ``enumerate(DataLoader)``, such as a per-sample transform, shows up as
    ordinary operators."""
    return (waiting.evidence.op_time_us or 0) >= (dominant.evidence.op_time_us or 0)


@dataclass(kw_only=True)
class DataloaderBound(Evidence):
    basis: str  # "step"
    share: float  # the wait's share of the profiled steps' wall time
    threshold: float  # the share it is found above
    op: str  # the largest enumerate(DataLoader) row
    op_time_us: float  # the wait, over the profiled steps
    step_us: float  # the profiled steps' wall time
    calls: int
    multiprocess: bool  # workers load the data (else the main process does)


_SAYS_DATALOADER_BOUND = {
    "steps": OVER_STEPS_OR_ALL,
    "idles": either("the_gpu_idles", "the_model_idles", on_gpu),
    "why": either("workers_fall_behind", "main_process_prepares",
                  lambda v: of(DataloaderBound)(v).multiprocess),
}


@rule("dataloader-bound", says=_SAYS_DATALOADER_BOUND, evidence=DataloaderBound,
      saving=savings.waited("idle_data", host_key="data"),
      explains=_waits_longer, share=0.10, high=0.30)
def dataloader_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The step waits for its input: enumerate(DataLoader) takes a share of the step."""
    rows = dataloader_rows(profile)
    waited = sum(o.cpu_total_us for o in rows)
    frac, wall = step_share(profile, waited)
    if frac <= limits["share"]:
        return None
    top = max(rows, key=lambda o: o.cpu_total_us)
    return Finding("dataloader-bound", severity(frac, limits["high"]),
                   DataloaderBound(basis="step", share=frac, threshold=limits["share"],
                                   op=top.name, op_time_us=waited, step_us=wall,
                                   calls=sum(o.calls for o in rows),
                                   multiprocess="MultiProcessing" in top.name),
                   ops=[o.name for o in rows])


@dataclass(kw_only=True)
class SyncStall(Evidence):
    basis: str  # "cpu"
    share: float  # the synchronisations' share of the CPU time
    threshold: float
    op: str  # the call the host waits in longest
    op_share: float
    op_time_us: float
    calls: int  # its calls
    item_calls: int  # .item() calls among them (a value read back to the host)


_SAYS_SYNC_STALL = {"steps": OVER_STEPS,
                    "item": when("item_calls", lambda v: of(SyncStall)(v).item_calls)}


@rule("sync-stall", says=_SAYS_SYNC_STALL, evidence=SyncStall,
      saving=savings.waited("idle_sync", owned=idle_sync_part(of_copies=False)),
      symptom=savings.device_kept_busy, share=0.10, high=0.30)
def sync_stall(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The host waits for the device: synchronisations hold a share of CPU time."""
    if profile.self_cpu_us <= 0:
        return None
    rows, total = sync_calls(profile)
    if not rows or total <= limits["share"]:
        return None
    top = rows[0]
    item_calls = sum(o.calls for o in profile.ops
                     if o.name in ("aten::item", "aten::_local_scalar_dense"))
    return Finding("sync-stall", severity(total, limits["high"]),
                   SyncStall(basis="cpu", share=total, threshold=limits["share"],
                             op=top.name, op_share=top.self_cpu_us / profile.self_cpu_us,
                             op_time_us=top.self_cpu_us, calls=top.calls,
                             item_calls=item_calls), ops=[o.name for o in rows])


# A CUDA graph's launch is one launch, whatever number of kernels it replays.
_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
             "hipLaunchKernel", "hipExtModuleLaunchKernel", *GRAPH_LAUNCHES)


def _host_idle_share(profile: Profile) -> float | None:
    """The share of the steps the device sat idle because the host had not launched its
    next work (the step breakdown's idle_host), or None without a device breakdown."""
    b = profile.breakdown
    if b is None or not b.steps_us or "idle_host" not in (b.device_us or {}):
        return None
    wall = sum(b.steps_us)
    return sum(b.device_us["idle_host"]) / wall if wall > 0 else None


# Kernels shorter than this on average are launch latency: the sizes are too small for
# the device (the report says so too: reporter.analyze.reading.short_kernels_us).
SHORT_KERNEL_US = 10.0


def mean_kernel_us(profile: Profile) -> float | None:
    """The kernels' mean device time, per kernel; None without kernel rows. The one mean
    the summary's short-kernel line and launch-overhead give (T5 on an H200 read 2.95 us
    in one and 3.08 us, copies and memsets included, in the other)."""
    kernels = [o for o in profile.ops if o.kind == KIND_KERNEL and o.calls]
    calls = sum(o.calls for o in kernels)
    return sum(o.self_device_us for o in kernels) / calls if calls else None


@dataclass(kw_only=True)
class LaunchOverhead(Evidence):
    basis: str  # "device"
    share: float  # the launches' host time over the device's time (a ratio, may pass 1)
    threshold: float
    op: str  # the first launch call
    op_time_us: float  # the launches' host time
    calls: int  # launches
    device_us: float  # the device's time
    mean_kernel_us: float  # per kernel (per launch, with CUDA graphs)
    short_kernel_us: float  # the limit below which a kernel is short
    graphs: int | None = opt()  # CUDA graph launches among them
    # from a trace's launch statistics (analyze.breakdown.launch_statistics)
    launches_per_step: float | None = opt()
    delay_median_us: float | None = opt()
    dry_steps: int | None = opt()  # steps in which the queue ran dry
    steps: int | None = opt()


_SAYS_LAUNCH_OVERHEAD = {
    "steps": OVER_STEPS,
    "per_launch": either("graph_launch_work", "average_kernel",
                         lambda v: of(LaunchOverhead)(v).graphs),
    "delays": when("launch_delays",
                   lambda v: of(LaunchOverhead)(v).delay_median_us is not None),
    # "in every step", not "in 4 of 4 steps" (never in no step: the rule fires on none)
    "dry": first(("dry_in_the_step", lambda v: steps(v) == 1),
                 # two steps: "in both steps", not "in all 2 steps"
                 ("dry_in_both_steps",
                  lambda v: steps(v) == 2 and of(LaunchOverhead)(v).dry_steps == 2),
                 ("dry_in_all_steps", lambda v: of(LaunchOverhead)(v).dry_steps == steps(v)),
                 ("dry_in_some_steps", always)),
    "fix": either("replay_as_cuda_graphs", "compile_the_model",
                  lambda v: of(LaunchOverhead)(v).compiled),
}


@rule("launch-overhead", says=_SAYS_LAUNCH_OVERHEAD, evidence=LaunchOverhead, host_work=True,
      saving=savings.unquantified, ratio=0.5,
      short_kernel_us=SHORT_KERNEL_US,
      min_launches=100, host_idle=0.10)
def launch_overhead(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Many short kernels: launching them costs about as much as running them. Short
    kernels alone are not enough where the step breakdown shows the queue kept the
    device busy (the host was ahead: its launches cost nothing the device waited for)."""
    if not profile.has_device:
        return None
    launches = [o for o in profile.ops if o.name in _LAUNCHES]
    calls = sum(o.calls for o in launches)
    if calls < limits["min_launches"]:
        return None
    launch_us = sum(o.self_cpu_us for o in launches)
    ratio = launch_us / profile.self_device_us
    graphs = sum(o.calls for o in launches if o.name in GRAPH_LAUNCHES)
    # CUDA graphs among the launches: each one launch for all its kernels, so the mean is
    # the device time per launch, not per kernel
    per_kernel = None if graphs else mean_kernel_us(profile)
    mean_us = per_kernel if per_kernel is not None else profile.self_device_us / calls
    if ratio < limits["ratio"]:
        if mean_us >= limits["short_kernel_us"]:
            return None
        waited = _host_idle_share(profile)
        if waited is not None and waited < limits["host_idle"]:
            return None
    # A trace says how the launches kept up (analyze.breakdown.launch_statistics): when
    # the queue never ran dry in a step, the host stayed ahead of the device and the
    # launches cost it no time, however many there were.
    stats = profile.breakdown.launch if profile.breakdown is not None else {}
    if stats and not stats.get("dry_steps"):
        return None
    return Finding("launch-overhead", "high" if ratio >= 1 else "medium",
                   LaunchOverhead(basis="device", share=ratio, threshold=limits["ratio"],
                                  op=launches[0].name, op_time_us=launch_us, calls=calls,
                                  device_us=profile.self_device_us, mean_kernel_us=mean_us,
                                  short_kernel_us=limits["short_kernel_us"],
                                  graphs=graphs or None,
                                  launches_per_step=stats["launches_per_step"] if stats else None,
                                  delay_median_us=stats["delay_median_us"] if stats else None,
                                  dry_steps=int(stats["dry_steps"]) if stats else None,
                                  steps=int(stats["steps"]) if stats else None),
                   ops=[o.name for o in launches])


IDLE_BUSY = 0.50  # low-device-utilization's threshold, of the profiled step and the timed one



# Where the device's idle time goes mostly to work already queued that waits on a
# dependency or an event, the host is not what it waits for (trace 14: "waits for the
# CPU" where the breakdown said "mostly waiting on a dependency, work queued").
@dataclass(kw_only=True)
class LowDeviceUtilization(Evidence):
    basis: str  # "step"
    share: float  # the device's busy share of the steps (found below the threshold)
    threshold: float
    op_time_us: float  # the device's busy time
    step_us: float
    calls: int  # 0: no operator's calls
    queued_most: bool  # most idle time waited on work queued already (a dependency)


_SAYS_LOW_DEVICE_UTILIZATION = {
    "steps": OVER_STEPS_OR_ALL,
    "rest": either("waits_on_dependency", "waits_for_cpu",
                   lambda v: of(LowDeviceUtilization)(v).queued_most),
    "advice": either("find_the_dependency", "feed_the_gpu",
                     lambda v: of(LowDeviceUtilization)(v).queued_most),
}


@rule("low-device-utilization", says=_SAYS_LOW_DEVICE_UTILIZATION,
      evidence=LowDeviceUtilization,
      saving=savings.idle_left(),
      symptom=savings.idle_of_profiler(IDLE_BUSY), busy=IDLE_BUSY)
def low_device_utilization(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The device is busy for less than half of the profiled steps: the union of its
    work inside the steps (the step breakdown's time less its idle time), or, without a
    breakdown (a table), its kernels' time over the steps' wall time. Left out where the
    step timed without the profiler leaves the device busy half of it or more (its idle
    time was the profiler's: savings.idle_of_profiler)."""
    if not profile.has_device:
        return None
    b = profile.breakdown
    if b is not None and b.steps_us and b.device_us:
        wall = float(sum(b.steps_us))
        by_kind = {k: float(sum(v)) for k, v in b.device_us.items() if k.startswith("idle")}
        idle = sum(by_kind.values())
        queued_most = bool(by_kind) and max(by_kind, key=lambda k: by_kind[k]) == "idle_queued"
        busy_us = max(0.0, wall - idle)
        busy = busy_us / wall if wall > 0 else 0.0
    else:
        busy_us = profile.self_device_us
        busy, wall = step_share(profile, busy_us)
        queued_most = False  # a table: nothing says what the idle time waited for
    if wall <= 0 or busy >= limits["busy"]:
        return None
    return Finding("low-device-utilization", "high" if busy < limits["busy"] / 2 else "medium",
                   LowDeviceUtilization(basis="step", share=busy, threshold=limits["busy"],
                                        op_time_us=busy_us, step_us=wall, calls=0,
                                        queued_most=queued_most))
