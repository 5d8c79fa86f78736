"""Rules about several ranks: a straggler rank, collectives that bound the step."""

from __future__ import annotations

from dataclasses import dataclass

from ...model.choice import Values, OVER_STEPS, always, either, first, of
from ...model.finding import Evidence, Finding, opt
from ...model.profile import Profile
from .. import savings
from ..findings import rule, step_share
from ._common import severity


def _cause(v: Values) -> str:
    """What made the straggler's extra time (stragglers.of_traces: compute, host, ...)."""
    return of(StragglerRank)(v).cause


def _on_host(v: Values) -> bool:
    """The ranks ran on the CPU (gloo): no device time to split."""
    return of(StragglerRank)(v).device is False


_SAYS_STRAGGLER_RANK = {
    "others": either("the_other_rank", "the_other_ranks",
                     lambda v: of(StragglerRank)(v).ranks == 2),
    "others_wait": either(
        "the_other_rank_waits", "the_other_ranks_wait",
        lambda v: of(StragglerRank)(v).ranks == 2
    ),
    # two ranks: the other one's step, not "the others' median" (review C-E)
    "reference": either("than_the_other_rank", "than_the_others_median",
                        lambda v: of(StragglerRank)(v).ranks == 2),
    "cause": either("host_cause", "device_cause", _on_host),
    "advice": first(
        ("balance_host_work", lambda v: _on_host(v) and _cause(v) == "compute"),
        ("faster_data_loading", lambda v: _on_host(v) and _cause(v) == "host"),
        ("network_waits", _on_host),
        ("balance_device_work", lambda v: _cause(v) == "compute"),
        ("host_not_launching", lambda v: _cause(v) == "host"),
        ("device_waits", always),
    ),
}


@dataclass(kw_only=True)
class StragglerRank(Evidence):
    basis: str  # "step"
    share: float  # the slowest rank's extra time, of its step
    threshold: float
    rank: str  # the slowest rank
    ranks: int
    cause: str  # what most of its extra time is (stragglers.CAUSES)
    device: bool  # the ranks ran on a device (else on the CPU: gloo)
    op_time_us: float  # its extra time a step
    saving_us: float  # the same: what the others wait for it
    slowest_step_us: float
    reference_step_us: float  # the others' median step (the other rank's, of two)
    # its extra time by cause (stragglers.CAUSES)
    compute_us: float | None = opt()
    communication_us: float | None = opt()
    host_us: float | None = opt()
    waiting_us: float | None = opt()
    calls: int  # 0


_CAUSES = ("compute", "communication", "host", "waiting")


@rule("straggler-rank", says=_SAYS_STRAGGLER_RANK, evidence=StragglerRank,
      saving=savings.stated, share=0.05, high=0.20)
def straggler_rank(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One rank's step is longer than the others' by more than ``share``: in every
    collective the others wait for it (analyze.stragglers)."""
    s = profile.stragglers
    if not s or s["extra_share"] <= limits["share"]:
        return None
    by = s["extra_by_cause_us"]
    return Finding("straggler-rank", severity(s["extra_share"], limits["high"]),
                   StragglerRank(basis="step", share=s["extra_share"], threshold=limits["share"],
                                 rank=str(s["slowest"]).replace("rank ", ""),
                                 ranks=len(s["ranks"]), cause=s["cause"],
                                 device=bool(s.get("device", True)), op_time_us=s["extra_us"],
                                 saving_us=s["extra_us"], slowest_step_us=s["slowest_step_us"],
                                 reference_step_us=s["reference_step_us"],
                                 compute_us=by.get("compute"),
                                 communication_us=by.get("communication"),
                                 host_us=by.get("host"), waiting_us=by.get("waiting"),
                                 calls=0,
                                 extra={f"{c}_us": us for c, us in by.items() if c not in _CAUSES}))


_SAYS_COMMUNICATION_BOUND = {"steps": OVER_STEPS}


@dataclass(kw_only=True)
class CommunicationBound(Evidence):
    basis: str  # "step"
    share: float  # the collectives' share of the profiled steps
    threshold: float
    op_time_us: float  # the collectives' time
    step_us: float
    overlap_share: float  # of it, hidden behind compute
    exposed_us: float  # the rest
    calls: int  # 0


@rule("communication-bound", says=_SAYS_COMMUNICATION_BOUND, evidence=CommunicationBound,
      saving=savings.waited("communication"), share=0.10,
      high=0.30)
def communication_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Collectives (all-reduce, all-gather, ...) take a large share of the step."""
    if not profile.comm_us:
        return None
    s, wall = step_share(profile, profile.comm_us)
    if s <= limits["share"]:
        return None
    overlap = (profile.comm_overlap_us or 0.0) / profile.comm_us
    return Finding("communication-bound", severity(s, limits["high"]),
                   CommunicationBound(basis="step", share=s, threshold=limits["share"],
                                      op_time_us=profile.comm_us, step_us=wall,
                                      overlap_share=overlap,
                                      exposed_us=profile.comm_us - (profile.comm_overlap_us
                                                                    or 0.0),
                                      calls=0))


# nn.DataParallel's autograd functions (torch/nn/parallel/_functions.py), recorded by their
# class names: each step it copies the parameters to every GPU (Broadcast), splits the
# batch (Scatter), collects the outputs (Gather), and in the backward sums the gradients
# onto the first GPU (ReduceAddCoalesced, inside BroadcastBackward); the backward's
# Scatter and Gather run inside GatherBackward and ScatterBackward, under the same names.
DATA_PARALLEL = ("Broadcast", "Scatter", "Gather", "ReduceAddCoalesced")


@dataclass(kw_only=True)
class DataParallel(Evidence):
    basis: str  # "step"
    share: float  # nn.DataParallel's copies, of the profiled steps
    threshold: float
    op: str  # the largest of its functions
    op_time_us: float
    step_us: float
    calls: int


@rule("data-parallel", says={"steps": OVER_STEPS}, evidence=DataParallel,
      saving=savings.unquantified, share=0.10, high=0.30)
def data_parallel(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """nn.DataParallel's per-step copies (its Broadcast, Scatter, Gather and
    ReduceAddCoalesced functions, inclusive host time, each call once: the backward's
    nodes call them under the same names) take over ``share`` of the step. One process
    drives every GPU from one Python thread; DistributedDataParallel runs one process per
    GPU, keeps a replica on each, and all-reduces the gradients during the backward. What
    DDP saves is not in this profile (its own all-reduce stays): unquantified."""
    rows = sorted((o for o in profile.ops if o.kind == "op" and o.name in DATA_PARALLEL
                   and o.cpu_total_us > 0), key=lambda o: o.cpu_total_us, reverse=True)
    if not rows:
        return None
    time_us = sum(o.cpu_total_us for o in rows)
    s, wall = step_share(profile, time_us)
    if s <= limits["share"]:
        return None
    return Finding("data-parallel", severity(s, limits["high"]),
                   DataParallel(basis="step", share=min(s, 1.0), threshold=limits["share"],
                                op=rows[0].name, op_time_us=time_us, step_us=wall,
                                calls=sum(o.calls for o in rows)),
                   ops=[o.name for o in rows])
