"""The step's parts in the report: the breakdown of the step (host phases, device
activities, modules), its critical path, the step without the profiler, and the compiled
regions with their generated kernels, formatted for one locale."""

from __future__ import annotations

import re
from typing import Any, Literal

from ..analyze.breakdown import DEVICE_ACTIVITIES, HOST_PHASES
from ..analyze.compiled import KERNEL_ROWS, Compiled
from ..analyze.critical_path import BETWEEN, DEVICE_KINDS
from ..analyze.reading import StepReading
from ..model.run import Section
from . import markup
from .choices import (BreakdownChoices, CompiledChoices, CriticalChoices, LongStepChoices,
                      PathRowChoices, StreamChoices)
from .fmt import Fmt


MODULE_ROWS = 8  # modules shown in the step breakdown


def _breakdown_view(section: Section, r: StepReading | None, fmt: Fmt,
                    st: dict[str, Any], timed_us: float | None = None) -> dict[str, Any]:
    """The step breakdown's tables (mean per step and share), its one-line reading, and
    the long steps, the ranks side by side (``st``: Analysis.stragglers); or why there is
    none (``breakdown_note``: "table", "not-recorded")."""
    b = section.profile.breakdown
    if b is None or r is None:
        return {"breakdown": None,
                "breakdown_note": ("not-recorded" if section.throughput is not None
                                   else "table")}
    step = b.mean(b.steps_us)

    def rows(parts: dict[str, list[float]], order: tuple[str, ...]) -> list[dict[str, Any]]:
        out = []
        for name in order:
            mean = b.mean(parts.get(name, []))
            if mean > 0 and (mean / step >= 0.0005 if step else False):
                out.append({"name": name, "time": fmt.time(mean),
                            "share": fmt.pct(mean / step), "value": mean / step})
        return out

    host = rows(b.host_us, HOST_PHASES)
    device = rows(b.device_us, DEVICE_ACTIVITIES) if b.device_us else []
    reading: dict[str, Any] = {
        "lead": r.lead, "lead_share": fmt.pct(r.lead_us / step) if r.lead else None,
        "lead_time": fmt.time(r.lead_us) if r.lead else None,
        # Unmarked time larger than any phase: said first.
        "other_share": fmt.pct(r.other_us / step) if r.other_us is not None else None,
        "busy_share": None, "idle_share": None, "idle_reason": r.idle_reason,
        "comm_hidden": fmt.pct(r.comm_hidden) if r.comm_hidden is not None else None,
        "pageable": fmt.time(r.pageable_us) if r.pageable_us is not None else None,
        "gpu_bound": r.gpu_bound}
    if r.idle_us is not None:
        reading.update(idle_share=fmt.pct(r.idle_us / step) if step else "—",
                       busy_share=fmt.pct(1 - r.idle_us / step) if step else "—")
    # "2× the median", not "2.0×"; "2.3×" as it is
    long_steps = [{"n": x.n, "ratio": fmt.num(x.ratio, 0 if round(x.ratio, 1).is_integer()
                                              else 1), "time": fmt.time(x.us),
                   "choices": LongStepChoices(first=i == 0, count=len(r.long_steps))}
                  for i, x in enumerate(r.long_steps)]
    fwd, bwd = b.module_forward_us, b.module_backward_us
    top = sorted(fwd, key=lambda k: fwd[k] + bwd.get(k, 0.0), reverse=True)[:MODULE_ROWS]
    module_rows = [{"name": markup.code(k), "forward": fmt.time(fwd[k]),
                    "backward": fmt.time(bwd.get(k)) if bwd.get(k) else "—",
                    "share": fmt.pct((fwd[k] + bwd.get(k, 0.0)) / step) if step else "—"}
                   for k in top]
    streams = []
    for key, split in b.stream_us.items():  # more than one stream computes
        said = re.match(r"(?:device (\S+) )?stream (\S+)$", key)
        busy = b.mean(split.get("busy", []))
        streams.append({"device": said.group(1) if said else None,
                        "stream": said.group(2) if said else key,
                        "busy": fmt.time(busy), "busy_share": fmt.pct(busy / step) if step else "—",
                        **{k: fmt.pct(b.mean(split.get(k, [])) / step) if step else "—"
                           for k in ("idle_latency", "idle_queued", "idle_host")},
                        "choices": StreamChoices(device=bool(said and said.group(1)))})
    ls = b.launch
    launch = ({"per_step": fmt.count(ls["launches_per_step"]),
               "per_step_n": round(ls["launches_per_step"]),
               "median": fmt.time(ls["delay_median_us"]), "p90": fmt.time(ls["delay_p90_us"]),
               "max": fmt.time(ls["delay_max_us"]), "kernels": int(ls["kernels"]),
               "kernels_text": fmt.int(int(ls["kernels"])), "dry": int(ls["dry_steps"]),
               "dry_text": fmt.int(int(ls["dry_steps"])), "steps": int(ls["steps"]),
               "steps_text": fmt.int(int(ls["steps"])),
               # "in every step", not "in 4 of 4 steps" (reporter.render.sentences)
               "all_steps": int(ls["dry_steps"]) == int(ls["steps"])} if ls else None)
    queue = []
    for key, q in b.queue.items():
        said = re.match(r"(?:device (\S+) )?stream (\S+)$", key)
        queue.append({"device": said.group(1) if said else None,
                      "stream": said.group(2) if said else key,
                      "mean": fmt.num(q["mean"], 1), "max": fmt.int(int(q["max"])),
                      "full": fmt.time(q["full_us"]) if q["full_us"] > 0 else "0",
                      "choices": StreamChoices(device=bool(said and said.group(1)))})
    n = len(b.steps_us)
    copies = [{"direction": r["direction"], "kind": r["kind"], "copies": fmt.int(r["copies"]),
               "mean": fmt.bytes(r["bytes"] / r["copies"]) if r["copies"] else "—",
               "time": fmt.time(r["time_us"] / n), "achieved": fmt.si(r["gbps"] * 1e9, "B/s"),
               "peak": fmt.si(r["peak_gbps"] * 1e9, "B/s") if r.get("peak_gbps") else "—",
               "link": r["link"] if str(r.get("link")).startswith("PCIe") else None,
               "peak_share": fmt.pct(r["peak_share"]) if r.get("peak_share") is not None
               else "—"} for r in b.copies]
    # Copies "from pageable host memory" only where the table's pageable copies all go
    # host -> device; else "copies involving pageable host memory" (review C-B): the
    # reading sums every copy the trace names "Pageable", device -> host ones too
    # (breakdown: copy_pageable)
    if reading["pageable"] is not None:
        kinds = {c["direction"] for c in b.copies if c["kind"] == "pageable"}
        reading["pageable_from_host"] = kinds == {"h2d"}
    critical = _critical_view(b.critical, fmt)
    if critical is not None and r.idle_us is not None:
        critical["unprofiled"] = _unprofiled_path(b.critical, step - r.idle_us, timed_us, fmt)
    if critical is not None:
        critical["choices"] = CriticalChoices(unprofiled=bool(critical.get("unprofiled")))
    stragglers = ({"rows": [{"rank": str(r["rank"]).replace("rank ", ""),
                             "step": fmt.time(r["step_us"]),
                             **{k: fmt.time(r[k]) for k in ("compute", "communication", "host",
                                                            "waiting")}} for r in st["ranks"]],
                   # ranks on the CPU (gloo): no device time, no queued waits
                   "device": bool(st.get("device", True)),
                   "slowest": str(st["slowest"]).replace("rank ", ""),
                   "extra": fmt.time(st["extra_us"]), "extra_share": fmt.pct(st["extra_share"]),
                   "reference": fmt.time(st["reference_step_us"]), "cause": st["cause"],
                   # two ranks: the other one's step, not "the others' median" (review C-E)
                   "other": next((str(r["rank"]).replace("rank ", "") for r in st["ranks"]
                                  if r["rank"] != st["slowest"]), None)
                   if len(st["ranks"]) == 2 else None}
                  if st else None)
    # what the report's choices read (reporter.render.sentences)
    choices = BreakdownChoices(
        gpu_bound=bool(r.gpu_bound), unmarked_first=bool(reading["other_share"]),
        idle_known=bool(reading["busy_share"]), idle_reason=r.idle_reason,
        comm_hidden=bool(reading["comm_hidden"]), pageable=bool(reading["pageable"]),
        pageable_from_host=bool(reading.get("pageable_from_host")),
        dry_steps=int(ls["dry_steps"]) if ls else 0, launch_steps=int(ls["steps"]) if ls else 0,
        all_steps_dry=bool(ls) and int(ls["dry_steps"]) == int(ls["steps"]),
        two_ranks=bool(stragglers and stragglers["other"]),
        ranks_on_device=bool(stragglers and stragglers["device"]))
    return {
        "breakdown": {
            "modules": module_rows, "streams": streams, "launch": launch, "copies": copies,
            "queue": queue,
            "stragglers": stragglers, "critical": critical,
            "host": host, "device": device, "step": fmt.time(step), "steps": len(b.steps_us),
            "marked": b.marked, "phases_found": b.phases_found, "long_steps": long_steps,
            **reading, "choices": choices,
        },
        "breakdown_rows": b,  # for the chart
        "breakdown_note": None,
    }


def _critical_view(c: dict[str, Any], fmt: Fmt) -> dict[str, Any] | None:
    """The critical path of a step (analyze.critical_path), mean per step: its parts on
    the host (by phase), on the device (by activity) and between them, each with its share
    of the step and, for phases and activities, the share of their time in the step that
    lies on the path. None without a device (the path of a CPU trace is its host phases,
    already shown) or for runs stored before it."""
    step = c.get("step_us") or 0.0
    if not c.get("device") or step <= 0:
        return None
    rows = []
    groups: tuple[tuple[Literal["host", "device", "link"], tuple[str, ...], str, str | None],
                  ...] = (("host", HOST_PHASES, "host_us", "host_total_us"),
                          ("device", DEVICE_KINDS, "device_us", "device_total_us"),
                          ("link", BETWEEN, "between_us", None))
    for group, keys, on, whole in groups:
        for k in keys:
            us = c.get(on, {}).get(k, 0.0)
            if us <= 0.0005 * step:  # under 0.05% of the step: not worth a row
                continue
            total = c.get(whole, {}).get(k, 0.0) if whole else 0.0
            rows.append({"group": group, "name": k, "time": fmt.time(us),
                         "share": fmt.pct(us / step),
                         "on_path": fmt.pct(min(1.0, us / total)) if total > 0 else "—",
                         "choices": PathRowChoices(group=group)})
    parts = {g: sum(c.get(key, {}).values()) / step
             for g, key in (("host", "host_us"), ("device", "device_us"),
                            ("link", "between_us"))}
    return {"rows": rows, "step": fmt.time(step), "steps": int(c.get("steps", 0)),
            "steps_text": fmt.int(int(c.get("steps", 0))),
            **{f"{g}_share": fmt.pct(v) for g, v in parts.items()}}


# The profiled step this much longer than the timed one, with the host holding most of
# its path: the report says what the step was without the profiler.
PROFILER_LENGTHENED = 1.25


def _unprofiled_path(c: dict[str, Any], busy_us: float, timed_us: float | None, fmt: Fmt
                     ) -> dict[str, str] | None:
    """Where the host holds most of the profiled step's path and the profiler made the
    step much longer: the step timed without it, the GPU's busy time per step and its
    share of that step, and what the profiler added per step (a host-bound profiled step
    can be a GPU-bound real one: the H200 transformer-fixed's inference, 95.8% host on
    the path of 33.8 ms, 18.6 ms timed, 16.8 ms of GPU work)."""
    step = c.get("step_us") or 0.0
    if not timed_us or step <= 0 or step < PROFILER_LENGTHENED * timed_us:
        return None
    if sum(c.get("host_us", {}).values()) / step <= 0.5:
        return None
    return {"timed": fmt.time(timed_us), "gpu": fmt.time(busy_us),
            "gpu_share": fmt.pct(min(1.0, busy_us / timed_us)),
            "added": fmt.time(step - timed_us)}


SOURCE_LINES = 3  # lines of model code shown per generated kernel
REGION_PARTS = ("graphs", "copies", "kernels")  # how compiled regions launched their GPU work


def _compiled_view(section: Section, c: Compiled | None, fmt: Fmt) -> dict[str, Any]:
    """What torch.compile did (reporter.analyze.compiled), per profiled step: the time in
    compiled regions against eager code, Dynamo's guard checks and recompilations, the
    generated kernels by the operators they fuse, CUDA graphs; None when nothing was
    compiled."""
    if c is None:
        return {"compiled": None}
    n, device = c.steps, section.profile.has_device
    total = section.profile.self_device_us if device else c.step_us

    def count(v: float) -> str:  # per step: whole when it is
        return fmt.int(int(v)) if v == int(v) else fmt.num(v, 1)

    view: dict[str, Any] = {
        "steps": n,
        "regions": len(c.regions), "frames": c.frames,
        "calls": count(c.region_calls / n), "calls_n": c.region_calls / n,
        "time": fmt.time(c.compiled_us / n),
        "share": fmt.pct(min(1.0, c.compiled_us / c.step_us)) if c.step_us else None,
        "eager": fmt.time(max(0.0, c.step_us - c.compiled_us) / n),
        # Per profiled step, where the trace marks them: the lowest and highest.
        "low": (fmt.time(min(c.step_compiled_us)) if len(c.step_compiled_us) > 1
                and min(c.step_compiled_us) != max(c.step_compiled_us) else None),
        "high": fmt.time(max(c.step_compiled_us)) if c.step_compiled_us else None,
        "step": fmt.time(c.step_us / n),
        "device_time": (fmt.time(c.compiled_device_us / n)
                        if device and c.compiled_device_us else None),
        "device_share": (fmt.pct(min(1.0, c.compiled_device_us / total))
                         if device and c.compiled_device_us and total else None),
        # that time by how it was launched, where more than one way holds some of it
        # ("other" copies and kernels only beside the graphs' replays)
        "device_parts": [{"part": part if c.device_split_us.get("graphs") else f"{part}_alone",
                          "time": fmt.time(us / n)} for part, us in parts]
        if device and len(parts := [(p, c.device_split_us[p]) for p in REGION_PARTS
                                    if c.device_split_us.get(p, 0.0) > 0]) > 1 else [],
        "lookups": count(c.cache_lookups / n) if c.cache_lookups else None,
        "lookups_n": c.cache_lookups / n,
        "lookup_time": fmt.time(c.cache_lookup_us / n),
        "recompiled": [markup.code(f) for f in c.recompiled],
        "compile_time": fmt.time(c.compile_us / n) if c.compile_us else None,
        "kernels": [{"fused": markup.code(k.fused) if k.fused else None,
                     "region": markup.code(k.region) if k.region else "—",
                     "sources": [markup.code(line) for line in k.sources[:SOURCE_LINES]],
                     "sources_more": max(0, len(k.sources) - SOURCE_LINES),
                     "name": markup.code(k.names[0]), "backend": k.backend,
                     "kind": k.kind or "none", "calls": count(k.calls / n),
                     "time": fmt.time(k.time_us / n),
                     "share": fmt.pct(k.time_us / total) if total else "—"}
                    for k in c.kernels[:KERNEL_ROWS]],
        "kernels_more": max(0, len(c.kernels) - KERNEL_ROWS),
        "by_region": any(k.region for k in c.kernels),
        "by_source": any(k.sources for k in c.kernels[:KERNEL_ROWS]),
        # Graph breaks, where a trace placed the regions (None: the profile cannot say).
        "breaks": (count(c.breaks / n) if c.breaks else None) if section.profile.compiled
        else None,
        "breaks_n": c.breaks / n,
        "breaks_known": bool(section.profile.compiled),
        "break_time": fmt.time(c.break_us / n),
        "break_pairs": [markup.code(p) for p in sorted(c.break_pairs,
                                                       key=lambda p: -c.break_pairs[p])],
        "kernel_time": fmt.time(c.kernel_us / n) if c.kernels else None,
        "on_gpu": device,
        "graph_launches": count(c.graph_launches / n) if c.graph_launches else None,
        "graph_launches_n": c.graph_launches / n,
        "graph_kernels": count(c.graph_kernels / n),
        "graph_kernels_n": c.graph_kernels / n,
        "graph_time": fmt.time(c.graph_kernel_us / n),
    }
    # what the report's choices read (reporter.render.sentences)
    view["choices"] = CompiledChoices(
        device_parts=bool(view["device_parts"]), device_share=bool(view["device_share"]),
        share=bool(view["share"]), lookups=bool(view["lookups"]), step_range=bool(view["low"]),
        breaks=bool(view["breaks"]), frames=c.frames, breaks_known=view["breaks_known"],
        by_region=view["by_region"], by_source=view["by_source"],
        recompiled=bool(view["recompiled"]), compile_time=bool(view["compile_time"]),
        kernels=len(view["kernels"]), kernels_more=view["kernels_more"],
        unnamed_fusions=any(k["fused"] is None for k in view["kernels"]), on_gpu=device)
    return {"compiled": view}
