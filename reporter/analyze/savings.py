"""What each finding is worth: the time it accounts for and what its fix would save.

A pure function of a finding, its profile, and the profile's efficiency
(reporter.analyze.efficiency). Each rule names its saving model where it is registered
(reporter.analyze.findings.Rule); this module holds the models rules share and the
machinery every estimate goes through. Times are per step, in microseconds; shares are of
the step timed without the profiler when the run was timed on a quiet machine, else of
the profiled step (see ``estimate``). Each estimate says how it is made:

- the work goes away (element-wise blow-up, copies, CPU-side padding, unfused
  attention): all of their time, at least the time beyond the operators'
  roofline (they would run at it); a blow-up's time includes the operators that
  materialise it (``aten::repeat`` and the copies inside it), which a copy
  finding beside it then leaves out; fused attention keeps the products' FLOPs,
  at their roofline;
- the work stays but runs better (one dominant operator): the time beyond its
  roofline;
- waiting that is not overlapped (DataLoader, synchronisations, copies that block
  the host, communication, an idle device): the waits the step breakdown
  measured, per step, lowest to highest step; the device's idle time in
  synchronisations is shared between copies and synchronisations proper by the
  host's time in each; synchronisations count only while the device idled;
- fp32 matrix work with a faster dtype at hand: its time x (1 - the fp32 peak /
  the faster peak), TF32 at the low end and bf16 at the high end;
- a replacement timed on the device (reporter.collect.whatif): what it measured;
- no estimate where the profile cannot give one (memory pressure is about
  memory; a table has no timeline): ``note`` says so, and no number is shown.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from ..model.finding import (
    IN_OTHERS,
    MINOR_SHARE,
    NO_ROOM,
    NOT_FASTER,
    NOT_QUANTIFIABLE,
    UP_TO,
    UP_TO_PEAKS,
    BOUNDS,
    Finding,
    Saving,
)
from ..model.profile import Breakdown, Profile
from .efficiency import Efficiency
from .findings import RULES, Worth, step_wall_us
from .unprofiled import (
    COPY_OPS,
    FIRST_TOUCH,
    FRESH_B,
    PAGE_B,
    WRITERS,
    _steps,
    fault_share,
    faults_us,
    finding_ops,
    first_touch_us,
    freed_ops,
    owned_fault_share,
    profiler_call_us,
    unprofiled_factor,
    unprofiled_floor,
    writers,
)

__all__ = ["MINOR_SHARE", "NOT_FASTER", "NOT_QUANTIFIABLE", "Saving", "Worth", "BUSY",
           "beyond_roof", "beyond_roofline", "device_kept_busy", "estimate", "faster_dtype",
           "COPY_OPS", "FIRST_TOUCH", "FRESH_B", "PAGE_B", "WRITERS", "fault_share", "faults_us",
           "freed_ops", "owned_fault_share",
           "finding_ops", "first_touch_us", "kept_us", "matrix_roof", "profiler_call_us", "ranked",
           "removed", "stated", "unprofiled_factor", "unprofiled_floor", "unquantified",
           "upper_bound", "peaks_bound", "UP_TO", "UP_TO_PEAKS", "BOUNDS",
           "VARIED", "varied", "waited", "work_removed", "writers"]

# The device's idle time in the step breakdown, by what the host did meanwhile.
IDLE = ("idle_data", "idle_sync", "idle_latency", "idle_queued", "idle_host")


def _accounted(f: Finding, profile: Profile, n: int, step: float) -> float | None:
    """The finding's time per step, from its share of its basis; at most the step."""
    share, basis = f.evidence.share, f.evidence.basis
    # a share of the step less the page faults the profiler added (per-sample-loop)
    added = f.evidence.profiler_faults_us() if basis == "step" else None
    total = {"device": profile.self_device_us, "cpu": profile.self_cpu_us,
             "step": step_wall_us(profile) - (float(added) if added else 0.0)}.get(str(basis))
    if share is None or total is None:
        return None
    per_step = float(share) * total / n
    return min(per_step, step) if step else per_step


def beyond_roof(names: list[str], time_us: float, eff: Efficiency | str | None) -> float | None:
    """The part of ``time_us`` the operators ``names`` spend beyond their roofline (their
    mean roofline share, weighted by time), or None without efficiency for them."""
    if eff is None or isinstance(eff, str):
        return None
    rows = [o for o in eff.ops if o.name in names and o.time_us > 0]
    if not rows:
        return None
    share = sum(min(1.0, o.roofline_share) * o.time_us for o in rows) / sum(
        o.time_us for o in rows)
    return float(time_us * (1 - share))


def matrix_roof(names: list[str], eff: Efficiency | str | None) -> float:
    """Per step, the roofline time of the matrix products among ``names``."""
    if eff is None or isinstance(eff, str):
        return 0.0
    return float(sum(o.roof_us for o in eff.ops if o.name in names and o.matrix))


def _host_basis(f: Finding) -> bool:
    """Whether the finding's share is of host time (CPU time or the profiled step)."""
    return f.evidence.basis in ("cpu", "step")


# The shared saving models ---------------------------------------------------

def unquantified(w: Worth) -> Saving:
    """No estimate: the profile cannot give one (memory pressure is about memory; a
    launch's cost is not in a table's numbers)."""
    return w.unquantified()


def upper_bound(w: Worth) -> Saving:
    """No saving can be told, only what the fix is worth at most: the time the finding
    accounts for (``high_us``, note ``UP_TO``). The report says "up to", never a saving;
    the ranking weighs it as an unpriced cost (``_rank_key``). On the CPU, ``estimate``
    brings it to the step timed without the profiler by the larger of the finding's own
    factor and the two steps' ratio: the profiler's cost per call, taken off, can
    understate an operator with long calls, which is no upper bound (a growing
    torch.cat: 67% of the step by its factor, 85% as profiled; its fix saved 89%)."""
    if w.accounts_us is None:
        return w.unquantified()
    return Saving(w.accounts_us, None, None, w.accounts_us, w.step_us, UP_TO,
                  host_saving=_host_basis(w.finding))


def work_removed(w: Worth, less_us: float = 0.0, keep_us: float = 0.0) -> Saving:
    """The work goes away: all of its time, at least the time beyond the operators'
    roofline (they would run at it). ``less_us``: time another finding owns (a blow-up's
    copies, for the copy finding beside it); ``keep_us``: work the fix keeps (fused
    attention keeps the products, at their roofline)."""
    if w.accounts_us is None:
        return w.unquantified()
    low = beyond_roof(w.finding.ops, w.accounts_us, w.eff)
    accounted = max(0.0, w.accounts_us - less_us)
    low = min(low if low is not None else 0.0, accounted)
    saving = max(low, accounted - keep_us) if keep_us else accounted
    # all of it another finding's: a bare "0" in the minor list read as a fix worth nothing
    # (transformer-bloat's copies, all the blow-up's, 2026-11-29: "(0, 0.0%)")
    owned = less_us > 0 and accounted <= 0
    return Saving(accounted, saving, low, accounted, w.step_us,
                  IN_OTHERS if owned else None, host_saving=_host_basis(w.finding))


def removed(w: Worth) -> Saving:
    """The work goes away (see ``work_removed``)."""
    return work_removed(w)


def beyond_roofline(w: Worth) -> Saving:
    """The work stays but runs better: the time beyond its roofline."""
    beyond = beyond_roof(w.finding.ops, w.accounts_us or 0.0, w.eff)
    if not w.accounts_us or beyond is None:
        return w.unquantified()
    return Saving(w.accounts_us, beyond, beyond / 2, beyond, w.step_us,
                  host_saving=_host_basis(w.finding))


def stated(w: Worth) -> Saving:
    """The finding's evidence holds its saving per step already (``saving_us``)."""
    saving = w.finding.evidence.saving_us
    if saving is None:
        return w.unquantified()
    return Saving(w.accounts_us, saving, saving, saving, w.step_us)


def peaks_bound(w: Worth) -> Saving:
    """The evidence holds the most its fix could save per step (``saving_us``, from the
    peaks' ratio): the worth is "up to" that (``high_us``, note ``UP_TO_PEAKS``), an upper
    bound and never a saving, until the runner times the fix."""
    bound = w.finding.evidence.saving_us
    if bound is None:
        return w.unquantified()
    return Saving(w.accounts_us, None, None, bound, w.step_us, UP_TO_PEAKS)


def faster_dtype(w: Worth) -> Saving:
    """fp32 matrix work with a faster dtype at hand: its time x (1 - the fp32 peak / the
    faster peak), TF32 at the low end and bf16 at the high end: an upper bound."""
    eff, accounted = w.eff, w.accounts_us
    if eff is None or isinstance(eff, str) or not accounted:
        return w.unquantified()
    peaks = eff.peaks.flops
    fp32 = peaks.get("fp32")
    faster = [peaks[k] for k in ("tf32", "bf16") if k in peaks]
    if not fp32 or not faster:
        return w.unquantified()
    low, high = (accounted * (1 - fp32 / v) for v in (min(faster), max(faster)))
    # the peaks' ratio: the most a faster dtype could save, until the runner times it
    # (whatif.gemm_precision at the recorded shapes)
    return Saving(accounted, None, low, high, w.step_us, UP_TO_PEAKS)


def _per_step(values: list[float]) -> tuple[float, float, float]:
    return sum(values) / len(values), min(values), max(values)


def _unprofiled_idle(b: Breakdown | None, step: float, real_step_us: float | None) -> float | None:
    """The device's idle time per step without the profiler, at most: the step timed
    without it less the device's busy time under it (its kernels are not slowed by the
    profiler's host-side work); None without both."""
    if not real_step_us or b is None or not b.device_us or not step:
        return None
    idle = float(sum(b.mean(b.device_us.get(k, [])) for k in IDLE))
    return max(0.0, real_step_us - (step - idle))


def waited(key: str, host_key: str | None = None,
           owned: Callable[[Profile], float] | None = None) -> Callable[[Worth], Saving]:
    """Waiting that is not overlapped: the waits the step breakdown measured under
    ``key`` of the device's time (or, in a breakdown without device time, ``host_key`` of
    the host's), per step, lowest to highest step. ``owned``: the part of those waits the
    finding owns, when two findings share them (the device's idle time in
    synchronisations, say). An idle time is bounded by the step timed without the
    profiler."""
    def model(w: Worth) -> Saving:
        b = w.profile.breakdown
        if b is not None and b.device_us:
            part, k = "device_us", key
        elif host_key is not None:
            part, k = "host_us", host_key
        else:
            part, k = "device_us", key
        values = getattr(b, part).get(k) if b is not None else None
        if not values:
            return w.unquantified()
        mean, low, high = _per_step(values)
        part_of = owned(w.profile) if owned is not None else 1.0
        mean, low, high = (v * part_of for v in (mean, low, high))
        ceiling = _unprofiled_idle(b, w.step_us, w.real_step_us) if k in IDLE else None
        if ceiling is not None and ceiling < high:
            mean, low, high = (min(v, ceiling) for v in (mean, low, high))
            return Saving(w.accounts_us, mean, low, high, w.step_us,
                          unprofiled_step_us=w.real_step_us)
        return Saving(w.accounts_us, mean, low, high, w.step_us, host_saving=part == "host_us")
    model.__doc__ = f"Waiting in {key} of the step breakdown (see savings.waited)."
    return model


def idle_left() -> Callable[[Worth], Saving]:
    """An idle device's waiting (``waited("idle_host")``: the device idles, the host has
    not queued work) less the host work that another finding accounts for (a rule registered
    with ``host_work``)
    per step: the device idles while the host runs a per-sample loop, pads a batch or
    launches kernels, and that finding's fix takes the host work, and the idle time with
    it, away (the DataLoader's wait is idle time of its own, idle_data); counted
    twice, seq2seq on an H200 (2026-11-29) read its loop at 53.0% of the step and the idle
    GPU at 47.0% beside it, and a per-sample MLP read the idle GPU first (93.9%, with
    advice about the DataLoader) and the loop second. The largest such finding's time is
    taken off, not their sum: a loop's time holds its kernel launches. Profiled host time,
    brought to the step timed without the profiler where that bounded the idle time."""
    def model(w: Worth) -> Saving:
        # What the finding accounts for is the idle time, which the saving is; the share
        # it was found by is the device's busy time, which no fix removes ("about 19.6 ms
        # per step; it accounts for 1.19 ms" read as a contradiction)
        s = replace(waited("idle_host")(w), accounts_us=None)
        named = max((float(o.evidence.op_time_us or 0.0) for o in w.others
                     if o.rule in RULES and RULES[o.rule].host_work), default=0.0) / max(w.steps, 1)
        if s.saving_us is None or named <= 0:
            return s
        if s.unprofiled_step_us and w.step_us:
            named *= s.unprofiled_step_us / w.step_us
        named = min(named, s.saving_us)

        def left(us: float | None) -> float | None:
            return max(0.0, us - named) if us is not None else None

        return replace(s, saving_us=left(s.saving_us), low_us=left(s.low_us),
                       high_us=left(s.high_us), others_us=named,
                       note=IN_OTHERS if s.saving_us - named <= 0 else s.note)
    model.__doc__ = "An idle device's waiting, less other findings' host work (idle_left)."
    return model


# The machinery ---------------------------------------------------------------

def estimate(f: Finding, profile: Profile, eff: Efficiency | str | None = None,
             others: Sequence[Finding] = (), measured: dict[str, Any] | None = None,
             real_step_us: float | None = None, floor: Efficiency | None = None) -> Saving:
    """What ``f`` is worth, by its rule's saving model; ``others``, the profile's other
    findings, keep two findings from counting the same time; ``measured``, its
    replacement timed on the device (reporter.collect.whatif), replaces the estimate.

    No figure exceeds the step: a trace whose recorded kernels run past its steps (a
    recording that began with earlier steps' kernels still queued, say) would
    otherwise have a finding account for, or save, more than the whole step. A saving
    stops short of it by what the fixed step keeps at the least (``kept_us``): a timed
    replacement's own time (transformer-bloat's blow-up chain, recorded with the page
    faults the profiler added to its multiplies, read 14.0 ms against a 13.4 ms step
    (2026-11-28), and one bench run predicted it saved 100% of the step; the twin saved
    77-83%), or, for a fix that takes no operator away, the operators at their roofline
    (first_touch's page faults read 100% of the step; its twin saves 88-91%). Where
    that leaves nothing of a saving, the note says so (``NO_ROOM``), not a bare 0.

    ``real_step_us``, the step timed without the profiler, bounds what the device's idle
    time can save: the profiler's own work slows the host, not the device, so a step it
    lengthens shows more idle time than there is without it (``_unprofiled_idle``). It is
    also the step every share is of, so that an estimate and a replacement timed without
    the profiler are of one step: profiled host times (on the CPU, every time) are
    brought to it, on the CPU by taking the profiler's per-call cost off the finding's
    operators (``unprofiled_factor``), on a GPU by the two steps' ratio; device times are
    what they are without the profiler; a timed replacement's saving is unprofiled
    already.

    ``floor``: where ``eff`` is not assessed (the machine was busy), the efficiency of the
    peaks calibrated all the same, for what a fix that keeps the work keeps at the least
    (``kept_us``): without it such a fix could save the whole step."""
    s = _estimate(f, profile, eff, others, measured, real_step_us)
    if real_step_us and s.step_us:
        # On the CPU, the profiler's cost is per recorded call: long calls keep their
        # time, short ones lose theirs (see ``unprofiled_factor``)
        k = (unprofiled_factor(f, profile, s.step_us, real_step_us, eff)
             if not profile.has_device else real_step_us / s.step_us)

        def host(us: float | None) -> float | None:
            return us * k if us is not None else None

        # On the CPU every profiled time is host time; on a GPU the device's are not
        # slowed by the profiler. A replacement timed on the device is unprofiled already,
        # unless its recipe applied the speed-up to the recorded times (WhatIf.of_recorded).
        on_host = not profile.has_device
        # an upper bound (upper_bound) is no lower than the profiled share of the step
        ratio = real_step_us / s.step_us if s.note in BOUNDS else k
        scaled = on_host or _host_basis(f)
        s = replace(s, step_us=real_step_us,
                    accounts_us=host(s.accounts_us) if scaled else s.accounts_us,
                    accounts_unprofiled=bool(scaled and s.accounts_us and abs(k - 1) > 0.005))
        if s.host_saving or (on_host and s.measured is None):
            s = replace(s, saving_us=host(s.saving_us), low_us=host(s.low_us),
                        high_us=s.high_us * max(k, ratio) if s.high_us is not None
                        else None)
            if s.measured is not None:  # timed, but applied to the recorded times
                s = replace(s, measured={key: ms * k for key, ms in s.measured.items()})
    s = _within_step(f, s)
    if s.step_us:
        step_us = s.step_us

        def cap(us: float | None, most: float = step_us) -> float | None:
            return min(us, most) if us is not None else None

        most = max(0.0, step_us - kept_us(f, eff if isinstance(eff, Efficiency) else floor,
                                          s))
        left = s.saving_us is not None and s.saving_us > 0 and most <= 0
        s = replace(s, accounts_us=cap(s.accounts_us), saving_us=cap(s.saving_us, most),
                    low_us=cap(s.low_us, most), high_us=cap(s.high_us, most),
                    note=NO_ROOM if left and s.note is None else s.note)
    shown = s.measured.get("saved_share") if s.measured else None
    if s.measured and s.measured.get("step_is_fixed") is True and s.step_us \
            and isinstance(shown, (int, float)) and 0 < shown < 1:
        # The step measured here is the fixed one (the runner's inference_mode): the
        # saving is a share of the step as the user's code runs it, the longer one (an
        # MLP's inference, 2026-12-04: 4.43 ms as the user runs it, 2.22 ms here; "99% of
        # the step" read as if the fix took nearly all of a step it halves)
        s = replace(s, step_us=s.step_us / (1 - shown))
    return s


def _within_step(f: Finding, s: Saving) -> Saving:
    """A speed-up timed on the device and applied to recorded times (``WhatIf.of_recorded``)
    whose recorded operators take longer than the step: they are brought down to the step,
    both sides in proportion, so that the saving is the timed ratio's share of the step.

    The profiler stretches them past it (transformer-bloat's blow-up chain, with the page
    faults the profiler added to its multiplies, read 14.0 ms against a 13.4 ms step,
    2026-11-28). Taken as they are, the fixed side alone can take the whole step once
    other work on the machine slows the replacement's timing, and a blow-up whose fix
    saves 80% of the step is left with nothing (``NO_ROOM``)."""
    rule = RULES.get(f.rule)
    if (not s.measured or not s.step_us or rule is None or rule.whatif is None
            or not rule.whatif.of_recorded):
        return s
    before_us = s.measured.get("before_ms", 0.0) * 1e3
    if before_us <= s.step_us:
        return s
    shrink = s.step_us / before_us

    def of(us: float | None) -> float | None:
        return us * shrink if us is not None else None
    measured = {key: ms * shrink if type(ms) in (int, float) else ms
                for key, ms in s.measured.items()}
    # what the operators were recorded at: the report says the figures were brought down
    measured["recorded_ms"] = before_us / 1e3
    return replace(s, saving_us=of(s.saving_us), low_us=of(s.low_us), high_us=of(s.high_us),
                   measured=measured)


def kept_us(f: Finding, eff: Efficiency | str | None, s: Saving) -> float:
    """Per step, what the step keeps at the least once ``f`` is fixed: the replacement's
    own time where it was timed on the device (``s.measured``), and, where the fix leaves
    every operator's work in the step (``Rule.keeps_work``: page faults), every operator
    at its roofline (reporter.analyze.efficiency; never more than its recorded time, which
    an operator served from cache can beat). Other fixes take operators away, and which
    is not always known by the roofline's names (fp32-gemm names kernels, the roofline
    ATen operators; a fix that changes the dtype changes their roof): for them, nothing
    more."""
    # (a whole step's timing: the step it keeps, ``_step_measured``'s kept_ms)
    after = s.measured.get("kept_ms", s.measured.get("after_ms", 0.0)) * 1e3 \
        if s.measured else 0.0
    rule = RULES.get(f.rule)
    if rule is None or not rule.keeps_work or eff is None or isinstance(eff, str):
        return float(after)
    return float(after + sum(min(o.roof_us, o.time_us) for o in eff.ops))


def _estimate(f: Finding, profile: Profile, eff: Efficiency | str | None, others: Sequence[Finding],
              measured: dict[str, Any] | None, real_step_us: float | None) -> Saving:
    n, step = _steps(profile)
    accounted = _accounted(f, profile, n, step)
    rule = RULES.get(f.rule)
    if measured:
        whatif = rule.whatif if rule is not None else None
        if measured.get("whole_step") is True:  # the fix applied to the model's step
            return _step_measured(accounted, measured, step, real_step_us or step,
                                  *_hidden_faults_us(f, profile, measured))
        # Its milliseconds are of the profiled step when the recipe scaled recorded times
        # (on the CPU, estimate scales them to the unprofiled step with the rest).
        recorded = whatif is not None and whatif.of_recorded
        before_ms = measured["before_ms"]
        if whatif is not None and whatif.replaces_all and accounted:
            # The fix replaces all the work the finding accounts for (softmax and layout
            # copies on a blow-up's tensors too), not only the calls timed: its recorded
            # time (on the CPU, scaled to the step timed without the profiler when the
            # replacement was timed outright) against what the replacement would take.
            unprofiled = real_step_us / step if real_step_us and step and not recorded \
                and not profile.has_device else 1.0
            before_ms = max(before_ms, accounted * unprofiled / 1e3)
        # The page faults the finding's tensors take in the step without the profiler: a
        # replacement timed on its own, its operands allocated afresh each call from a
        # heap that keeps them, takes none of them (transformer in training, 2026-11-27:
        # 3,077 faults a step, 666 with SDPA; the attention timed alone saved 2.0 ms, the
        # twin 4.6 ms)
        faults_ms = faults_us(profile, owned_fault_share(profile, [f])) / 1e3 \
            if not profile.has_device and not recorded else 0.0
        if faults_ms * 1e3 < FAULTS_NOTED * step:
            faults_ms = 0.0
        saving = (before_ms + faults_ms - measured["after_ms"]) * 1e3
        timed = {"before_ms": before_ms, "after_ms": measured["after_ms"]}
        if faults_ms > 0:
            timed["faults_ms"] = faults_ms
        host = recorded and not profile.has_device
        if saving <= 0:
            return Saving(accounted, 0.0, 0.0, 0.0, step, NOT_FASTER, timed, host_saving=host)
        low = high = saving
        each = measured.get("saved_ms")
        if isinstance(each, list) and len(each) == 2 and varied(*each):
            # timed twice (runner._whatif_again) and the two differ: the saving is their
            # mean, within half their difference either way, and the report gives both
            half = abs(each[0] - each[1]) / 2 * 1e3
            low, high = max(0.0, saving - half), saving + half
            timed["saved_first_ms"], timed["saved_second_ms"] = (float(x) for x in each)
        return Saving(accounted, saving, low, high, step, None, timed, host_saving=host)

    w = Worth(f, profile, eff, others, n, step, accounted, real_step_us)
    return rule.saving(w) if rule is not None else w.unquantified()


def _hidden_faults_us(f: Finding, profile: Profile, measured: dict[str, Any]
                      ) -> tuple[float, float]:
    """Per step, the page faults that the step as it is took before the profiler ran
    (Profile.host_faults) and not in its whole-step timing (``measured["faults"]``, the
    medians of the step as it is and fixed): all of them, and the finding's part
    (``owned_fault_share``), which its fix takes away, at the measured cost of one. After
    profiling, the process's heap can hold memory that the step otherwise hands back to
    the system and maps again each step (Qwen2 on eager attention, training, 2026-11-29:
    12,257 faults a step before the profiler, none in the timing after it; the switch to
    SDPA then saved 9.3% of the step, and 21.7-26.1% in processes of their own). (0, 0)
    on a GPU, or where either count is missing."""
    counted, h = measured.get("faults"), profile.host_faults
    if profile.has_device or not h or not h.get("faults") or not isinstance(counted, list) \
            or len(counted) != 2:
        return 0.0, 0.0
    hidden = max(0.0, float(h["faults"]) - float(counted[0])) / float(h["faults"])
    return faults_us(profile, hidden), faults_us(profile, owned_fault_share(profile, [f])
                                                 * hidden)


def _step_measured(accounted: float | None, measured: dict[str, Any], profiled: float,
                   step: float, hidden_us: float = 0.0, owned_us: float = 0.0) -> Saving:
    """A fix applied to the model and its whole step timed with and without it, in turn
    (reporter.collect.whatif.fixed_step): the share of that step it saved (each timing's
    ``saved_share``, their mean), of ``step``, the step timed without the profiler, the
    share every other figure is of; where two timings differ (``varied``), within half
    their difference either way. The fixed step keeps the rest, at the least the step
    less the highest share (``kept_ms``, which ``kept_us`` reads). The Saving is of the
    ``profiled`` step, as every other model's, so that ``estimate`` brings what the
    finding accounts for to the step without the profiler as it does theirs; the saving
    is that step's already. Where the timed steps lacked page faults that step took
    (``_hidden_faults_us``: ``hidden_us`` of them, ``owned_us`` the finding's), the share
    is of that step without them, and the fix takes the finding's with it
    (``faults_ms``)."""
    shares = measured.get("saved_share")
    if not (isinstance(shares, list) and shares
            and all(isinstance(x, (int, float)) for x in shares)):
        before, after = float(measured["before_ms"]), float(measured["after_ms"])
        shares = [1 - after / before] if before > 0 else [0.0]
    shown = sum(shares) / len(shares)  # the share of the step as it is the fix saved
    if measured.get("step_is_fixed") is True:
        # The section's step is the fixed one already (inference-autograd: the runner's
        # inference_mode and eval() are the fix; the step as the user's code runs it was
        # the longer one): what the fix saved is of that step, as a share of the fixed
        # one, (before - after) / after, at most the whole step.
        shares = [min(1.0, x / (1 - x)) if x < 1 else 1.0 for x in shares]
    share = sum(shares) / len(shares)
    timed_step = max(step - hidden_us, 0.0)  # the step as the timed steps took it
    if owned_us < FAULTS_NOTED * step:  # a float64 MLP's 0.03 us: not worth a sentence
        owned_us = 0.0
    timed = {"before_ms": measured["before_ms"], "after_ms": measured["after_ms"],
             "whole_step": True, "saved_share": shown, "fix": measured.get("fix"),
             "kept_ms": (timed_step * (1 - max(shares)) + hidden_us - owned_us) / 1e3}
    if measured.get("step_is_fixed") is True:
        timed["step_is_fixed"] = True  # estimate takes the share of the user's step
    if owned_us > 0:
        timed["faults_ms"] = owned_us / 1e3
    if share <= 0 and owned_us <= 0:
        return Saving(accounted, 0.0, 0.0, 0.0, profiled, NOT_FASTER, timed)
    low = high = saving = max(0.0, share * timed_step + owned_us)
    if len(shares) == 2 and varied(*shares):
        half = abs(shares[0] - shares[1]) / 2 * timed_step
        low, high = max(0.0, saving - half), saving + half
        timed["saved_first_ms"], timed["saved_second_ms"] = (
            (x * timed_step + owned_us) / 1e3 for x in shares)
    return Saving(accounted, saving, low, high, profiled, None, timed)


# The page faults a fix takes away with it, under this share of the step, are left out of
# its saving and its words (a timed replacement's and a whole step's alike).
FAULTS_NOTED = 0.001

# Two timings of one replacement whose savings differ by more than this share of the
# larger: the machine changed between them (see runner._whatif_again).
VARIED = 0.2


def varied(first: float, second: float) -> bool:
    """Whether two timings of a replacement's saving differ by more than VARIED."""
    return abs(first - second) > VARIED * max(abs(first), abs(second))


# A device busy this share of the step or more is what the host waits for: its
# synchronisations are the symptom of a device-bound step.
BUSY = 0.9


def device_kept_busy(profile: Profile, s: Saving) -> bool:
    """Whether the device kept busy while the host waited in synchronisations: the idle
    time they caused is minor (a trace), or, in a table, the device's time nearly fills
    the step."""
    if s.saving_us is not None:
        return s.minor
    if not profile.has_device:
        return False
    wall = step_wall_us(profile)
    return wall > 0 and profile.self_device_us / wall >= BUSY


def idle_of_profiler(busy: float) -> Callable[[Profile, Saving], bool]:
    """A symptom test for an idle device (low-device-utilization, busy under ``busy`` of
    the profiled step): the idle time it may save, bounded by the step timed without the
    profiler (``waited``: Saving.unprofiled_step_us), leaves the device busy ``busy`` of
    that step or more. The idle time was the profiler's own host work, not the model's:
    transformer-fixed in inference on an H200 (2026-11-29) kept its GPU busy 49.5% of the
    profiled 33.8 ms step and about 90% of the 18.6 ms one timed without it. Also a
    symptom where the idle time with nothing queued is minor (a trace): the device idled
    with work queued, waiting on itself (trace 07: 64.5% idle, all of it queued), and no
    host-side fix shortens that."""
    def symptom(profile: Profile, s: Saving) -> bool:
        idle = s.with_others_us
        if s.saving_us is not None and s.minor:
            return True
        return (s.unprofiled_step_us is not None and idle is not None
                and idle < (1 - busy) * s.unprofiled_step_us)
    return symptom


# An unpriced finding ranks above a priced one whose saving is at most this part of the
# time it accounts for: a small priced saving never stands above a cost ten times its size.
UNPRICED_WEIGHT = 0.1


def _rank_key(fs: tuple[Finding, Saving]) -> tuple[float, int]:
    """Main problems by saving, largest first; one without a saving by a tenth of the time
    it accounts for or, where it has one, of its upper bound (``UP_TO``;
    ``UNPRICED_WEIGHT``; none, last), ahead of a priced one of the same weight. A
    quadratic loop's one operator, 87% of the CPU time and no roofline to price it,
    ranked below a 5-8% page-fault finding (issue 66)."""
    s = fs[1]
    if s.saving_us is not None:
        return -s.saving_us, 1
    upper = s.high_us if s.note in BOUNDS and s.high_us is not None else 0.0
    return -max(s.accounts_us or 0.0, upper) * UNPRICED_WEIGHT, 0


def ranked(findings: list[Finding], profile: Profile,
           eff: Efficiency | str | None = None,
           measured: dict[str, dict[str, Any]] | None = None,
           real_step_us: float | None = None, floor: Efficiency | None = None
           ) -> tuple[list[tuple[Finding, Saving]], list[tuple[Finding, Saving]]]:
    """(main problems, minor ones): by estimated saving, largest first, those without an
    estimate by a tenth of the time they account for (``_rank_key``); a replacement
    timed here that is not faster is minor. A finding that is only a symptom (its rule's
    ``symptom``: a synchronisation stall while the device stays busy is a device-bound
    step; an idle device that the step timed without the profiler keeps busy) is left
    out. ``measured``: Section.whatif; ``real_step_us``: the step timed without the
    profiler (see ``estimate``); ``floor``: see ``estimate``."""
    main: list[tuple[Finding, Saving]] = []
    minor: list[tuple[Finding, Saving]] = []
    for f in findings:
        s = estimate(f, profile, eff, findings, (measured or {}).get(f.rule), real_step_us,
                     floor)
        rule = RULES.get(f.rule)
        if rule is not None and rule.symptom is not None and rule.symptom(profile, s):
            continue
        (minor if s.minor or s.note == NOT_FASTER else main).append((f, s))
    main.sort(key=_rank_key)
    minor.sort(key=lambda fs: -(fs[1].saving_us or 0.0))
    return main, minor
