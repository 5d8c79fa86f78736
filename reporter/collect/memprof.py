"""What a target's own tensors hold at their peak, by category, over one step.

torch.profiler's memory profile (record_shapes, profile_memory and with_stack)
follows every tensor the step touches, including those that existed before it
(parameters, optimizer state), and sorts each into a category by the data flow:
parameters, gradients, optimizer state, activations, temporaries, inputs. The
sum is the memory this target needs, whatever earlier targets left in the
process: the process's resident set cannot say that, because memory the
allocator kept is reused without showing up again.

It is a separate pass of one step, after the timed windows and the profiled
steps: with_stack slows the step, and the analysis is Python (about a second
for a step of a few thousand operators on a 2-core CPU).
"""

from __future__ import annotations

import sys
import warnings
from typing import Callable

from torch.profiler import profile

from ..model.run import TensorMemory
from ..model import device as kinds
from . import device as devices

# torch.profiler._memory_profiler.Category names -> ours; None is memory the
# profiler saw allocated but could not attribute to a tensor.
_CATEGORIES = {"PARAMETER": "parameters", "GRADIENT": "gradients",
               "OPTIMIZER_STATE": "optimizer_state", "ACTIVATION": "activations",
               "TEMPORARY": "temporaries", "INPUT": "inputs",
               "AUTOGRAD_DETAIL": "autograd", None: "unknown"}
MAX_POINTS = 200  # of the memory-over-time chart


def _device_key(device: str) -> str:
    """The memory profile's name of the device the step's tensors are on: "cuda:N"."""
    dev = devices.get(device)
    key = dev.tensor_device
    if kinds.cuda_api(key) and ":" not in key:
        return f"cuda:{dev.index()}"
    return key


def tensor_memory(step: Callable[[], None], device: str) -> TensorMemory | str:
    """Profile one ``step`` for memory: a TensorMemory, or why there is none (a note id
    that terms.j2 words: torch-version, failed, no-allocations)."""
    try:
        from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline
    except ImportError:
        return "torch-version"
    dev = devices.get(device)
    prof = profile(activities=dev.activities(), record_shapes=True, profile_memory=True,
                   with_stack=True)
    with prof:
        step()
    dev.synchronize()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            timeline = MemoryProfileTimeline(prof._memory_profile())
            times, sizes = timeline._coalesce_timeline(_device_key(device))
    except Exception as exc:  # a private API: its failure is not the target's
        print(f"reporter: warning: torch's memory profile failed ({type(exc).__name__}: "
              f"{exc}); the report has no memory breakdown by category",
              file=sys.stderr, flush=True)
        return "failed"
    if not times:
        return "no-allocations"
    # Column 0 of sizes is "no category"; the others follow _CATEGORY_TO_INDEX.
    columns = {0: _CATEGORIES[None]}
    for category, index in _CATEGORY_TO_INDEX.items():
        name = str(getattr(category, "name", category))
        columns[index + 1] = _CATEGORIES.get(name, "unknown")
    return summarize(times, sizes, columns)


def summarize(times: list[int], sizes: list[list[int]],
              columns: dict[int, str]) -> TensorMemory:
    """Peak, categories at the peak and a downsampled timeline from the coalesced one
    (``times`` in microseconds, ``sizes[i][column]`` in bytes)."""
    totals = [sum(row) for row in sizes]
    peak = max(range(len(totals)), key=totals.__getitem__)

    def by_category(row: list[int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for column, size in enumerate(row):
            name = columns.get(column, "unknown")
            out[name] = out.get(name, 0) + max(0, int(size))
        return out

    # Buckets of consecutive points, each represented by its largest total: the
    # chart keeps the peak however many points are dropped.
    n = len(times)
    step = max(1, -(-n // MAX_POINTS))
    chosen = [max(range(i, min(i + step, n)), key=totals.__getitem__)
              for i in range(0, n, step)]
    t0 = times[0]
    names = sorted({name for name in columns.values()})
    series: dict[str, list[int]] = {name: [] for name in names}
    for i in chosen:
        row = by_category(sizes[i])
        for name in names:
            series[name].append(row.get(name, 0))
    return TensorMemory(
        peak_b=max(0, int(totals[peak])),
        at_peak_b={k: v for k, v in by_category(sizes[peak]).items() if v > 0},
        timeline_ms=[round((times[i] - t0) / 1e3, 3) for i in chosen],
        timeline_b={k: v for k, v in series.items() if any(v)})

