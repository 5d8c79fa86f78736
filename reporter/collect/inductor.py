"""The model code each kernel Inductor generates came from, told by Inductor itself.

With ``torch._inductor.config.trace.provenance_tracking_level`` set, Inductor writes, for
each graph it compiles (or loads from its cache), a structured-log artifact
``inductor_provenance_tracking_kernel_stack_traces``: per kernel (``cpp_fused_...:N``,
``triton_...:N``), the stack traces of the model code its nodes came from. Captured here
from torch's structured log while the model compiles, keyed by the compiled region
(``"F/C"``: the artifact's frame and compile ids) and the kernel's name without
Inductor's numbering of the artifact; the profile names the same kernel with its
graph's prefix (``graph_0_cpp_fused_...``, see reporter.analyze.compiled).
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager
from typing import Any, Iterator

ARTIFACT = "inductor_provenance_tracking_kernel_stack_traces"
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n(?P<code>[^\n]*)')
MAX_LINES = 8  # model lines kept per kernel


def _lines(traces: list[Any]) -> list[str]:
    """``file.py:LINE code`` of the innermost frame of each stack trace, in line order."""
    out: set[tuple[str, int, str]] = set()
    for trace in traces:
        if not isinstance(trace, str):
            continue
        frames = list(_FRAME.finditer(trace))
        if frames:
            m = frames[-1]
            out.add((m["file"].rsplit("/", 1)[-1], int(m["line"]), m["code"].strip()))
    return [f"{f}:{n} {code}".rstrip() for f, n, code in sorted(out)][:MAX_LINES]


class _Capture(logging.Handler):
    def __init__(self, sources: dict[str, list[str]]):
        super().__init__(logging.DEBUG)
        self.sources = sources

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", None)
        if not isinstance(meta, dict):
            return
        artifact = meta.get("artifact")
        if not isinstance(artifact, dict) or artifact.get("name") != ARTIFACT:
            return
        try:
            kernels = json.loads(getattr(record, "payload", None) or "{}")
        except ValueError:
            return
        region = f"{meta.get('frame_id')}/{meta.get('frame_compile_id')}"
        if not isinstance(kernels, dict):
            return
        for name, traces in kernels.items():
            base = str(name).rsplit(":", 1)[0]
            if base.startswith("extern_kernels.") or not isinstance(traces, list):
                continue  # library calls keep their aten names in the profile
            key = f"{region} {base}"
            self.sources[key] = sorted(set(self.sources.get(key, [])) | set(_lines(traces)))


def compiled_model(model: Any) -> bool:
    """Whether torch.compile wraps the model, one of its modules or a module's forward."""
    from ..errors import signals_deferred

    try:
        # Dynamo's first import (0.9 s, 800 modules, in every run) loses a KeyboardInterrupt
        # raised inside it, as torch's own does (in numpy.random's): a signal waits for it.
        with signals_deferred():
            from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # a torch without Dynamo
        return False
    return any(isinstance(m, OptimizedModule)
               or hasattr(getattr(m, "forward", None), "_torchdynamo_orig_callable")
               for m in model.modules())


@contextmanager
def kernel_sources(enabled: bool) -> Iterator[dict[str, list[str]]]:
    """While the block runs, Inductor tracks where its kernels come from, and the mapping
    fills: ``"F/C cpp_fused_gelu_view_2"`` -> ``["transformer.py:57 h = self.ff(x)"]``;
    its C++ kernels are profiled by name (``cpp.enable_kernel_profile``). Both are put
    back after. Nothing is set when ``enabled`` is false or torch has no Inductor."""
    sources: dict[str, list[str]] = {}
    if not enabled:
        yield sources
        return
    try:
        import torch._inductor.config as inductor
        from torch._logging._internal import trace_log
        level = inductor.trace.provenance_tracking_level
    except (ImportError, AttributeError):
        yield sources
        return
    handler, log_level = _Capture(sources), trace_log.level
    # Inductor's C++ kernels (the CPU backend) show in the profile, by name, only when
    # compiled with this flag: a user's compiled model gets it as the built-in twin does
    # (its first call, in the warm-up, compiles inside this block), and it is put back.
    cpp: Any = getattr(inductor, "cpp", None)
    named = getattr(cpp, "enable_kernel_profile", None)
    if named is not None:
        cpp.enable_kernel_profile = True
    inductor.trace.provenance_tracking_level = 1
    trace_log.addHandler(handler)
    trace_log.setLevel(logging.DEBUG)
    try:
        yield sources
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(log_level)
        inductor.trace.provenance_tracking_level = level
        if named is not None:
            cpp.enable_kernel_profile = named


def attach(compiled: dict[str, Any], sources: dict[str, list[str]]) -> None:
    """Each generated kernel of a profile's ``compiled`` facts gets the model lines it
    came from (``sources``), when Inductor told them for its region."""
    for k in compiled.get("kernels", []):
        base = re.sub(r"^graph_\d+_", "", k["name"])
        lines = sources.get(f"{k['region']} {base}")
        if lines:
            k["sources"] = lines
