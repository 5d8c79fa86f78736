"""What each finding is worth: the time it accounts for and what its fix would save.

A pure function of a finding, its profile, and the profile's efficiency
(reporter.analyze.efficiency). Times are per step, in microseconds; shares are of the
profiled step, or on a GPU, when the run was timed, of the step timed without the
profiler (see ``estimate``). Each estimate says how it is made:

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
- a replacement timed on the device (reporter.analyze.whatif): what it measured;
- no estimate where the profile cannot give one (memory pressure is about
  memory; a table has no timeline): ``note`` says so, and no number is shown.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from .findings import Finding, step_wall_us
from .profile import Profile

# A finding whose fix saves less than this share of the step is minor.
MINOR_SHARE = 0.03
NOT_QUANTIFIABLE = "not-quantifiable"
NOT_FASTER = "not-faster"  # the replacement, timed on the device, saves nothing there

# The device's idle time in the step breakdown, by what the host did meanwhile.
IDLE = ("idle_data", "idle_sync", "idle_host")


@dataclass
class Saving:
    accounts_us: float | None  # the time the finding accounts for, per step
    saving_us: float | None  # the estimated saving of its fix, per step
    low_us: float | None
    high_us: float | None
    step_us: float | None  # the step the shares are of (see estimate)
    note: str | None = None  # NOT_QUANTIFIABLE, or NOT_FASTER when timed here
    measured: dict[str, float] | None = None  # {"before_ms", "after_ms"}: timed here
    # Set when the step timed without the profiler bounded an idle-time saving.
    unprofiled_step_us: float | None = None
    host_saving: bool = False  # the saving is host time under the profiler (see estimate)

    def share(self, us: float | None) -> float | None:
        return us / self.step_us if us is not None and self.step_us else None

    @property
    def minor(self) -> bool:
        s = self.share(self.saving_us)
        return s is not None and s < MINOR_SHARE

    def to_json(self) -> dict[str, Any]:
        """The fields --json adds to a finding."""
        def ms(us: float | None) -> float | None:
            return us / 1e3 if us is not None else None

        return {"accounts_ms": ms(self.accounts_us), "saving_ms": ms(self.saving_us),
                "saving_share": self.share(self.saving_us), "saving_low": ms(self.low_us),
                "saving_high": ms(self.high_us), "saving_note": self.note,
                "measured": self.measured,
                "bounded_by_unprofiled_step_ms": ms(self.unprofiled_step_us)}


def _steps(profile: Profile) -> tuple[int, float]:
    """(profiled steps, mean step in us)."""
    b = profile.breakdown
    if b is not None and b.steps_us:
        return len(b.steps_us), b.mean(b.steps_us)
    n = max(profile.steps, 1)
    return n, step_wall_us(profile) / n


def _accounted(f: Finding, profile: Profile, n: int, step: float) -> float | None:
    """The finding's time per step, from its share of its basis; at most the step."""
    share, basis = f.evidence.get("share"), f.evidence.get("basis")
    total = {"device": profile.self_device_us, "cpu": profile.self_cpu_us,
             "step": step_wall_us(profile)}.get(str(basis))
    if share is None or total is None:
        return None
    per_step = float(share) * total / n
    return min(per_step, step) if step else per_step


def _beyond_roof(names: list[str], time_us: float, eff: Any) -> float | None:
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


def _matrix_roof(names: list[str], eff: Any) -> float:
    """Per step, the roofline time of the matrix products among ``names``."""
    if eff is None or isinstance(eff, str):
        return 0.0
    return float(sum(o.roof_us for o in eff.ops if o.name in names and o.matrix))


def _blocking_share(profile: Profile, rule: str) -> float:
    """The part of the device's idle time in synchronisations that a finding owns: the
    host's time in its calls (copies, or synchronisations proper) over both."""
    if rule not in ("sync-stall", "host-copy-blocked"):
        return 1.0
    from .rules import COPY_CALLS, SYNC_OPS

    copies = sum(o.self_cpu_us for o in profile.ops if o.name in COPY_CALLS)
    syncs = sum(o.self_cpu_us for o in profile.ops if o.name in SYNC_OPS)
    if copies + syncs <= 0:
        return 1.0
    return (copies if rule == "host-copy-blocked" else syncs) / (copies + syncs)


def _per_step(values: list[float]) -> tuple[float, float, float]:
    return sum(values) / len(values), min(values), max(values)


def _materialised(profile: Profile, names: list[str], n: int) -> float:
    """Per step, the inclusive time of the operators that materialise a blow-up."""
    attr = "device_total_us" if profile.has_device else "cpu_total_us"
    return float(sum(getattr(o, attr) for o in profile.ops if o.name in names)) / n


def estimate(f: Finding, profile: Profile, eff: Any = None,
             others: Sequence[Finding] = (), measured: dict[str, Any] | None = None,
             real_step_us: float | None = None) -> Saving:
    """What ``f`` is worth; ``others``, the profile's other findings, keep two findings
    from counting the same time; ``measured``, its replacement timed on the device
    (reporter.analyze.whatif), replaces the estimate.

    No figure exceeds the step: a trace whose recorded kernels run past its steps (a
    recording that began with earlier steps' kernels still queued, say) would
    otherwise have a finding account for, or save, more than the whole step.

    ``real_step_us``, the step timed without the profiler, bounds what the device's idle
    time can save: the profiler's own work slows the host, not the device, so a step it
    lengthens shows more idle time than there is without it (``_unprofiled_idle``). On a
    GPU it is also the step the shares are of: device times are what they are without
    the profiler, and host times are scaled from the profiled step to it."""
    s = _estimate(f, profile, eff, others, measured, real_step_us)
    if real_step_us and s.step_us and profile.has_device:
        k = real_step_us / s.step_us

        def host(us: float | None) -> float | None:
            return us * k if us is not None else None

        s = replace(s, step_us=real_step_us,
                    accounts_us=host(s.accounts_us) if _host_basis(f) else s.accounts_us)
        if s.host_saving:
            s = replace(s, saving_us=host(s.saving_us), low_us=host(s.low_us),
                        high_us=host(s.high_us))
    if s.step_us:
        step_us = s.step_us

        def cap(us: float | None) -> float | None:
            return min(us, step_us) if us is not None else None

        s = replace(s, accounts_us=cap(s.accounts_us), saving_us=cap(s.saving_us),
                    low_us=cap(s.low_us), high_us=cap(s.high_us))
    return s


def _host_basis(f: Finding) -> bool:
    """Whether the finding's share is of host time (CPU time or the profiled step)."""
    return f.evidence.get("basis") in ("cpu", "step") or f.rule == "single-tensor-optimizer"


def _unprofiled_idle(b: Any, step: float, real_step_us: float | None) -> float | None:
    """The device's idle time per step without the profiler, at most: the step timed
    without it less the device's busy time under it (its kernels are not slowed by the
    profiler's host-side work); None without both."""
    if not real_step_us or b is None or not b.device_us or not step:
        return None
    idle = float(sum(b.mean(b.device_us.get(k, [])) for k in IDLE))
    return max(0.0, real_step_us - (step - idle))


def _estimate(f: Finding, profile: Profile, eff: Any, others: Sequence[Finding],
              measured: dict[str, Any] | None, real_step_us: float | None) -> Saving:
    n, step = _steps(profile)
    accounted = _accounted(f, profile, n, step)
    if measured:
        before_ms = measured["before_ms"]
        if f.rule == "elementwise-blowup" and accounted:
            # The products replace all the work the blow-up accounts for (softmax and
            # layout copies on the blown-up tensors too), not only the mul, sum and
            # repeat calls timed: its recorded time against what they would take.
            before_ms = max(before_ms, accounted / 1e3)
        saving = (before_ms - measured["after_ms"]) * 1e3
        timed = {"before_ms": before_ms, "after_ms": measured["after_ms"]}
        if saving <= 0:
            return Saving(accounted, 0.0, 0.0, 0.0, step, NOT_FASTER, timed)
        return Saving(accounted, saving, saving, saving, step, None, timed)
    b = profile.breakdown
    none = Saving(accounted, None, None, None, step, NOT_QUANTIFIABLE)
    rule = f.rule
    if rule in ("elementwise-blowup", "copy-heavy", "cpu-side-padding", "unfused-attention"):
        if accounted is None:
            return none
        low = _beyond_roof(f.ops, accounted, eff)
        blowup = next((o for o in others if o.rule == "elementwise-blowup"), None)
        if rule == "copy-heavy" and blowup is not None:  # its copies are the blow-up's
            accounted = max(0.0, accounted - _materialised(
                profile, blowup.evidence.get("materialisers", []), n))
        low = min(low if low is not None else 0.0, accounted)
        saving = accounted
        if rule == "unfused-attention":  # the products stay, at their roofline, fused
            saving = max(low, accounted - _matrix_roof(f.ops, eff))
        return Saving(accounted, saving, low, accounted, step, host_saving=_host_basis(f))
    if rule == "dominant-operator":
        beyond = _beyond_roof(f.ops, accounted or 0.0, eff)
        if not accounted or beyond is None:
            return none
        return Saving(accounted, beyond, beyond / 2, beyond, step, host_saving=_host_basis(f))
    if rule == "single-tensor-optimizer":
        # The optimizer phase, less what its element-wise updates need at their roofline
        # (the mean roofline share of the profile's element-wise operators stands in).
        if b is not None and b.host_us.get("optimizer"):
            accounted = b.mean(b.host_us["optimizer"])
        others_ = ([o.name for o in eff.ops if not o.matrix]
                   if eff is not None and not isinstance(eff, str) else [])
        beyond = _beyond_roof(others_, accounted or 0.0, eff)
        if not accounted or beyond is None:
            return none
        return Saving(accounted, beyond, beyond / 2, beyond, step, host_saving=True)
    if rule == "near-roofline":  # its evidence holds the saving per step already
        saving = f.evidence.get("saving_us")
        if saving is None:
            return none
        return Saving(accounted, saving, saving, saving, step)
    waits = {"dataloader-bound": ("device_us", "idle_data") if b and b.device_us
             else ("host_us", "data"),
             "sync-stall": ("device_us", "idle_sync"),
             "host-copy-blocked": ("device_us", "idle_sync"),
             "communication-bound": ("device_us", "communication"),
             "low-device-utilization": ("device_us", "idle_host")}
    if rule in waits:
        part, key = waits[rule]
        values = getattr(b, part).get(key) if b is not None else None
        if not values:
            return none
        mean, low, high = _per_step(values)
        part_of = _blocking_share(profile, rule)  # idle_sync is shared by two findings
        mean, low, high = (v * part_of for v in (mean, low, high))
        ceiling = _unprofiled_idle(b, step, real_step_us) if key in IDLE else None
        if ceiling is not None and ceiling < high:
            mean, low, high = (min(v, ceiling) for v in (mean, low, high))
            return Saving(accounted, mean, low, high, step, unprofiled_step_us=real_step_us)
        return Saving(accounted, mean, low, high, step, host_saving=part == "host_us")
    if rule == "fp32-gemm" and eff is not None and not isinstance(eff, str) and accounted:
        peaks = eff.peaks.flops
        fp32 = peaks.get("fp32")
        faster = [peaks[k] for k in ("tf32", "bf16") if k in peaks]
        if fp32 and faster:
            low, high = (accounted * (1 - fp32 / v) for v in (min(faster), max(faster)))
            return Saving(accounted, high, low, high, step)
    return none


# A device busy this share of the step or more is what the host waits for: its
# synchronisations are the symptom of a device-bound step.
BUSY = 0.9


def _device_busy(profile: Profile, s: Saving) -> bool:
    """Whether the device kept busy while the host waited in synchronisations: the idle
    time they caused is minor (a trace), or, in a table, the device's time nearly fills
    the step."""
    if s.saving_us is not None:
        return s.minor
    if not profile.has_device:
        return False
    wall = step_wall_us(profile)
    return wall > 0 and profile.self_device_us / wall >= BUSY


def ranked(findings: list[Finding], profile: Profile, eff: Any = None,
           measured: dict[str, dict[str, Any]] | None = None,
           real_step_us: float | None = None
           ) -> tuple[list[tuple[Finding, Saving]], list[tuple[Finding, Saving]]]:
    """(main problems, minor ones): by estimated saving, largest first, then those without
    an estimate by severity; a replacement timed here that is not faster is minor. A
    synchronisation stall while the device stays busy is a symptom of a device-bound
    step, not a problem: it is left out. ``measured``: Section.whatif; ``real_step_us``:
    the step timed without the profiler (see ``estimate``)."""
    main: list[tuple[Finding, Saving]] = []
    minor: list[tuple[Finding, Saving]] = []
    for f in findings:
        s = estimate(f, profile, eff, findings, (measured or {}).get(f.rule), real_step_us)
        if f.rule == "sync-stall" and _device_busy(profile, s):
            continue  # the device did not idle while the host waited
        (minor if s.minor or s.note == NOT_FASTER else main).append((f, s))
    main.sort(key=lambda fs: (fs[1].saving_us is None, -(fs[1].saving_us or 0.0)))
    minor.sort(key=lambda fs: -(fs[1].saving_us or 0.0))
    return main, minor
