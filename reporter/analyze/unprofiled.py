"""What the profiler adds to the time it records, which an estimate takes off: its own cost
per recorded call (``profiler_call_us``), and the page faults it adds to the operators that
write fresh memory (``writers``, ``fault_share``, ``first_touch_us``), taken together in
``unprofiled_factor``."""

from __future__ import annotations

from typing import Any, Sequence

from ..model.finding import Finding
from ..model.profile import KIND_ANNOTATION, KIND_OP, Profile
from .efficiency import Efficiency
from .findings import RULES, step_wall_us


def _steps(profile: Profile) -> tuple[int, float]:
    """(profiled steps, mean step in us)."""
    b = profile.breakdown
    if b is not None and b.steps_us:
        return len(b.steps_us), b.mean(b.steps_us)
    n = max(profile.steps, 1)
    return n, step_wall_us(profile) / n


def finding_ops(f: Finding) -> set[str]:
    """The operators a finding's time is of: its ``ops`` and the ``materialisers`` of its
    evidence (a blow-up's copies)."""
    return {*f.ops, *f.evidence.fresh_ops()}


def profiler_call_us(profile: Profile, step_us: float, real_step_us: float) -> float:
    """The profiler's own cost per recorded call: the profiled step less the step timed
    without it, over the calls a profiled step records (each operator, autograd node and
    mark is one record, with its shapes and allocations); 0 when the profiled step is not
    the longer."""
    records = _records_per_step(profile)
    if records <= 0 or step_us <= real_step_us:
        return 0.0
    return (step_us - real_step_us) / records


# What one page fault maps, where the run did not measure it (x86-64 Linux, most arm64).
PAGE_B = 4096

# Operators whose time is mostly writing fresh memory on the CPU: filling, zeroing and
# allocating (first touch), and the copies, which write into a new tensor. The profiler's
# own buffers and records change what the allocator hands out, and the page faults it
# adds land in these operators' time (reporter.analyze.analyzer.profiler_distortion).
FIRST_TOUCH = {"aten::fill_", "aten::zero_", "aten::zeros", "aten::zeros_like",
               "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::ones",
               "aten::ones_like", "aten::full", "aten::full_like", "aten::new_zeros",
               "aten::new_empty", "aten::new_full"}
COPY_OPS = {"aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone"}
WRITERS = FIRST_TOUCH | COPY_OPS
# An operator that allocates this much a call or more writes fresh memory as a copy does:
# its output, a block at glibc's default mmap threshold or above. transformer-bloat's
# multiplies (4 MiB each) read 32.6 ms of a profiled step of 87.5 ms, whose steps take
# 24.4 ms without the profiler, which added 4,868 page faults a step to them (none
# without it, 2026-12-01); they were not counted among the writers by name, and its
# blow-up was predicted to save 88-91% of the step against 72-73% saved by its twin.
FRESH_B = 128 << 10


def writers(profile: Profile) -> set[str]:
    """The operators of ``profile`` that write fresh memory: the fills, allocations and
    copies (``WRITERS``) and any operator that allocates ``FRESH_B`` or more a call (its
    own output, recorded with the profile's memory)."""
    return WRITERS | {o.name for o in profile.ops if o.kind == KIND_OP and o.calls > 0
                      and o.self_cpu_mem_b >= FRESH_B * o.calls}


def _records_per_step(profile: Profile) -> float:
    n, _ = _steps(profile)
    return sum(o.calls for o in profile.ops if o.kind in (KIND_OP, KIND_ANNOTATION)
               and not o.name.startswith("ProfilerStep")) / max(n, 1)


def unprofiled_factor(f: Finding, profile: Profile, step_us: float,
                      real_step_us: float, eff: Efficiency | str | None = None) -> float:
    """What a CPU finding's profiled time is without the profiler, as a factor of it.

    The profiler's cost is per recorded call (``profiler_call_us``: about 1-6 us a call
    on the development machine, one thread), not per microsecond: a blow-up's few long
    multiplies keep their time, a loop of short calls loses much of its. So each of the
    finding's operator rows (its ``ops`` and the ``materialisers`` of its evidence) loses
    its calls' cost, at most down to the step's own ratio (the unprofiled step over the
    profiled one, the floor when the profiler's cost were spread evenly), and the
    finding's time falls by their weighted factor. Without such rows, or when the
    profiled step is not the longer, the step's own ratio.

    A finding of operators that write fresh memory (``writers``: copies, fills,
    allocations, large outputs), where the profiler added page faults (``first_touch`` in
    its evidence: reporter.analyze.analyzer.profiler_distortion) and the runner measured
    the profiler's cost per call (``profiler_call_us``): the profiled step's excess is
    told apart into the measured cost of every record, and the rest, the first touch of
    the fresh memory the profiler's own growth hands out, which lands in the operators
    that write it: that rest is taken off the writers in proportion to their time
    (seq2seq's copies read 1.03 s of a 1.16 s profiled step whose steps take 0.12 s
    without the profiler; timed alone without it, 36 ms of a 77 ms step). Down to no less
    than what the operators take without the profiler at the least (``unprofiled_floor``):
    the rest is the whole excess only where the profiler slows the other operators by no
    more than its measured cost per call, and it slowed seq2seq's by 3-8 us a call, not
    the 0.8 us measured on a small ``torch.add`` (2026-11-27), so that the copies were
    left 17 ms of a 80 ms step while the page faults measured without the profiler alone
    were 28 ms of theirs, and removing the copies saved 32 ms.

    Any other finding, in such a profile: the step's ratio and the cost per call are of
    the profiled step less that first touch (``first_touch_us``), which is not in its
    operators: seq2seq's per-time-step loop kept 19% of its profiled time by the whole
    step's ratio, 77% by the rest's."""
    names = finding_ops(f)
    rows = [o for o in profile.ops if o.kind == KIND_OP and o.name in names
            and o.self_cpu_us > 0]
    own = sum(o.self_cpu_us for o in rows)
    measured = f.evidence.profiler_call_us
    if f.evidence.first_touch:
        if real_step_us < step_us and own > 0 and isinstance(measured, (int, float)) \
                and measured > 0:
            factor = _faulted_factor(rows, own, profile, step_us, real_step_us,
                                     float(measured))
            n, _ = _steps(profile)
            return min(1.0, max(factor, unprofiled_floor(names, profile, eff) * n / own))
    elif not f.evidence.unprofiled:  # (a share of the unprofiled step already)
        # the profiler slowed any other operator by its cost per call only: the first
        # touch it added is the writers' (first_touch_us)
        step_us -= first_touch_us(profile)
    k = real_step_us / step_us if step_us > 0 else 1.0
    if k >= 1 or own <= 0:
        return k
    per_call = profiler_call_us(profile, step_us, real_step_us)
    if per_call <= 0:
        return k
    kept = sum(max(o.self_cpu_us - o.calls * per_call, o.self_cpu_us * k) for o in rows)
    return min(1.0, kept / own)


def fault_share(profile: Profile, names: set[str], extra_b: float = 0.0,
                freed: set[str] | None = None) -> float:
    """The share of the host's page faults that land in the operators ``names``: a fault
    lands in the operator that first writes the fresh page. Where the profile recorded
    memory, pages are shared by the bytes allocated: an operator that allocates its own
    output (a product, a softmax: its self memory) writes it first; what the allocation
    operators hand out (``FIRST_TOUCH``: empty, zeros...) the operators that write fresh
    memory (``WRITERS``: copies, fills) write first, and those are shared by their time.
    ``extra_b``: bytes ``names`` cannot tell apart, allocated by the finding's operators
    too (an attention's scaling of its scores, told by shape). Without recorded memory,
    by the writers' time alone; 0 without any writer either.

    ``freed``: operators among them whose tensors a fix no longer makes (Rule.frees). The
    faults are the step mapping again what the allocator gave back since the last one
    (glibc trims its heap, unmaps its large blocks): memory up to the step's peak, which
    those tensors' bytes at the peak (Profile.peak_live_b) come off, their pages with
    them. So the share is at least those pages of the step's faults (transformer in
    training, 2026-11-27: its softmaxes held 7.1 MB of a 34.8 MB peak, 1,729 pages of
    2,018 faults a step; the fused twin took 78% fewer faults, where the bytes the
    attention allocates gave it 30-45%)."""
    writers = {o.name: o.self_cpu_us for o in profile.ops
               if o.kind == KIND_OP and o.name in WRITERS and o.self_cpu_us > 0}
    total_us = sum(writers.values())
    by_time = sum(t for n, t in writers.items() if n in names) / total_us if total_us else 0.0
    allocated: dict[str, float] = {}
    for o in profile.ops:
        if o.kind == KIND_OP and o.self_cpu_mem_b > 0:
            allocated[o.name] = allocated.get(o.name, 0.0) + o.self_cpu_mem_b
    total_b = sum(allocated.values())
    if total_b <= 0:
        share = by_time
    else:
        handed = sum(b for n, b in allocated.items() if n in FIRST_TOUCH)
        own = sum(b for n, b in allocated.items() if n in names and n not in FIRST_TOUCH)
        share = min(1.0, (own + extra_b + handed * by_time) / total_b)
    h, peak = profile.host_faults, profile.peak_live_b
    if freed and peak and h and h.get("faults", 0.0) > 0:
        pages = sum(peak.get(n, 0) for n in freed) / float(h.get("page_b") or PAGE_B)
        share = max(share, min(1.0, pages / h["faults"]))
    return share


def faults_us(profile: Profile, share: float) -> float:
    """Per step, the time of ``share`` of the page faults a step without the profiler took,
    at the measured cost of one (Profile.host_faults); 0 where they were not measured."""
    h = profile.host_faults
    return float(h["faults"] * h["fault_us"] * share) if h else 0.0


def freed_ops(f: Finding) -> set[str]:
    """The operators whose tensors the finding's fix no longer makes (Rule.frees): its
    ``finding_ops``, or none."""
    r = RULES.get(f.rule)
    return finding_ops(f) if r is not None and r.frees else set()


def owned_fault_share(profile: Profile, findings: Sequence[Finding]) -> float:
    """``fault_share`` of what the fixes of ``findings`` take with them: their operators
    (``finding_ops``), the bytes their evidence's ``scale_b`` adds, and, where a fix frees
    its tensors, what they hold at the peak (``freed_ops``)."""
    return fault_share(profile, {n for f in findings for n in finding_ops(f)},
                       sum(f.evidence.freed_b() for f in findings),
                       {n for f in findings for n in freed_ops(f)})


def unprofiled_floor(names: set[str], profile: Profile, eff: Efficiency | str | None) -> float:
    """What the operators ``names`` take per step without the profiler at the least: their
    roofline time (reporter.analyze.efficiency: their bytes at the measured bandwidth,
    their FLOPs at the peak), and their part (``fault_share``) of the page faults a step
    took without the profiler at the measured cost of one (Profile.host_faults), which no
    roofline counts; 0 for what was not measured."""
    roof = sum(o.roof_us for o in eff.ops if o.name in names) \
        if eff is not None and not isinstance(eff, str) else 0.0
    return float(roof) + faults_us(profile, fault_share(profile, names))


def first_touch_us(profile: Profile) -> float:
    """Per step, the profiled time that is the first touch of the fresh memory the
    profiler's own growth hands out (the page faults it adds land in the operators that
    write fresh memory, ``writers``): where the runner measured that the profiler added faults
    (Profile.host_faults ``added_faults``), the writers' time beyond the least they take
    without it (``unprofiled_floor``), at most the profiled step's excess over the step
    timed without the profiler less the measured cost of its records; else 0. The rest of
    the profiled step is what the profiler slowed only by its cost per call (seq2seq,
    2026-11-27: 310 ms of a 414 ms profiled step whose steps take 80 ms without it; the
    other 104 ms hold the per-time-step loop's 20 ms)."""
    h = profile.host_faults
    if not h or not h.get("added_faults"):
        return 0.0
    n, step = _steps(profile)
    names = writers(profile)
    written = sum(o.self_cpu_us for o in profile.ops
                  if o.kind == KIND_OP and o.name in names) / n
    excess = step - h["step_us"] - h.get("call_us", 0.0) * _records_per_step(profile)
    return max(0.0, min(written - unprofiled_floor(names, profile, None), excess))


def _faulted_factor(rows: list[Any], own: float, profile: Profile, step_us: float,
                    real_step_us: float, call_us: float) -> float:
    """``unprofiled_factor`` where the profiler added page faults: each row loses its
    calls' measured cost, and a writer of fresh memory its part of the excess the calls do
    not explain (the profiled step less the unprofiled one less every record's cost), by
    its time among the writers'."""
    n, _ = _steps(profile)
    excess = (step_us - real_step_us - call_us * _records_per_step(profile)) * n
    names = writers(profile)
    written = sum(max(0.0, o.self_cpu_us - o.calls * call_us) for o in profile.ops
                  if o.kind == KIND_OP and o.name in names)
    kept = 0.0
    for o in rows:
        t = max(0.0, o.self_cpu_us - o.calls * call_us)
        if excess > 0 and written > 0 and o.name in names:
            t = max(0.0, t - excess * t / written)
        kept += t
    return min(1.0, kept / own)
