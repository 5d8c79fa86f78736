"""The report's view model: everything report.md.j2 prints, formatted for one locale.

``run_view`` and ``import_view`` make a ``ReportView`` from analyzed results
(reporter.analyze.analyzer.Analysis, with its readings: reporter.analyze.reading),
which reporter.pipeline hands them: a view decides nothing about the profile, it
formats what the analysis decided, through the formatter (render/fmt.py). Templates
only loop and print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any, Callable

from ..analyze.analyzer import Analysis
from ..analyze.reading import RankRow, RanksReading
from ..analyze.efficiency import Efficiency
from ..model.contention import mean_share
from ..model import device as devices
from ..model import vendors
from ..model.finding import MINOR_SHARE
from ..model.profile import KIND_DATALOADER, KIND_KERNEL, KIND_OP, KIND_RUNTIME, Op, Profile
from ..model.run import MEMORY_CATEGORIES, Run, Section
from . import markup
from .keytable import LOG_ROWS, log_tables
from .choices import (BusyChoices, CountsChoices, EfficiencyChoices, RankChoices, RunChoices,
                      SectionChoices, WhatifChoices, mode_of)
from .finding_view import _finding_view as _finding_view
from .fmt import Fmt, check_language, md_name, md_text
from .breakdown_view import _breakdown_view, _compiled_view
from .breakdown_view import (
    MODULE_ROWS as MODULE_ROWS,
    PROFILER_LENGTHENED as PROFILER_LENGTHENED,
    SOURCE_LINES as SOURCE_LINES,
)


def _op_row(op: Op, profile: Profile, fmt: Fmt, device: bool) -> dict[str, str]:
    row = {
        "name": md_name(op.name),
        "calls": fmt.int(op.calls),
        "self_cpu": fmt.time(op.self_cpu_us),
        "self_cpu_pct": fmt.pct(op.self_cpu_us / profile.self_cpu_us
                                if profile.self_cpu_us else None),
        "cpu_total": fmt.time(op.cpu_total_us),
        "cpu_avg": fmt.time(op.cpu_total_us / op.calls if op.calls else None),
        "self_device": fmt.time(op.self_device_us) if device else "—",
        "self_device_pct": fmt.pct(op.self_device_us / profile.self_device_us
                                   if device and profile.self_device_us else None),
        "device_total": fmt.time(op.device_total_us) if device else "—",
        "mem": fmt.bytes(op.self_device_mem_b if device else op.self_cpu_mem_b),
        "self_time": fmt.time(op.self_device_us if device else op.self_cpu_us),
        "shapes": md_name(op.input_shapes) if op.input_shapes else "",
    }
    return row



# Why a section has no memory profile; worded by terms.j2's memory_note.
MEMORY_NOTES = ("torch-version", "failed", "no-allocations", "not-recorded")


def _tensor_memory_view(section: Section, fmt: Fmt) -> dict[str, Any]:
    """The memory profile's peak and its categories (largest first), or why there is none:
    a note id that terms.j2 words (``memory_note``)."""
    tm = section.tensor_memory
    if tm is None:
        note = section.tensor_memory_note
        if note is not None and note not in MEMORY_NOTES:
            note = "failed"  # a note this reporter does not know (a hand-edited run)
        if note is None:
            # A run made before the memory profile existed; imported profiles say it
            # in their own line.
            note = "not-recorded" if section.throughput is not None else None
        return {"tensor_peak": None, "tensor_categories": [], "tensor_note": note,
                "memory_rows": None}
    order = {name: i for i, name in enumerate(MEMORY_CATEGORIES)}
    cats = sorted(((k, v) for k, v in tm.at_peak_b.items() if v > 0),
                  key=lambda kv: (-kv[1], order.get(kv[0], len(order))))
    return {
        "tensor_peak": fmt.bytes(tm.peak_b),
        "tensor_categories": [{"name": k if k in order else "unknown", "size": fmt.bytes(v),
                               "share": fmt.pct(v / tm.peak_b) if tm.peak_b else "—"}
                              for k, v in cats],
        "tensor_note": None,
        "memory_rows": tm if len(tm.timeline_ms) >= 2 else None,  # for the chart
    }


EFFICIENCY_ROWS = 10  # operators in the efficiency table


def _op_counts(o: Any, fmt: Fmt) -> dict[str, Any]:
    """An operator's name, dtypes, FLOPs, bytes and FLOP per byte, as both operator tables
    of the efficiency section print them (names and dtypes may come from a crafted
    run.json: text, never Markdown)."""
    return {"name": markup.code(o.name), "dtype": markup.text(", ".join(o.dtypes)),
            "flops": fmt.si(o.flops, "FLOP") if o.flops else "0",
            "bytes": fmt.bytes(o.bytes), "intensity": _intensity(o.intensity, fmt)}


def _intensity(value: float | None, fmt: Fmt) -> str:
    """FLOP per byte: an operator without FLOPs (a copy) has none, not "0.000"."""
    return "—" if value is None else "0" if value == 0 else fmt.num(value)


def _per_step(calls: int, steps: int, fmt: Fmt) -> str:
    """Calls per step: whole where every step made as many."""
    if not steps:
        return "—"
    return fmt.int(calls // steps) if calls % steps == 0 else fmt.num(calls / steps)


def _counts_view(e: Any, fmt: Fmt) -> dict[str, Any]:
    """What the step computes, where no rate is given (the machine was busy): the FLOPs
    per step and each modelled operator's FLOPs and bytes, the most FLOPs first."""
    ops = e.ops
    more = max(0, len(ops) - EFFICIENCY_ROWS)
    return {
        "flops_per_step": fmt.si(e.model_flops_per_step, "FLOP"),
        "all_flops": fmt.si(e.flops_per_step, "FLOP"), "training": e.training,
        "rows": [{**_op_counts(o, fmt), "calls": _per_step(o.calls, e.steps, fmt)}
                 for o in ops[:EFFICIENCY_ROWS]],
        "more": more,
        "choices": CountsChoices(training=bool(e.training), more=more),
    }


def _efficiency_view(e: Any, fmt: Fmt, counts: Any = None) -> dict[str, Any]:
    """MFU, speed of light and the efficiency table (reporter.analyze.efficiency); or why there
    are none (``efficiency_note``: efficiency.NO_SHAPES, NO_PEAKS, NOTHING_MODELLED,
    NOT_RECORDED, BUSY), with what the step computes where the machine was busy
    (``efficiency_counts``: counts, which the load does not change)."""
    if isinstance(e, str):
        return {"efficiency": None, "efficiency_note": e, "roofline_points": None,
                "efficiency_counts": _counts_view(counts, fmt) if counts is not None
                else None}
    rows = [{**_op_counts(o, fmt), "time": fmt.time(o.time_us),
             "achieved": fmt.si(o.achieved_flops, "FLOP/s") if o.flops else "—",
             "bandwidth": fmt.si(o.achieved_bandwidth, "B/s"), "bound": o.bound,
             "roofline": fmt.pct(o.roofline_share)}
            for o in e.ops[:EFFICIENCY_ROWS]]
    sol = e.speed_of_light_us
    view: dict[str, Any] = {
        "rows": rows, "basis": e.basis, "source": e.peaks.source,
        "device": markup.text(e.peaks.device), "reference": markup.code(e.peaks.reference),
        "peak_dtype": markup.text(e.peak_dtype), "peak": fmt.si(e.peak_flops, "FLOP/s"),
        "bandwidth": fmt.si(e.peaks.bandwidth, "B/s"),
        "peaks": [markup.text(f"{k} {fmt.si(v, 'FLOP/s')}") for k, v in
                  sorted(e.peaks.flops.items(), key=lambda kv: kv[1])],
        "seconds": fmt.time(e.peaks.seconds * 1e6) if e.peaks.seconds else None,
        "threads": e.peaks.threads,
        "mfu": fmt.fine_pct(e.mfu), "hfu": fmt.fine_pct(e.hfu), "training": e.training,
        "flops_per_step": fmt.si(e.model_flops_per_step, "FLOP"),
        "step": fmt.time(e.step_us), "step_timed": e.step_timed,
        "profiled_step": fmt.time(e.profiled_step_us),
        "sol": fmt.time(sol),
        # the rest of the profiled step, which the speed of light keeps as it is: work
        # not modelled, idle time, the host's (C-L of the last native read)
        "sol_kept": fmt.time(max(0.0, e.profiled_step_us - e.modelled_us)),
        "sol_share": fmt.pct(sol / e.profiled_step_us)
        if e.profiled_step_us else "—",
        "sol_speedup": fmt.times(e.profiled_step_us / sol) if sol > 0 else "—",
        "coverage": fmt.pct(e.coverage), "tf32_inferred": e.tf32_inferred,
        "raised": [markup.text(k) for k in e.peaks_raised],
        "not_modelled": [{"name": markup.code(n), "time": fmt.time(us)}
                         for n, us in e.not_modelled[:5]],
        "no_peak": [markup.text(d) for d in e.no_peak],
        # Faster than the memory roof: operands that stayed in the caches.
        "over_roof": any(o.roofline_share > 1 for o in e.ops[:EFFICIENCY_ROWS]),
    }
    view["choices"] = EfficiencyChoices(
        training=bool(e.training), step_timed=bool(e.step_timed),
        measured=bool(view["seconds"]), threads=bool(e.peaks.threads),
        sparse="sparse" in view["reference"], raised=bool(view["raised"]),
        tf32_inferred=bool(e.tf32_inferred), basis="device" if e.basis == "device" else "cpu",
        not_modelled=bool(view["not_modelled"]), over_roof=bool(view["over_roof"]),
        no_peak=bool(view["no_peak"]))
    return {
        "efficiency": view,
        "efficiency_note": None, "efficiency_counts": None,
        "roofline_points": e,  # for the chart
    }


def _process_view(section: Section, fmt: Fmt) -> dict[str, Any]:
    """What the facts say of the process around the step (run.Section.process): the
    user's own forward run once (an inference-only target's), the modules it found in
    training mode, and torch's threads where the runner set them; all None where the run
    did not record them (imported profiles, runs stored before it)."""
    p = section.process
    probe = p.get("probe_grad_fn")
    training = p.get("training_modules") if isinstance(probe, bool) else None
    threads = p.get("threads") if p.get("runner_threads") is True else None
    return {"probe": ("graph" if probe else "none") if isinstance(probe, bool) else None,
            "training_modules": training,
            "training_modules_text": fmt.int(training) if training is not None else None,
            "threads_set": threads if isinstance(threads, int) else None}


# The view models: what each template prints, formatted. Rows inside them (operators,
# findings, table rows) stay mappings: a finding's fields are its rule's evidence.
Row = dict[str, Any]


@dataclass
class SectionView:
    """One profiled mode of a run, or one imported profile."""

    # Heading
    mode: str | None  # "train" or "inference", else None
    # How the runner drove the step ("train" or "inference"): a live run's; None for
    # imported profiles, which ran as their own code did
    driven: str | None
    # What the runner observed of the process around the step (run.Section.process; None
    # for imported profiles and runs stored before it): the user's own forward, run once as
    # its code runs it ("graph": it built autograd state, "none": it did not), the modules
    # it found in training mode as the target handed the model over, and torch's threads
    # where --threads set them for the run
    probe: str | None
    training_modules: int | None
    training_modules_text: str | None
    threads_set: int | None
    title: str | None  # a name taken from the input (the sentence above its table)
    # Summary
    tf32: dict[str, Any] | None
    autocast: str | None
    small_kernels: str | None  # the mean kernel time, when it is launch latency
    timed: bool
    # Other work on the machine disturbed the measurements (None: it did not, or the
    # run could not tell): what the summary's first statement says
    busy: dict[str, Any] | None
    throughput_unreliable: bool  # too few undisturbed windows: no interval
    disturbed_windows: int  # left out of the median
    established: bool  # the findings rest on undisturbed measurements (run.Section.busy)
    throughput: str | None  # samples/s, the median of the timed windows
    throughput_min: str | None
    throughput_max: str | None
    ci_low: str | None
    ci_high: str | None
    ci_pct: str | None
    ci_confidence: str | None
    outliers: int
    windows: int
    steps_per_window: int
    profiled_throughput: str | None
    profiled_steps: int
    self_cpu_total: str
    self_device_total: str | None
    device_allocated: str | None
    device_reserved: str
    host_peak: str | None
    host_held: str | None
    host_net_peak: str
    # The memory profile (or tensor_note: why there is none)
    tensor_peak: str | None
    tensor_categories: list[Row]
    tensor_note: str | None
    memory_rows: Any  # run.TensorMemory, for the chart
    # The step breakdown (or breakdown_note: why there is none)
    breakdown: dict[str, Any] | None
    breakdown_note: str | None
    # Efficiency (or efficiency_note: why there is none)
    efficiency: dict[str, Any] | None
    efficiency_note: str | None
    efficiency_counts: dict[str, Any] | None  # the machine was busy: counts, no rates
    roofline_points: Any  # analyze.efficiency.Efficiency, for the chart
    # Findings and tables
    has_device: bool
    # The device's runtime as the report names it ("CUDA", "ROCm", "XPU": model.device)
    # and the library its kernels are recorded through ("CUPTI", "roctracer", "PTI":
    # model.vendors), where device time and kernels are spoken of
    runtime: str
    tracer: str
    time_column: str
    findings: list[Row]
    minor_findings: list[Row]
    top_cpu: list[Row]
    top_device: list[Row]
    top_kernels: list[Row]
    by_shape: list[Row]
    raw: list[tuple[str, str]]  # the logs: (table key, text)
    raw_at: Callable[[int], list[tuple[str, str]]] | None  # the logs at fewer rows
    benchmark: list[Row] | None
    gpu_benchmarked: bool
    trace: str | None
    chart_rows: list[tuple[str, float, str]]
    chart_basis: str
    logs_cut: bool = False  # set when the logs were shortened to fit a character limit
    whatif_failed: str | None = None  # why the replacements could not be timed (older runs)
    # each what-if not timed: {"rule", and "need" and "cap", or "exit", or "error"}
    whatifs_failed: list[dict[str, Any]] = field(default_factory=list)
    breakdown_rows: Any = None  # model.profile.Breakdown, for the chart
    compiled: dict[str, Any] | None = None  # torch.compile's regions and kernels
    number: int = 1
    sub: markup.Md = markup.Md("##")  # the heading level of its parts
    minor_share: str = ""  # a finding worth less is minor (model.finding.MINOR_SHARE)
    choices: SectionChoices = field(init=False)  # what the report's choices read

    def __post_init__(self) -> None:
        p = self.probe
        self.choices = SectionChoices(
            ranged=bool(self.throughput_max), interval=bool(self.ci_low),
            interval_high=bool(self.ci_high), outliers=self.outliers, windows=self.windows,
            disturbed_windows=self.disturbed_windows,
            tf32_forced=bool(self.tf32 and self.tf32.get("override")),
            driven=mode_of(self.driven),
            probe="graph" if p == "graph" else "none" if p == "none" else None,
            training_modules=self.training_modules, host_held=bool(self.host_held),
            mode=mode_of(self.mode),
            tensor_categories=tuple(c["name"] for c in self.tensor_categories),
            findings=tuple(f["rule"] for f in self.findings),
            minor_findings=len(self.minor_findings))


@dataclass
class ReportView:
    """A report of a run (run_view) or of profiles read from files (import_view)."""

    ranks: dict[str, Any] | None
    lang: str
    run_id: str | None
    source: str | None  # the file read, for an imported report
    target: str | None
    seed: str | None
    preset: str | None
    larger_preset: bool
    batch_size: str | None
    on_gpu: bool
    device_name: str
    device_memory: str | None
    created: str | None
    created_iso: str
    torch: str | None
    cuda: str | None  # the version of the runtime torch was built with (CUDA's, or HIP's)
    build_runtime: str  # its name: "CUDA", "ROCm"
    driver: str | None
    cpu: str | None
    cpu_count: int | None
    threads: int | None
    python: str | None
    sections: list[SectionView]
    multi: bool
    plural: Callable[..., str]
    n_findings: int
    imported: bool
    marker: str
    # The command that renders the run's whole logs (said when a comment shortens them)
    rerender: markup.Md | None = None
    # every section's Chrome trace, for the closing line
    traces: list[markup.Md] = field(default_factory=list)
    choices: RunChoices = field(init=False)  # what the report's choices read

    def __post_init__(self) -> None:
        self.choices = RunChoices(
            cuda=bool(self.cuda), driver=bool(self.driver), batch=bool(self.batch_size),
            threads=bool(self.threads), seed=bool(self.seed),
            device_memory=bool(self.device_memory), larger_preset=self.larger_preset,
            on_gpu=self.on_gpu, traces=len(self.traces),
            first_trace=bool(self.sections and self.sections[0].trace))




def _busy_view(section: Section, fmt: Fmt) -> dict[str, Any] | None:
    """The "busy machine" statement of a section whose throughput, profiled steps or
    peaks other work on the machine disturbed (reporter.model.contention); else None."""
    t, d = section.throughput, section.profile_disturbance
    peaks = bool(section.peaks and section.peaks.get("disturbed"))
    if not section.busy and not peaks:
        return None
    timed = t if t is not None and t.disturbance else None
    wait = mean_share(timed.disturbance) if timed else None
    view: dict[str, Any] = {
        "time": fmt.pct(timed.disturbed_time) if timed and timed.disturbed_time else None,
        "windows": timed.disturbed_windows if timed else 0,
        "of": len(timed.windows) if timed else 0,
        # "all 3 windows", not "3 of 3 windows"
        "all_windows": timed is not None and timed.disturbed_windows == len(timed.windows),
        "wait": fmt.pct(wait) if wait else None,
        "unreliable": bool(t and t.windows and not t.reliable),
        "profile": fmt.pct(d.share) if d is not None and d.disturbed and d.share else None,
        "attempts": section.profile_attempts,
        "whatif": bool(section.whatif_disturbance and section.whatif_disturbance.disturbed),
        "peaks": peaks,
    }
    view["choices"] = BusyChoices(
        time=bool(view["time"]), wait=bool(view["wait"]), all_windows=view["all_windows"],
        windows=view["of"], unreliable=view["unreliable"], profile=bool(view["profile"]),
        whatif=view["whatif"], peaks=peaks)
    return view


def section_view(section: Section, analysis: Analysis, fmt: Fmt, top: int = 15,
                 log_rows: int = LOG_ROWS, logs: bool = True) -> SectionView:
    """One profiled mode of a run, or one imported profile (no throughput, no memory),
    with its analysis (reporter.analyze.analyzer.analyze_section). ``logs``: fold the
    operator tables into the section, ``log_rows`` rows each (0: all)."""
    p = section.profile
    eff, main, minor = analysis.efficiency, analysis.main, analysis.minor
    device = p.has_device
    cpu_rows = p.top("self_cpu_us", top, kinds=(KIND_OP, KIND_DATALOADER, KIND_RUNTIME))
    device_rows = p.top("self_device_us", top, kinds=(KIND_OP,)) if device else []
    kernel_rows = p.top("self_device_us", 10, kinds=(KIND_KERNEL,)) if device else []
    shape_key = "self_device_us" if device else "self_cpu_us"
    shape_rows = p.top(shape_key, 10, kinds=(KIND_OP,), shapes=True)
    t, m = section.throughput, section.memory or {}
    share_key, share_total = (("self_device_us", p.self_device_us) if device
                              else ("self_cpu_us", p.self_cpu_us))
    chart_rows = [(o.name, getattr(o, share_key) / share_total,
                   fmt.pct(getattr(o, share_key) / share_total))
                  for o in (device_rows if device else cpu_rows)[:8]] if share_total else []
    bench = None
    if section.benchmark:
        bench = [{"op": r["op"], "name": md_name(r["op"]), "cpu": fmt.num(r["cpu_ms"], 3),
                  "gpu": fmt.num(r["gpu_ms"], 3) if r.get("gpu_ms") is not None else "—",
                  "speedup": (fmt.num(r["cpu_ms"] / r["gpu_ms"], 1) + "×"
                              if r.get("gpu_ms") else "—")}
                 for r in section.benchmark]
    tt = t if t is not None and t.windows else None  # the throughput, when it was timed
    timed = tt is not None
    interval = tt.interval if tt else None
    ci = fmt.span(interval.low, interval.high) if interval else (None, None)
    spread = fmt.span(min(tt.used), max(tt.used)) if tt else (None, None)
    tf32 = section.precision.get("tf32") or {}
    state = {True: "on", False: "off", None: "unknown"}
    words = device_words(p.device_type)
    return SectionView(
        tf32=({"matmul": state[tf32.get("matmul")], "conv": state[tf32.get("conv")],
               "override": bool(tf32.get("override"))} if tf32 else None),
        autocast=section.precision.get("autocast"),
        # Kernels this short are launch latency: the sizes are too small for the device.
        small_kernels=(fmt.time(analysis.short_kernel_us)
                       if analysis.short_kernel_us is not None else None),
        mode=section.label if section.label in ("train", "inference") else None,
        driven=(section.label if t is not None and section.label in ("train", "inference")
                else None),
        **_process_view(section, fmt),
        # A name taken from the input (the sentence above its table), or None
        title=None if re.fullmatch(r"profile \d+", section.label) else section.label,
        timed=timed,
        busy=_busy_view(section, fmt),
        throughput_unreliable=bool(tt and not tt.reliable),
        disturbed_windows=tt.disturbed_windows if tt else 0,
        established=analysis.established,
        throughput=fmt.num(tt.median) if tt else None,
        throughput_min=spread[0], throughput_max=spread[1],
        ci_low=ci[0], ci_high=ci[1],
        ci_pct=fmt.fine_pct(interval.half_width(tt.median)) if tt and interval else None,
        ci_confidence=fmt.pct(interval.confidence) if interval else None,
        outliers=len(tt.outliers) if tt else 0,
        windows=len(tt.used) if tt else 0,
        steps_per_window=tt.steps_per_window if tt else 0,
        profiled_throughput=fmt.num(t.profiled) if t and t.profiled else None,
        profiled_steps=p.steps,
        self_cpu_total=fmt.time(p.self_cpu_us),
        self_device_total=fmt.time(p.self_device_us) if device else None,
        device_allocated=(fmt.bytes(m["device_allocated_b"])
                          if m.get("device_allocated_b") is not None else None),
        device_reserved=fmt.bytes(m.get("device_reserved_b")),
        host_peak=fmt.bytes(m["host_peak_b"]) if m.get("host_peak_b") else None,
        host_held=fmt.bytes(m["host_held_b"]) if m.get("host_held_b") else None,
        host_net_peak=fmt.bytes(m.get("host_net_peak_b")),
        **_tensor_memory_view(section, fmt),
        **_breakdown_view(section, analysis.reading, fmt, analysis.stragglers,
                          eff.step_us if isinstance(eff, Efficiency) and eff.step_timed
                          else None),
        **_compiled_view(section, analysis.compiled, fmt),
        **_efficiency_view(eff, fmt, analysis.counts),
        has_device=device,
        runtime=words.runtime, tracer=words.tracer,
        # the profiler's own words, with the runtime's name (torch says "CUDA" under ROCm)
        time_column=f"Self {words.runtime}" if device else "Self CPU",
        findings=[_finding_view(f, fmt, s) for f, s in main],
        minor_findings=[_finding_view(f, fmt, s) for f, s in minor],
        minor_share=fmt.whole_pct(MINOR_SHARE),
        top_cpu=[_op_row(o, p, fmt, device) for o in cpu_rows],
        top_device=[_op_row(o, p, fmt, device) for o in device_rows],
        top_kernels=[_op_row(o, p, fmt, device) for o in kernel_rows],
        by_shape=[_op_row(o, p, fmt, device) for o in shape_rows],
        # The logs: the tables at log_rows rows, and at fewer for a report that must fit.
        raw=log_tables(p, log_rows) if logs else [],
        raw_at=partial(log_tables, p, say_cut=True) if logs else None,
        benchmark=bench,
        gpu_benchmarked=bool(section.benchmark and any(r.get("gpu_ms") is not None
                                                       for r in section.benchmark)),
        trace=section.trace,
        chart_rows=chart_rows,
        chart_basis="device" if device else "cpu",
        logs_cut=False,  # set when the logs were shortened to fit --max-chars
        whatif_failed=section.whatif_note if not section.whatif_failed else None,
        whatifs_failed=_whatifs_failed_view(
            section, fmt, {f.rule for f, sv in [*main, *minor] if sv.saving_us is not None}),
    )


@dataclass(frozen=True)
class DeviceWords:
    runtime: str  # "CUDA", "ROCm", "XPU"
    tracer: str  # "CUPTI", "roctracer", "PTI"


def device_words(device_type: str | None) -> DeviceWords:
    """What a report names a profile's device time and kernels by: its device record's
    runtime (reporter.model.device) and its vendor's tracer (reporter.model.vendors).
    CUDA's for a profile without a device, or of a device type the record does not know
    (model.device.named)."""
    record = devices.named(device_type)
    row = vendors.of(record.vendor)
    return DeviceWords(record.runtime, row.tracer if row is not None else "")


def _whatifs_failed_view(section: Section, fmt: Fmt, estimated: set[str]
                         ) -> list[dict[str, Any]]:
    """The what-ifs not timed (Section.whatif_failed), each with why: its operands over
    the cap, the target's sys.exit, or the error it raised; and whether its finding has
    a saving estimated from the profile (``estimated``: those rules) or none at all
    (fp64-compute, which only a timing prices)."""
    out: list[dict[str, Any]] = []
    for rule, why in section.whatif_failed.items():
        need, cap = why.get("need_b"), why.get("cap_b")
        row: dict[str, Any] = {"rule": rule, "need": None, "cap": None, "exit": None,
                               "error": None, "estimated": rule in estimated}
        if isinstance(need, int) and isinstance(cap, int):
            row.update(need=fmt.bytes(need), cap=fmt.bytes(cap))
        elif "exit" in why:
            row["exit"] = str(why["exit"])
        else:
            row["error"] = str(why.get("error") or "?")
        row["choices"] = WhatifChoices(estimated=row["estimated"], over_cap=bool(row["need"]),
                                       exited=row["exit"] is not None)
        out.append(row)
    return out


def _number(sections: list[SectionView]) -> None:
    """Number the sections and set the heading level of their parts."""
    for i, s in enumerate(sections, 1):
        s.number = i
        s.sub = markup.Md("###" if len(sections) > 1 else "##")


def _rank_row(r: RankRow, fmt: Fmt) -> dict[str, Any]:
    f = r.figures
    error = md_text(r.error) if r.error else None
    return {"rank": r.rank, "status": r.status, "error": error,
            "throughput": fmt.num(f.throughput) if f.throughput else "—",
            "median": f.throughput,
            "step": fmt.time(f.step_us) if f.step_us else "—",
            "comm": fmt.pct(f.comm_share) if f.comm_share is not None else "—",
            "overlap": fmt.pct(f.overlap_share) if f.overlap_share is not None else "—",
            "choices": RankChoices(error=bool(error))}


def _ranks_view(ranks: RanksReading | None, fmt: Fmt) -> dict[str, Any] | None:
    """Per-rank rows plus the total, the spread across ranks and the slowest rank;
    ``main`` is the rank whose profile the report's sections show."""
    if ranks is None:
        return None
    sp = ranks.spread
    return {"rows": [_rank_row(r, fmt) for r in ranks.rows], "world": len(ranks.rows),
            "main": ranks.main, "total": fmt.num(sp.total) if sp else None,
            "spread": fmt.pct(sp.spread) if sp and sp.spread is not None else None,
            "slowest": sp.slowest if sp else None,
            "missing": [r.rank for r in ranks.rows if r.status != "ok"]}


def run_view(run: Run, lang: str, analyses: list[Analysis], ranks: RanksReading | None = None,
             log_rows: int = LOG_ROWS) -> ReportView:
    """Everything report.md.j2 prints for a stored or fresh run, with its analyses (one
    per section: analyze_run's) and its ranks' reading (reading.ranks_of_run); its logs
    hold ``log_rows`` rows of each operator table (0: all). reporter.pipeline.report_view
    makes both."""
    fmt = Fmt(check_language(lang))
    env = run.env
    sections = [section_view(s, a, fmt, log_rows=log_rows)
                for s, a in zip(run.sections, analyses, strict=True)]
    _number(sections)
    return ReportView(
        ranks=_ranks_view(ranks, fmt),
        lang=lang,
        run_id=run.id,
        target=run.target.get("name"),
        seed=run.target.get("seed"),
        preset=run.target.get("preset"),
        larger_preset=bool(run.target.get("builtin")) and run.target.get("preset") != "large",
        batch_size=(fmt.int(run.target["batch_size"])
                    if run.target.get("batch_size") else None),
        on_gpu=devices.is_gpu(run.device),
        device_name=env.get("device_name") or run.device,
        device_memory=(fmt.bytes(env.get("device_memory_b"))
                       if env.get("device_memory_b") else None),
        created=fmt.date(run.created), created_iso=run.created,
        torch=env.get("torch"), cuda=env.get("hip") or env.get("cuda"),
        build_runtime=devices.ROCM.runtime if env.get("hip") else devices.CUDA.runtime,
        driver=env.get("driver"),
        cpu=env.get("cpu"), cpu_count=env.get("cpu_count"), threads=env.get("threads"),
        python=env.get("python"),
        sections=sections,
        multi=len(sections) > 1,
        plural=fmt.plural,
        n_findings=sum(len(s.findings) for s in sections),
        imported=False, source=None, marker=f"report:{run.target.get('name')}",
        rerender=markup.code(f"reporter render {run.id} --max-chars 0"),
        traces=[markup.code(s.trace) for s in sections if s.trace],
    )


def import_view(sections_in: list[Section], source: str, lang: str,
                analyses: list[Analysis], ranks: RanksReading | None = None) -> ReportView:
    """The report view of profiles read from someone's tables (no run around them), each
    wrapped in a Section, with their analyses; ``ranks`` for per-rank traces (the first
    rank's profile is the report, every rank is in the table)."""
    fmt = Fmt(check_language(lang))
    # The user has the tables they gave: no logs.
    sections = [section_view(s, a, fmt, logs=False)
                for s, a in zip(sections_in, analyses, strict=True)]
    _number(sections)
    device = next((s.profile.device_type for s in sections_in if s.profile.device_type), None)
    if ranks is not None:
        sections = sections[:1]
        sections[0].sub = markup.Md("##")
    return ReportView(
        ranks=_ranks_view(ranks, fmt),
        lang=lang, run_id=None, source=source, target=source, seed=None,
        preset=None, larger_preset=False, batch_size=None, on_gpu=device is not None,
        device_name=devices.KINDS[device].runtime if device in devices.KINDS else (
            device.upper() if device else "CPU"), device_memory=None,
        created=None, torch=None, cuda=None, build_runtime=devices.CUDA.runtime, driver=None,
        cpu=None,
        created_iso=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cpu_count=None, threads=None, python=None,
        sections=sections, multi=len(sections) > 1, plural=fmt.plural,
        n_findings=sum(len(s.findings) for s in sections), imported=True,
        marker=f"analyze:{source}",
    )
