"""Operator tables in the layout of ``key_averages().table()``.

Reports fold the raw tables into their logs, as the seeds do. The runner builds
its Profile from the exported trace (reporter.ingest.traces: the same numbers as
key_averages, an order of magnitude faster) and stores numbers only; the report
prints the tables from the Profile, in torch 2.x's layout, as long as it has room
for: reporter.ingest.tables reads them back, and so does anyone used to the
profiler's output.
"""

from __future__ import annotations

from ..model import device as devices
from ..model.profile import Op, Profile

_SORT_KEYS = {"self_cpu_time_total": "self_cpu_us", "self_cuda_time_total": "self_device_us",
              "cpu_time_total": "cpu_total_us", "count": "calls"}


def _time(us: float) -> str:
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f}s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _mem(b: int) -> str:
    for size, unit in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")):
        if abs(b) >= size:
            return f"{b / size:.2f} {unit}"
    return f"{b} B"


def _pct(part: float, total: float) -> str:
    return f"{100.0 * part / total:.2f}%" if total else "0.00%"


LOG_ROWS = 30  # rows of each table in a report's logs


def log_tables(profile: Profile, row_limit: int = LOG_ROWS, say_cut: bool = False
               ) -> list[tuple[str, str]]:
    """The tables a report folds into its logs, as the seeds do, by key: by device time
    on a GPU profile, by CPU time, and by input shape. ``say_cut``: a line says how many
    rows were left out (a report shortened to fit a comment)."""
    key = "self_cuda_time_total" if profile.has_device else "self_cpu_time_total"
    tables = [("cpu", format_table(profile, "self_cpu_time_total", row_limit, say_cut=say_cut)),
              ("by_shape", format_table(profile, key, row_limit, shapes=True, say_cut=say_cut))]
    if profile.has_device:
        tables.insert(0, ("device", format_table(profile, key, row_limit, say_cut=say_cut)))
    return tables


def format_table(profile: Profile, sort_by: str = "self_cpu_time_total",
                 row_limit: int = LOG_ROWS, shapes: bool = False, name_width: int = 55,
                 shapes_width: int = 80, say_cut: bool = False) -> str:
    """One table: the top ``row_limit`` rows by ``sort_by`` (all when it is 0 or less),
    with the totals as footers."""
    device = profile.has_device
    rows: list[Op] = list(profile.ops_by_shape if shapes else profile.ops)
    rows.sort(key=lambda o: getattr(o, _SORT_KEYS.get(sort_by, "self_cpu_us")), reverse=True)
    cut = max(0, len(rows) - row_limit) if row_limit > 0 else 0
    rows = rows[:row_limit] if row_limit > 0 else rows
    header = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    # torch's columns, named by the device's runtime (a HIP build of torch says CUDA)
    rt = devices.named(profile.device_type).runtime
    if device:
        header += [f"Self {rt}", f"Self {rt} %", f"{rt} total", f"{rt} time avg"]
    header += ["CPU Mem", "Self CPU Mem"]
    if device:
        header += [f"{rt} Mem", f"Self {rt} Mem"]
    header.append("# of Calls")
    if shapes:
        header.append("Input Shapes")
    cpu, dev = profile.self_cpu_us, profile.self_device_us
    body = []
    for o in rows:
        name = o.name if len(o.name) < name_width - 3 else o.name[:name_width - 3] + "..."
        calls = max(o.calls, 1)
        cells = [name, _pct(o.self_cpu_us, cpu), _time(o.self_cpu_us),
                 _pct(o.cpu_total_us, cpu), _time(o.cpu_total_us), _time(o.cpu_total_us / calls)]
        if device:
            cells += [_time(o.self_device_us), _pct(o.self_device_us, dev),
                      _time(o.device_total_us),
                      _time(o.device_total_us / calls)]
        cells += [_mem(o.cpu_mem_b), _mem(o.self_cpu_mem_b)]
        if device:
            cells += [_mem(o.device_mem_b), _mem(o.self_device_mem_b)]
        cells.append(str(o.calls))
        if shapes:
            text = o.input_shapes or "[]"
            cells.append(text if len(text) <= shapes_width else text[:shapes_width - 3] + "...")
        body.append(cells)
    widths = [max(len(header[i]), *(len(r[i]) for r in body)) if body else len(header[i])
              for i in range(len(header))]
    widths = [max(w, 12) for w in widths]
    widths[0] = max(min(name_width, max((len(r[0]) for r in body), default=4)), 4)
    sep = "  ".join("-" * w for w in widths) + "  "
    lines = [sep, "  ".join(h.rjust(w) for h, w in zip(header, widths)) + "  ", sep]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) + "  " for r in body]
    if say_cut and cut:
        lines.append(f"... ({cut} more rows)")
    lines.append(sep)
    lines.append(f"Self CPU time total: {_time(cpu)}")
    if device:
        lines.append(f"Self {rt} time total: {_time(dev)}")
    return "\n".join(lines) + "\n"
