"""Profiler tables written by the tests, in each form the corpus shows people pasting
(../shared/corpus/tables): torch 1.3's left-aligned columns, today's right-aligned ones,
indented, behind a comment sign, with memory and FLOP columns, CUDA's and XPU's columns,
a subset of the columns, compact widths, a Source Location column over several lines,
with and without the footer's totals, and a table cut partway.

Numbers are printed as torch's key_averages().table() prints them
(torch/autograd/profiler_util.py: _format_time, _format_memory, "%.2f%%"), from the
Op rows given, so a reader's result can be checked against the rows themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from reporter.model.profile import Op


def fmt_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def fmt_mem(b: int) -> str:
    kb, mb, gb = 1024, 1024 ** 2, 1024 ** 3
    if abs(b) >= gb:
        return f"{b / gb:.2f} Gb"
    if abs(b) >= mb:
        return f"{b / mb:.2f} Mb"
    if abs(b) >= kb:
        return f"{b / kb:.2f} Kb"
    return f"{b} b"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%" if whole > 0 else "0.00%"


@dataclass(frozen=True)
class Form:
    """How one table is laid out: its columns (torch's headers), the device's name in
    them, and the text around them."""

    columns: tuple[str, ...]
    device: str = "CUDA"
    legacy: bool = False       # torch <= 1.4: left-aligned, "Number of Calls"
    indent: str = ""           # every line indented (a log, a notebook's output)
    prefix: str = ""           # every line behind a comment sign
    footer: bool = True        # "Self CPU time total: ..." after the table
    name_width: int = 55       # names this long or longer are cut with "..."
    width: int = 12            # each number column's width (compact: as wide as needed)
    stack: bool = False        # a Source Location column over several lines


# The columns of today's table, by what the profile holds.
CPU = ("Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg")
DEV = ("Self {D}", "Self {D} %", "{D} total", "{D} time avg")
MEM = ("CPU Mem", "Self CPU Mem")
CALLS = ("# of Calls",)

FORMS = {
    # 01, 03: torch 1.3/1.4, left-aligned, CUDA totals without self device time
    "legacy": Form(("Name", "Self CPU total %", "Self CPU total", "CPU total %", "CPU total",
                    "CPU time avg", "CUDA total %", "CUDA total", "CUDA time avg",
                    "Number of Calls", "Input Shapes"), legacy=True, width=15),
    # 05: indented, CPU memory and FLOPs
    "cpu-mem-flops-indented": Form(CPU + MEM + CALLS + ("Total FLOPs",), indent="    "),
    # 06, 07: indented, CPU only, the user's own labels
    "cpu-indented": Form(CPU + CALLS, indent="    ", name_width=22),
    # 09: CPU memory, no footer
    "cpu-mem-no-totals": Form(CPU + MEM + CALLS, indent="    ", footer=False, name_width=29),
    # 11, 12, 15: CUDA columns
    "cuda": Form(CPU + DEV + CALLS),
    # 10: XPU columns
    "xpu": Form(CPU + DEV + CALLS, device="XPU"),
    # 14: a subset of the columns (a documentation page's)
    "subset-flops": Form(("Name", "Self CPU", "Self {D}", "Total FLOPs")),
    # 17: XPU columns only, each line behind "#"
    "xpu-comment-prefixed": Form(("Name", "Self {D}", "Self {D} %", "{D} total",
                                  "{D} time avg") + CALLS, device="XPU", prefix="#    ",
                                 name_width=30),
    # 18: compact widths
    "cuda-compact": Form(CPU + DEV + CALLS, name_width=27, width=0),
    # 21: with the stack, a Source Location column over several lines
    "xpu-with-stack": Form(CPU + DEV + CALLS + ("Source Location",), device="XPU",
                           stack=True),
}


def shown_name(name: str, form: Form) -> str:
    """The name as the table prints it: cut at the column's width with "..."."""
    return name[:form.name_width - 3] + "..." if len(name) >= form.name_width else name


def write_table(ops: list[Op], form: Form, cut_after: int | None = None) -> str:
    """``ops`` as torch prints them in ``form``; ``cut_after`` rows: the table stops there
    (a paste cut short), without its closing line or footer."""
    d = form.device
    columns = [c.replace("{D}", d) for c in form.columns]
    self_cpu = sum(o.self_cpu_us for o in ops)
    self_dev = sum(o.self_device_us for o in ops)

    def cell(o: Op, c: str) -> str:
        values = {
            "Name": shown_name(o.name, form),
            "Self CPU %": _pct(o.self_cpu_us, self_cpu),
            "Self CPU total %": _pct(o.self_cpu_us, self_cpu),
            "Self CPU": fmt_time(o.self_cpu_us), "Self CPU total": fmt_time(o.self_cpu_us),
            "CPU total %": _pct(o.cpu_total_us, self_cpu), "CPU total": fmt_time(o.cpu_total_us),
            "CPU time avg": fmt_time(o.cpu_total_us / max(o.calls, 1)),
            f"Self {d}": fmt_time(o.self_device_us),
            f"Self {d} %": _pct(o.self_device_us, self_dev),
            f"{d} total %": _pct(o.device_total_us, self_dev),
            f"{d} total": fmt_time(o.device_total_us),
            f"{d} time avg": fmt_time(o.device_total_us / max(o.calls, 1)),
            "CPU Mem": fmt_mem(o.cpu_mem_b), "Self CPU Mem": fmt_mem(o.self_cpu_mem_b),
            "# of Calls": str(o.calls), "Number of Calls": str(o.calls),
            "Input Shapes": o.input_shapes or "[]",
            "Total FLOPs": f"{2.0 * o.calls * 1e6:.3f}" if "mm" in o.name else "--",
            "Source Location": f"<built-in method {o.name.split('::')[-1]}>",
        }
        return values[c]

    rows = [[cell(o, c) for c in columns] for o in ops]
    widths = []
    for i, c in enumerate(columns):
        if c == "Name":
            widths.append(max(len(c), *(len(r[i]) for r in rows)))
        elif form.width:
            widths.append(max(form.width, len(c) + 1, *(len(r[i]) for r in rows)))
        else:
            widths.append(max(len(c), *(len(r[i]) for r in rows)))

    def line(cells: list[str]) -> str:
        if form.legacy:
            text = "  ".join(t.ljust(w) for t, w in zip(cells, widths))
        else:
            text = "  ".join(t.rjust(w) if c != "Source Location" else t.ljust(w)
                             for t, w, c in zip(cells, widths, columns))
        return form.prefix + form.indent + text

    sep = form.prefix + form.indent + "  ".join("-" * w for w in widths)
    out = [sep, line(columns), sep]
    for n, r in enumerate(rows):
        if cut_after is not None and n == cut_after:
            return "\n".join(out) + "\n"
        out.append(line(r))
        if form.stack:  # the rest of the stack: only the last column filled
            for frame in ("model.py(168): forward", "torch/nn/modules/module.py(1777): "
                          "_call_impl"):
                out.append(line(["" for _ in columns[:-1]] + [frame]))
    out.append(sep)
    if form.footer:
        out.append(form.prefix + form.indent + f"Self CPU time total: {fmt_time(self_cpu)}")
        if any(c.startswith(f"Self {d}") for c in columns):
            out.append(form.prefix + form.indent + f"Self {d} time total: {fmt_time(self_dev)}")
        elif form.legacy:
            out.append(f"{d} time total: {fmt_time(sum(o.device_total_us for o in ops))}")
    return "\n".join(out) + "\n"


# Rows of every magnitude torch prints (us, ms, s; b, Kb, Mb, Gb; negative memory), names
# as people give them (record_function labels with spaces and signs, a name cut short),
# operators and kernels.
ROWS = [
    Op("aten::mm", calls=1940, self_cpu_us=74_087.0, cpu_total_us=75_140.0,
       self_device_us=98_681.0, device_total_us=98_681.0, cpu_mem_b=5 << 20,
       self_cpu_mem_b=5 << 20),
    Op("STUDENT - NAIVE ATTENTION", calls=1, self_cpu_us=2_229_600.0,
       cpu_total_us=2_230_538.0, cpu_mem_b=int(4.5 * (1 << 20)), self_cpu_mem_b=-(1 << 20)),
    Op("is this faster (?)", calls=20, self_cpu_us=1024.0, cpu_total_us=2627.0,
       cpu_mem_b=1587, self_cpu_mem_b=-80),
    Op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", calls=4,
       self_cpu_us=464.0, cpu_total_us=1306.0, cpu_mem_b=1587),
    Op("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
       calls=120, self_device_us=70_400.0, device_total_us=70_400.0),
    Op("aten::copy_", calls=404, self_cpu_us=2028.0, cpu_total_us=24_636.0,
       self_device_us=14_614.0, device_total_us=14_614.0, cpu_mem_b=3 << 30,
       self_cpu_mem_b=-(34 << 30)),
    Op("aten::empty", calls=330, self_cpu_us=12.979, cpu_total_us=12.979, cpu_mem_b=800),
    Op("cudaDeviceSynchronize", calls=10_001, self_cpu_us=219_449.0, cpu_total_us=219_449.0),
]
