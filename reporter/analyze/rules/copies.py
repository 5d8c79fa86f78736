"""Rules about copies: copy-heavy steps, the host blocked in copy calls, copies far below
their link."""

from __future__ import annotations

from dataclasses import dataclass

from ...model.choice import OVER_STEPS, always, either, first, of, when
from ...model.finding import Evidence, Finding, Saving
from ...model.profile import Profile
from .. import savings
from ..findings import Worth, basis, op_evidence, rule
from ._common import COPY_CALLS, host_calls, idle_sync_part, ranked, severity

COPIES = savings.COPY_OPS


# Operators behind layout copies.
LAYOUT = ("aten::repeat", "aten::permute", "aten::contiguous", "aten::clone",
          "aten::repeat_interleave", "aten::tile", "aten::transpose")


def _copies_saving(w: Worth) -> Saving:
    """Copies go away, less those that materialise a blow-up another finding reports
    (its ``materialised_share`` of the same basis): they are the blow-up's, and go with
    its fix."""
    b = basis(w.profile)
    less = sum(o.evidence.copies_share() for o in w.others
               if o is not w.finding and o.evidence.basis == b.name) * b.total_us
    return savings.work_removed(w, less_us=less / max(w.steps, 1))


@dataclass(kw_only=True)
class CopyHeavy(Evidence):
    basis: str
    share: float  # the copies' share of the basis
    threshold: float
    op: str  # the largest copy operator (op_evidence)
    op_share: float
    op_time_us: float
    calls: int
    mem_per_call_b: int
    kinds: list[str]  # "transfer", "copyslices", "layout"
    pageable: bool  # transfers from pageable memory


_SAYS_COPY_HEAVY = {
    "pageable": when("from_pageable_memory", lambda v: of(CopyHeavy)(v).pageable),
    "slice_assignment": when("slice_assignment_cause",
                             lambda v: "copyslices" in of(CopyHeavy)(v).kinds),
    "transfer": when("transfer_cause", lambda v: "transfer" in of(CopyHeavy)(v).kinds),
    "layout_copies": when("layout_copies_cause", lambda v: "layout" in of(CopyHeavy)(v).kinds),
}


@rule("copy-heavy", says=_SAYS_COPY_HEAVY, evidence=CopyHeavy,
      saving=_copies_saving, share=0.20, high=0.40)
def copy_heavy(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Copies hold a large share: say whether transfers, layout copies or CopySlices."""
    b, ops, total = ranked(profile, COPIES)
    if not ops or total <= limits["share"]:
        return None
    names = {o.name: o for o in profile.ops}
    kinds = []
    memcpy = [o for o in profile.ops if o.name.startswith("Memcpy") and ("HtoD" in o.name
                                                                          or "DtoH" in o.name)]
    to_total = max((o.cpu_total_us for o in profile.ops if o.name == "aten::to"), default=0.0)
    copy_total = max((o.cpu_total_us for o in ops if o.name == "aten::copy_"), default=0.0)
    if memcpy or (copy_total > 0 and to_total >= 0.5 * copy_total):
        kinds.append("transfer")
    if any("CopySlices" in o.name for o in profile.ops):
        kinds.append("copyslices")
    if any(n in names for n in LAYOUT):
        kinds.append("layout")
    pageable = any("Pageable" in o.name for o in memcpy)
    return Finding("copy-heavy", severity(total, limits["high"]),
                   CopyHeavy(basis=b.name, share=total, threshold=limits["share"],
                             **op_evidence(ops[0], b), kinds=kinds or ["layout"],
                             pageable=pageable),
                   ops=[o.name for o in ops[:2]])


@dataclass(kw_only=True)
class HostCopyBlocked(Evidence):
    basis: str  # "cpu"
    share: float  # the copy calls' share of the CPU time
    threshold: float
    op: str  # the call the host is blocked in longest
    op_time_us: float
    calls: int
    mean_call_us: float


@rule("host-copy-blocked", evidence=HostCopyBlocked,
      saving=savings.waited("idle_sync", owned=idle_sync_part(of_copies=True)),
      symptom=savings.device_kept_busy, share=0.10, high=0.30)
def host_copy_blocked(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The host is blocked in copy calls a share of CPU time (pageable memory, implicit
    synchronisation)."""
    if not profile.has_device or profile.self_cpu_us <= 0:
        return None
    rows, total = host_calls(profile, COPY_CALLS)
    if not rows or total <= limits["share"]:
        return None
    top = rows[0]
    return Finding("host-copy-blocked", severity(total, limits["high"]),
                   HostCopyBlocked(basis="cpu", share=total, threshold=limits["share"],
                                   op=top.name, op_time_us=top.self_cpu_us, calls=top.calls,
                                   mean_call_us=top.self_cpu_us / top.calls
                                   if top.calls else 0.0),
                   ops=[o.name for o in rows])


def _copy_link_saving(w: Worth) -> Saving:
    """The copies at their link's peak: their time less bytes over the peak (at most);
    at least that part of the time the copies of this direction left the device idle
    otherwise (the breakdown's copy time not hidden behind other device work)."""
    ev = w.finding.evidence
    if not isinstance(ev, SlowCopies):
        return w.unquantified()
    accounted = ev.op_time_us  # per step, from the breakdown's copies
    if not accounted or not ev.peak_share:
        return w.unquantified()
    slower = 1 - min(1.0, float(ev.peak_share))
    b = w.profile.breakdown
    exposed = (b.mean(b.device_us.get("copy_" + str(ev.direction), []))
               if b is not None else 0.0)
    high = accounted * slower
    low = min(accounted, exposed) * slower
    return Saving(accounted, high, low, high, w.step_us)


@dataclass(kw_only=True)
class SlowCopies(Evidence):
    basis: str  # "step"
    share: float  # the copies' time per step over the mean step
    threshold: float
    op: str  # the copies' name in the trace
    op_time_us: float  # per step
    calls: int  # copies
    direction: str  # "h2d" or "d2h"
    kind: str  # "pageable", "pinned"...
    pageable: bool
    small: bool  # a mean copy under the rule's small_b
    mean_copy_b: float
    achieved_gbps: float
    peak_gbps: float  # the link's
    peak_share: float  # achieved over peak
    below_share: float  # the rule's limit on peak_share
    link: str  # the link's name


_SAYS_SLOW_COPIES = {
    # the copies counted over the profiled steps, their time per step (C-I of the last
    # native read: "150 copies ... take 11.1 ms per step" over 6 steps)
    "steps": OVER_STEPS,
    "direction": either("host_to_device", "device_to_host",
                        lambda v: of(SlowCopies)(v).direction == "h2d"),
    # a mean copy of 1 KiB or more (less is not said: report_view)
    "mean": when("mean_copy", lambda v: of(SlowCopies)(v).mean_copy_b >= 1024),
    "why": first(("staged_from_pageable", lambda v: of(SlowCopies)(v).pageable),
                 ("small_copies", lambda v: of(SlowCopies)(v).small)),
    "advice": first(
        ("pin_memory", lambda v: of(SlowCopies)(v).pageable),
        ("fewer_larger_copies", lambda v: of(SlowCopies)(v).small),
        ("check_the_link", always),
    ),
}


# A copy between host and device far below its link: pinned copies reach 75-85% of the
# PCIe link's peak on an idle link, pageable ones (staged by the driver through a pinned
# buffer) about half; under ``ratio`` of it, something else holds the copies back (pageable
# memory, many small copies, a shared or narrower link).
@rule("slow-copies", says=_SAYS_SLOW_COPIES, evidence=SlowCopies,
      saving=_copy_link_saving, ratio=0.50, share=0.05, small_b=1 << 20)
def slow_copies(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Copies between host and device run far below their link's peak and take a share
    of the step (analyze.breakdown.copy_statistics)."""
    b = profile.breakdown
    if b is None or not b.copies or not b.steps_us:
        return None
    n, step = len(b.steps_us), b.mean(b.steps_us)
    slow = [r for r in b.copies if r["direction"] in ("h2d", "d2h") and r.get("peak_share")
            is not None and r["peak_share"] < limits["ratio"]
            and step > 0 and r["time_us"] / n / step > limits["share"]]
    if not slow:
        return None
    top = max(slow, key=lambda r: r["time_us"])
    per_step = top["time_us"] / n
    mean_b = top["bytes"] / top["copies"] if top["copies"] else 0.0
    return Finding("slow-copies", "high" if per_step / step >= 2 * limits["share"] else "medium",
                   SlowCopies(basis="step", share=per_step / step, threshold=limits["share"],
                              op=top["name"], op_time_us=per_step, calls=int(top["copies"]),
                              direction=top["direction"], kind=top["kind"],
                              pageable=top["kind"] == "pageable",
                              small=mean_b < limits["small_b"], mean_copy_b=mean_b,
                              achieved_gbps=float(top["gbps"]),
                              peak_gbps=float(top["peak_gbps"]),
                              peak_share=float(top["peak_share"]), below_share=limits["ratio"],
                              link=top["link"]), ops=[top["name"]])
