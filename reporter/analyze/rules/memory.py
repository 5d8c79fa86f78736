"""Rules about memory: pressure on the GPU's memory, page faults from memory mapped afresh
each step."""

from __future__ import annotations

from dataclasses import dataclass

from ...model.choice import of, when
from ...model.finding import IN_OTHERS, Evidence, Finding, Saving, nullable
from ...model.profile import Profile
from .. import savings
from ..findings import RULES, Worth, operators, rule
from ._common import severity


@dataclass(kw_only=True)
class MemoryPressure(Evidence):
    basis: str  # "memory"
    share: float  # the peak's share of the device's memory
    threshold: float
    op: str | None = nullable()  # the operator allocating most a call (null: none)
    calls: int
    peak_b: int
    capacity_b: int
    mem_per_call_b: int
    per_call_share: float  # that operator's allocation a call, of the peak


_SAYS_MEMORY_PRESSURE = {"largest": when("largest_allocation",
                                         lambda v: of(MemoryPressure)(v).op)}


@rule("memory-pressure", says=_SAYS_MEMORY_PRESSURE, evidence=MemoryPressure,
      saving=savings.unquantified, peak=0.90, per_call=0.25,
      per_call_fill=0.50)
def memory_pressure(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Peak device memory near capacity, or one operator allocating a large share of a
    peak that fills half of it or more (BERT on an H200, 2026-11-29: "GPU memory is 1.3%
    full", a main problem for a 512 MB multiply in a 1.76 GB peak of 140 GB)."""
    peak, capacity = profile.peak_device_mem_b, profile.device_mem_capacity_b
    if not peak or not capacity:
        return None
    fill = peak / capacity
    top = max((o for o in operators(profile) if o.calls and o.self_device_mem_b > 0),
              key=lambda o: o.self_device_mem_b / o.calls, default=None)
    per_call = top.self_device_mem_b / top.calls if top else 0
    if fill <= limits["peak"] and (per_call <= limits["per_call"] * peak
                                   or fill < limits["per_call_fill"]):
        return None
    return Finding("memory-pressure", "high" if fill > limits["peak"] else "medium",
                   MemoryPressure(basis="memory", share=fill, threshold=limits["peak"],
                                  op=top.name if top else None, calls=top.calls if top else 0,
                                  peak_b=peak, capacity_b=capacity,
                                  mem_per_call_b=int(per_call), per_call_share=per_call / peak),
                   ops=[top.name] if top else [])


def _faults_saving(w: Worth) -> Saving:
    """The faults' time goes away: their count times the measured cost of one, a share
    of the step timed without the profiler (the evidence's ``share``, which ``estimate``
    keeps on that step); at least at the cost of a fault spread over the threads. Less
    the faults inside another finding's operators, which go with its fix: a fault lands
    in the operator that first writes the fresh page (``savings.fault_share``: by the
    bytes each allocates, the allocators' by the writers' time), and those another
    finding names are its (seq2seq's copy finding owned most of them: counted twice, the
    two predicted 94% of the step against 68% measured)."""
    e = w.finding.evidence
    if not w.accounts_us or not isinstance(e, PageFaults):
        return w.unquantified()
    # a catch-all (one dominant operator) keeps its operators' work: not its faults' fix
    others = [o for o in w.others if o is not w.finding
              and not (o.rule in RULES and RULES[o.rule].catch_all)]
    inside = savings.owned_fault_share(w.profile, others)
    saving = w.accounts_us * max(0.0, 1.0 - inside)
    low = saving * min(1.0, float(e.fault_low_us or e.fault_us) / float(e.fault_us))
    # all of them in other findings' operators: a bare "0" read as a fix worth nothing
    return Saving(w.accounts_us, saving, low, saving, w.step_us,
                  IN_OTHERS if saving <= 0 else None, host_saving=True)


@dataclass(kw_only=True)
class PageFaults(Evidence):
    basis: str  # "step" (the step timed without the profiler)
    share: float  # the faults' time, of that step
    threshold: float
    faults: int  # a step
    fault_us: float  # the measured cost of one
    fault_low_us: float  # the cost of one spread over the threads
    fault_time_us: float  # faults x fault_us
    unprofiled_step_us: float
    unprofiled: bool  # True: measured without the profiler
    calls: int  # 0


@rule("page-faults", saving=_faults_saving, evidence=PageFaults, keeps_work=True, share=0.05,
      high=0.25)
def page_faults(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The host's minor and major page faults in a step timed without the profiler, at
    the cost of one measured in the same process (runner.measured_fault_us), take over
    ``share`` of that step: freed memory goes back to the OS (glibc's malloc maps blocks
    of 32 MiB and more afresh each time and trims its heap) and the next step has the
    kernel map and zero it again (Profile.host_faults). On the CPU only: on a GPU the
    host runs ahead of the device, and its faults lengthen the step only where the host
    bounds it, which this count cannot tell."""
    h = profile.host_faults
    if not h or profile.has_device:
        return None
    faults, fault_us, step_us = h["faults"], h["fault_us"], h["step_us"]
    cost = faults * fault_us
    if step_us <= 0 or cost < limits["share"] * step_us:
        return None
    share = min(1.0, cost / step_us)
    return Finding("page-faults", severity(share, limits["high"]),
                   PageFaults(basis="step", share=share, threshold=limits["share"],
                              faults=round(faults), fault_us=fault_us,
                              fault_low_us=h.get("fault_low_us", fault_us),
                              fault_time_us=cost, unprofiled_step_us=step_us,
                              unprofiled=True, calls=0))
