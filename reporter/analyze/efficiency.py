"""How well the step uses the machine: per operator against its roofline, per step MFU.

A pure function of a Profile's modelled costs (reporter.analyze.flops, summed by
reporter.ingest.traces) and the machine's peaks (reporter.analyze.peaks). For each operator:
its FLOPs and bytes, the FLOP/s and bytes/s it achieved (device time on a GPU,
CPU time on the CPU), its arithmetic intensity, whether its roof is compute or
memory, and the share of its time the roofline says it needs ("% of roofline":
roofline time = max(FLOPs / peak, bytes / bandwidth), over the measured time).
For the step: the FLOPs per step, MFU (the PaLM convention: the model's forward
FLOPs, times 3 when the step trains, over the step time and the peak), the
hardware FLOPs utilisation (every modelled FLOP: the backward as it ran, the
optimizer, data augmentation), and the speed of light: the step's time if every
modelled operator ran at its roofline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ..model.profile import Profile
from ..model.run import Section
from .flops import MATRIX
from .peaks import MEASURED, Peaks, lookup

# Why a profile has no efficiency: no shapes recorded (tables, traces without
# record_shapes), no peaks for its device (a trace from an unknown device), or no
# operator with a formula among what it recorded.
NO_SHAPES, NO_PEAKS, NOTHING_MODELLED = "no-shapes", "no-peaks", "nothing-modelled"
NOT_RECORDED = "not-recorded"  # a run stored before reporter judged efficiency
# The machine was busy: the peaks, the timed step or the profiled one were disturbed by
# other work (reporter.model.contention), so no efficiency figure is given.
BUSY = "busy"
# The figures came out impossible (MFU above 100%): the peaks or the step are wrong.
IMPLAUSIBLE = "implausible"
# A measured peak that the run's own matrix products beat by this factor was taken in a
# busy moment: refused (IMPLAUSIBLE), not raised.
REFUSE = 2.0


@dataclass
class OpEfficiency:
    name: str
    dtypes: list[str]
    calls: int
    flops: float  # per step
    bytes: float  # per step
    time_us: float  # per step
    roof_us: float  # per step: the time its roofline allows
    bound: str  # "compute" or "memory"
    matrix: bool

    @property
    def achieved_flops(self) -> float:
        return self.flops / (self.time_us * 1e-6) if self.time_us > 0 else 0.0

    @property
    def achieved_bandwidth(self) -> float:
        return self.bytes / (self.time_us * 1e-6) if self.time_us > 0 else 0.0

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None

    @property
    def roofline_share(self) -> float:
        return self.roof_us / self.time_us if self.time_us > 0 else 0.0


@dataclass
class Efficiency:
    peaks: Peaks
    basis: str  # "device" or "cpu": whose time the operators are measured in
    ops: list[OpEfficiency]  # the longest first
    steps: int
    training: bool
    flops_per_step: float
    model_flops_per_step: float
    peak_dtype: str  # the dtype whose peak MFU is taken against
    peak_flops: float
    step_us: float  # the step MFU is measured over (un-profiled when the run was timed)
    step_timed: bool  # step_us comes from the timed windows, not the profiled steps
    profiled_step_us: float
    modelled_us: float  # per step, the modelled operators' time
    roof_us: float  # per step, their roofline time
    total_us: float  # per step, all operators' time on the same basis
    tf32_inferred: bool = False
    peaks_raised: list[str] = field(default_factory=list)  # measured peaks the run beat
    not_modelled: list[tuple[str, float]] = field(default_factory=list)  # per step
    no_peak: list[str] = field(default_factory=list)  # dtypes without a peak here

    @property
    def mfu(self) -> float:
        return self._utilisation(self.model_flops_per_step)

    @property
    def hfu(self) -> float:
        return self._utilisation(self.flops_per_step)

    def _utilisation(self, flops: float) -> float:
        if self.step_us <= 0 or self.peak_flops <= 0:
            return 0.0
        return flops / (self.step_us * 1e-6) / self.peak_flops

    @property
    def speed_of_light_us(self) -> float:
        """The profiled step if every modelled operator took its roofline time."""
        excess = max(0.0, self.modelled_us - self.roof_us)
        return max(self.roof_us, self.profiled_step_us - excess)

    @property
    def coverage(self) -> float:
        """The share of the operators' time that the model covers."""
        return min(1.0, self.modelled_us / self.total_us) if self.total_us > 0 else 0.0


def _tf32_for(name: str, tf32: Optional[bool], conv_tf32: Optional[bool]) -> Optional[bool]:
    """Whether an fp32 matrix operator ran as TF32: a convolution by cuDNN's flag (on by
    default, where cuBLAS's is off), fused attention always (the memory-efficient kernel
    runs fp32 attention on the tensor cores, whatever the flags say), a product by
    cuBLAS's flag. None: the run does not say."""
    lowered = name.lower()
    if "conv" in lowered:
        return conv_tf32
    if "attention" in lowered:
        return True
    return tf32


def _peak_key(dtype: str, matrix: bool, peaks: Peaks, tf32: Optional[bool],
              name: str = "", conv_tf32: Optional[bool] = None) -> str | None:
    """Which peak an operator's FLOPs are held to: its dtype's matrix rate for matrix
    work (fp32 as TF32 when TF32 was on for it: ``tf32`` for products, ``conv_tf32``
    for convolutions), the plain fp32 rate for the rest."""
    if not matrix:
        return "fp32" if "fp32" in peaks.flops else None
    if dtype == "fp32" and _tf32_for(name, tf32, conv_tf32) and "tf32" in peaks.flops:
        return "tf32"
    return dtype if dtype in peaks.flops else None


def _seen(profile: Profile, peaks: Peaks, tf32: Optional[bool],
          conv_tf32: Optional[bool]) -> tuple[Peaks, list[str]]:
    """Measured peaks that the run's own matrix operators exceeded (the calibration ran
    in a busy moment) are raised to the rate those operators reached: the machine did
    that. Datasheet peaks are never changed."""
    if peaks.source != MEASURED:
        return peaks, []
    flops, raised = dict(peaks.flops), []
    for c in profile.costs:
        key = _peak_key(c["dtype"], c["family"] == MATRIX, peaks, tf32, c["name"], conv_tf32)
        if key is None or c["family"] != MATRIX or c["time_us"] <= 0:
            continue
        rate = c["flops"] / (c["time_us"] * 1e-6)
        if rate > flops[key]:
            flops[key] = rate
            if key not in raised:
                raised.append(key)
    if not raised:
        return peaks, []
    return replace(peaks, flops=flops), raised


def peaks_for(profile: Profile, stored: Any = None) -> Peaks | None:
    """A run's stored peaks, else the datasheet's for a known GPU; never a guess."""
    peaks = Peaks.from_dict(stored)
    if peaks is None and profile.device_type is not None:
        peaks = lookup(profile.device_name, profile.device_mem_capacity_b)
    return peaks


def assess(profile: Profile, peaks: Peaks | None, tf32: Optional[bool] = None,
           step_us: float | None = None, conv_tf32: Optional[bool] = None
           ) -> Efficiency | str:
    """The efficiency of a profile's step, or why there is none (NO_SHAPES, NO_PEAKS,
    NOTHING_MODELLED). ``tf32``: whether TF32 was on for fp32 matrix work (None when the
    profile does not say: then TF32 is assumed only where the fp32 rate could not have
    done the work in the time measured). ``step_us``: the step time from un-profiled
    timing, when there is one. ``conv_tf32``: cuDNN's TF32 flag, for convolutions (None:
    as ``tf32``)."""
    if conv_tf32 is None:
        conv_tf32 = tf32
    if not profile.shapes_recorded or not profile.cost_basis:
        return NO_SHAPES
    if peaks is None or "fp32" not in peaks.flops or peaks.bandwidth <= 0:
        return NO_PEAKS
    peaks, raised = _seen(profile, peaks, tf32, conv_tf32)
    b = profile.breakdown
    steps = len(b.steps_us) if b is not None and b.steps_us else max(profile.steps, 1)
    rows: dict[str, dict[str, Any]] = {}
    no_peak: set[str] = set()
    inferred = False
    forward = total = 0.0
    # The model's forward: the runner's "forward" mark where there is one, else what runs
    # outside the autograd engine, the optimizer and the data loading.
    forward_phase = ("forward" if any(c["phase"] == "forward" for c in profile.costs)
                     else "unmarked")
    matrix_flops: dict[str, float] = {}
    for c in profile.costs:
        matrix = c["family"] == MATRIX
        key = _peak_key(c["dtype"], matrix, peaks, tf32, c["name"], conv_tf32)
        if key is None:
            no_peak.add(c["dtype"])
            continue
        time_s = c["time_us"] * 1e-6
        if (matrix and _tf32_for(c["name"], tf32, conv_tf32) is None and key == "fp32"
                and "tf32" in peaks.flops and time_s > 0
                and c["flops"] / time_s > peaks.flops["fp32"]):
            key, inferred = "tf32", True  # faster than fp32 can go: TF32 was on
        compute_s = c["flops"] / peaks.flops[key]
        memory_s = c["bytes"] / peaks.bandwidth
        r = rows.setdefault(c["name"], {"dtypes": [], "calls": 0, "flops": 0.0, "bytes": 0.0,
                                        "time": 0.0, "roof": 0.0, "compute": 0.0,
                                        "memory": 0.0, "matrix": matrix})
        if c["dtype"] not in r["dtypes"]:
            r["dtypes"].append(c["dtype"])
        r["calls"] += c["calls"]
        r["flops"] += c["flops"]
        r["bytes"] += c["bytes"]
        r["time"] += c["time_us"]
        r["roof"] += max(compute_s, memory_s) * 1e6
        r["compute"] += compute_s
        r["memory"] += memory_s
        total += c["flops"]
        if c["phase"] == forward_phase:
            forward += c["flops"]
        if matrix:
            matrix_flops[key] = matrix_flops.get(key, 0.0) + c["flops"]
    if not rows:
        return NOTHING_MODELLED
    ops = sorted((OpEfficiency(name=n, dtypes=r["dtypes"], calls=r["calls"],
                               flops=r["flops"] / steps, bytes=r["bytes"] / steps,
                               time_us=r["time"] / steps, roof_us=r["roof"] / steps,
                               bound="compute" if r["compute"] >= r["memory"] else "memory",
                               matrix=r["matrix"])
                  for n, r in rows.items()), key=lambda o: -o.time_us)
    training = any(c["phase"] == "backward" for c in profile.costs)
    peak_dtype = (max(matrix_flops, key=lambda k: matrix_flops[k]) if matrix_flops
                  else "fp32")
    profiled = (b.mean(b.steps_us) if b is not None and b.steps_us
                else (profile.self_device_us if profile.cost_basis == "device"
                      else profile.self_cpu_us) / steps)
    basis_total = (profile.self_device_us if profile.cost_basis == "device"
                   else sum(r["time"] for r in rows.values())
                   + sum(profile.not_modelled_us.values())) / steps
    return Efficiency(
        peaks=peaks, basis=profile.cost_basis, ops=ops, steps=steps, training=training,
        flops_per_step=total / steps,
        model_flops_per_step=(3 if training else 1) * forward / steps,
        peak_dtype=peak_dtype, peak_flops=peaks.flops[peak_dtype],
        step_us=step_us if step_us else profiled, step_timed=bool(step_us),
        profiled_step_us=profiled,
        modelled_us=sum(o.time_us for o in ops), roof_us=sum(o.roof_us for o in ops),
        total_us=basis_total, tf32_inferred=inferred, peaks_raised=raised,
        not_modelled=[(n, t / steps) for n, t in profile.not_modelled_us.items()],
        no_peak=sorted(no_peak))


def of_section(section: Section, batch_size: int | None = None,
               even_if_busy: bool = False) -> Efficiency | str:
    """assess() for a run's section (reporter.model.run.Section) or an imported profile's: its
    stored peaks, its TF32 state, and the step time of its timed windows. BUSY when other
    work on the machine disturbed the peaks' calibration, the timed windows or the
    profiled steps; IMPLAUSIBLE when the machine would have done more than its peak.
    ``even_if_busy``: assessed all the same (a floor for savings, never a figure a report
    prints: peaks calibrated while other work ran are lower than the machine's, so the
    roofline they give is longer than its own)."""
    p, t = section.profile, section.throughput
    step_us = (batch_size / t.median * 1e6 if batch_size and t is not None and t.windows
               and t.median > 0 else None)
    state = (section.precision.get("tf32") or {}) if p.device_type else {}
    tf32 = state.get("matmul") if p.device_type else False
    conv_tf32 = state.get("conv", tf32) if p.device_type else False
    peaks = peaks_for(p, section.peaks)
    if not even_if_busy and (section.busy or (peaks is not None and peaks.disturbed)):
        return BUSY
    result = assess(p, peaks, tf32, step_us, conv_tf32)
    if result in (NO_SHAPES, NO_PEAKS) and t is not None and section.peaks is None:
        return NOT_RECORDED
    if isinstance(result, Efficiency) and (
            max(result.mfu, result.hfu) > 1.0 or any(
                result.peaks.flops[k] > REFUSE * peaks.flops[k]
                for k in result.peaks_raised if peaks is not None and k in peaks.flops)):
        return IMPLAUSIBLE
    return result


def to_json(result: Efficiency | str, counts: Counts | None = None) -> dict[str, Any]:
    """The ``--json`` form: rates in FLOP/s and bytes/s, times in microseconds, per step.
    Where no efficiency is given (``result`` says why), ``counts`` (the machine was busy):
    the FLOPs and bytes per step, which do not depend on the load."""
    if isinstance(result, str):
        return {"note": result, **(counts_json(counts) if counts is not None else {})}
    e = result
    return {
        "peaks": e.peaks.to_dict(), "basis": e.basis, "steps": e.steps, "training": e.training,
        "flops_per_step": e.flops_per_step, "model_flops_per_step": e.model_flops_per_step,
        "peak_dtype": e.peak_dtype, "peak_flops": e.peak_flops, "mfu": e.mfu, "hfu": e.hfu,
        "step_us": e.step_us, "step_timed": e.step_timed, "profiled_step_us": e.profiled_step_us,
        "speed_of_light_us": e.speed_of_light_us, "modelled_us": e.modelled_us,
        "roofline_us": e.roof_us, "coverage": e.coverage, "tf32_inferred": e.tf32_inferred,
        "peaks_raised": e.peaks_raised,
        "no_peak": e.no_peak, "not_modelled_us": dict(e.not_modelled),
        "ops": [{"name": o.name, "dtypes": o.dtypes, "calls": o.calls, "flops": o.flops,
                 "bytes": o.bytes, "time_us": o.time_us, "roofline_us": o.roof_us,
                 "achieved_flops": o.achieved_flops, "achieved_bandwidth": o.achieved_bandwidth,
                 "intensity": o.intensity, "bound": o.bound,
                 "roofline_share": o.roofline_share} for o in e.ops],
    }


@dataclass
class OpCount:
    name: str
    dtypes: list[str]
    calls: int  # over all steps
    flops: float  # per step
    bytes: float  # per step

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None


@dataclass
class Counts:
    """What the step computes, from the recorded shapes alone: no time, rate or peak, so
    nothing other work on the machine changes (what a busy run still states)."""
    steps: int
    training: bool
    flops_per_step: float  # every modelled FLOP
    model_flops_per_step: float  # the forward's, x 3 for a training step (as MFU's)
    ops: list[OpCount]  # the most FLOPs first, then bytes


def count(profile: Profile) -> Counts | None:
    """The FLOPs and bytes of every modelled operator per step, whatever its dtype (a
    dtype with no peak on this machine is counted too); None without recorded shapes."""
    if not profile.shapes_recorded or not profile.costs:
        return None
    b = profile.breakdown
    steps = len(b.steps_us) if b is not None and b.steps_us else max(profile.steps, 1)
    forward_phase = ("forward" if any(c["phase"] == "forward" for c in profile.costs)
                     else "unmarked")
    rows: dict[str, OpCount] = {}
    forward = total = 0.0
    for c in profile.costs:
        r = rows.setdefault(c["name"], OpCount(c["name"], [], 0, 0.0, 0.0))
        if c["dtype"] not in r.dtypes:
            r.dtypes.append(c["dtype"])
        r.calls += c["calls"]
        r.flops += c["flops"] / steps
        r.bytes += c["bytes"] / steps
        total += c["flops"]
        if c["phase"] == forward_phase:
            forward += c["flops"]
    training = any(c["phase"] == "backward" for c in profile.costs)
    return Counts(steps=steps, training=training, flops_per_step=total / steps,
                  model_flops_per_step=(3 if training else 1) * forward / steps,
                  ops=sorted(rows.values(), key=lambda o: (-o.flops, -o.bytes, o.name)))


def counts_json(c: Counts) -> dict[str, Any]:
    """The ``--json`` form of ``c``: per step, FLOPs and bytes."""
    return {
        "steps": c.steps, "training": c.training, "flops_per_step": c.flops_per_step,
        "model_flops_per_step": c.model_flops_per_step,
        "ops": [{"name": o.name, "dtypes": o.dtypes, "calls": o.calls, "flops": o.flops,
                 "bytes": o.bytes, "intensity": o.intensity} for o in c.ops],
    }
