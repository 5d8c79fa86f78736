"""torch.compile in a profile: compiled regions, the kernels Inductor generated, CUDA
graphs, and compilation inside the profiled window (the ``recompilation`` rule).

Read from the aggregated operators of any profile (a live run, a stored one, a trace),
and from the CUDA-graph counts that reading a trace records (``Profile.graph_*``):

- a compiled region is ``Torch-Compiled Region: F/C`` (torch 2.1 on: frame F, its C-th
  compilation), else, in older traces, ``CompiledFunction``; its backward runs as
  ``CompiledFunctionBackward`` from the autograd engine, outside the region. The time
  inside them is their inclusive time; on a GPU, the device time of the kernels they
  launched;
- Dynamo checks its guards before each region (``TorchDynamo Cache Lookup``);
- Inductor names a generated kernel after the operators it fuses:
  ``triton_poi_fused_add_mul_0`` (Triton: ``poi`` pointwise, ``red`` reduction, ``per``
  persistent reduction, ``tem`` template), ``cpp_fused_gelu_native_layer_norm_0`` (its C++
  backend, on the CPU; recorded only with ``torch._inductor.config.cpp.enable_kernel_profile``,
  as ``graph_0_cpp_fused_...``); torch 2.0 named Triton kernels by their arguments
  (``triton__0d1d2d``), which says nothing of what they fuse;
- compilation inside the window is Dynamo's ``entire_frame_compile`` (or, before it,
  ``_compile.compile_inner (dynamo_timed)``) with the compile id in its ``..._data:
  compile_id=F/C`` mark;
- a graph break splits a compiled frame: it runs its graph, then the code Dynamo could
  not compile eagerly, then calls the frame Dynamo resumes in, whose region nests in the
  first one; the host time from the end of the outer graph to the nested region is the
  break's (``graph-break``). From a trace only (``Profile.compiled``, which also places
  each generated kernel in its region).

No FLOPs or bytes are modelled for generated kernels: the recorded shapes of a region
say what goes in and out, not what each kernel reads, and a guess is not printed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..model.choice import OVER_STEPS, of, when
from ..model.finding import Evidence, Finding, Saving, opt
from ..model.profile import KIND_ANNOTATION, KIND_KERNEL, KIND_OP, Op, Profile
from . import savings
from .findings import Worth, rule, step_wall_us

REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
FORWARD = "CompiledFunction"  # the forward of a compiled graph with autograd
BACKWARD = "CompiledFunctionBackward"
CACHE_LOOKUP = "TorchDynamo Cache Lookup"
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch")
# Compilation: the outermost of Dynamo's timed ranges that a version records.
COMPILING = ("entire_frame_compile", "_compile.compile_inner (dynamo_timed)",
             "_compile.compile_inner")
COMPILE_ID = re.compile(r"compile_id=(\d+)/(\d+)")
GENERATED = re.compile(r"^(?:graph_\d+_)?(?P<backend>triton|cpp)_"
                       r"(?:(?P<kind>poi|per|red|tem|for|mm|bmm|conv)_)?fused_"
                       r"(?P<ops>.+?)(?:_\d+)?$")
UNNAMED_TRITON = re.compile(r"^triton_+\d[\dd_]*$")  # torch 2.0: triton__0d1d2d3d
KERNEL_ROWS = 10  # generated kernels listed in a report
# The host events that wrap a compiled graph's call, whose self time on the device is the
# graph's kernels (its CUDA graph replays): no operator of the user's.
GRAPH_CALL = re.compile(r"^(?:CompiledFunction|CompiledFunctionBackward|"
                        r"autograd::engine::evaluate_function: CompiledFunctionBackward|"
                        r"## Call CompiledFxGraph .*|Torch-Compiled Region: \d+/\d+)$")


def wraps_a_graph(name: str) -> bool:
    """Whether an operator row is a compiled graph's call (GRAPH_CALL), not an operator."""
    return GRAPH_CALL.match(name) is not None


@dataclass
class GeneratedKernel:
    """Generated kernels of one kind that fuse the same operators (Inductor numbers the
    kernels of a graph; kernels with the same fused operators are one row)."""

    backend: str  # "triton" or "cpp"
    kind: str | None  # poi, red, per, tem, ...; None when the name does not say
    fused: str | None  # the fused operators as Inductor joined them; None: not in the name
    calls: int
    time_us: float  # device time on a GPU, CPU time of the kernel's range on the CPU
    names: list[str] = field(default_factory=list)
    # "F/C" of the compiled region they ran in (their backward included); None where the
    # profile does not place them (a table, a torch 2.0 trace, a run stored before it).
    region: str | None = None
    # The model code they came from ("transformer.py:57 h = self.ff(x)"), as Inductor
    # told it while compiling (reporter.collect.inductor); empty when it did not.
    sources: list[str] = field(default_factory=list)


@dataclass
class Compiled:
    """What torch.compile did in a profile; times are totals over the profiled steps."""

    steps: int
    step_us: float  # the profiled steps' wall time, in total
    regions: list[str]  # "F/C" of each compiled region seen, or [] (older traces)
    region_calls: int
    compiled_us: float  # host time inside compiled regions and their backward
    compiled_device_us: float  # device time of the kernels launched from them
    cache_lookups: int
    cache_lookup_us: float
    compile_us: float  # compiling inside the window
    compile_ids: list[str]  # "F/C" of what was compiled inside the window
    kernels: list[GeneratedKernel]
    graph_launches: int
    graph_kernels: int
    graph_kernel_us: float
    breaks: int = 0  # graph breaks between regions seen (a trace only)
    break_us: float = 0.0  # host time between the regions a break split
    break_lookup_us: float = 0.0  # Dynamo's guard checks in that time
    break_pairs: dict[str, int] = field(default_factory=dict)  # "0/0 → 1/0": times
    step_compiled_us: list[float] = field(default_factory=list)  # compiled_us per step
    # compiled_device_us by how it was launched (a trace only): "graphs" (replayed by a
    # CUDA graph, generated kernels included), "copies" (copies and sets), "kernels"
    device_split_us: dict[str, float] = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return len({r.split("/")[0] for r in self.regions})

    @property
    def recompiled(self) -> list[str]:
        """Frames compiled more than once ("F"), seen in the regions or compiled here."""
        ids = set(self.regions) | set(self.compile_ids)
        return sorted({i.split("/")[0] for i in ids if not i.endswith("/0")}, key=int)

    @property
    def kernel_us(self) -> float:
        return sum(k.time_us for k in self.kernels)


def _rows(profile: Profile, names: tuple[str, ...] | str) -> list[Op]:
    names = (names,) if isinstance(names, str) else names
    return [o for o in profile.ops if o.name in names and o.kind != KIND_KERNEL]


def _num(value: object, default: float = 0.0) -> float:
    """A number of the trace's facts, or ``default`` (a stored run may be crafted)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= 0:
        return float(value)
    return default


def _placed(facts: dict[str, object]) -> list[tuple[str, str | None, int, float, list[str]]] | None:
    """The kernels the trace placed in regions (Profile.compiled), the malformed left out;
    None when the profile has none."""
    kernels = facts.get("kernels")
    if not isinstance(kernels, list):
        return None
    rows = []
    for k in kernels:
        if not isinstance(k, dict):
            continue
        name, region, calls = k.get("name"), k.get("region"), k.get("calls")
        if not isinstance(name, str) or not (region is None or isinstance(region, str)) \
                or not isinstance(calls, int) or isinstance(calls, bool) or calls < 0:
            continue
        sources = k.get("sources")
        rows.append((name, region, calls, _num(k.get("time_us")),
                     [line for line in sources if isinstance(line, str)]
                     if isinstance(sources, list) else []))
    return rows


def _key(name: str) -> tuple[str, str | None, str | None] | None:
    """(backend, kind, fused operators) of a generated kernel's name, or None."""
    m = GENERATED.match(name)
    if m is not None:
        return (m["backend"], m["kind"], m["ops"])
    if UNNAMED_TRITON.match(name):
        return ("triton", None, None)
    return None


def generated_kernels(profile: Profile) -> list[GeneratedKernel]:
    """Inductor's kernels, grouped by compiled region (where the trace places them),
    backend, kind and fused operators, longest first."""
    # Per region, from the trace's events (Profile.compiled); else from the sums: on a GPU
    # the kernels themselves (recent torch also records a host range of the same name
    # around each launch: not counted twice), on the CPU the C++ kernels' ranges.
    placed = _placed(profile.compiled)
    if placed is not None:
        rows = placed
    else:
        on_device = profile.has_device
        kind = KIND_KERNEL if on_device else KIND_OP
        rows = [(o.name, None, o.calls, o.self_device_us if on_device else o.cpu_total_us, [])
                for o in profile.ops if o.kind == kind]
    groups: dict[tuple[str | None, str, str | None, str | None], GeneratedKernel] = {}
    for name, region, calls, time_us, sources in rows:
        key = _key(name)
        if key is None:
            continue
        g = groups.get((region, *key))
        if g is None:
            g = groups[(region, *key)] = GeneratedKernel(*key, calls=0, time_us=0.0,
                                                         region=region)
        g.calls += calls
        g.time_us += time_us
        if name not in g.names:
            g.names.append(name)
        g.sources += [line for line in sources if line not in g.sources]
    return sorted(groups.values(), key=lambda g: g.time_us, reverse=True)


def compiled(profile: Profile) -> Compiled | None:
    """What torch.compile did in the profile, or None when nothing in it was compiled."""
    regions = [o for o in profile.ops if REGION.match(o.name) and o.kind != KIND_KERNEL]
    forward = regions or _rows(profile, FORWARD)
    backward = _rows(profile, BACKWARD)
    kernels = generated_kernels(profile)
    launches = _rows(profile, GRAPH_LAUNCHES)
    if not (forward or backward or kernels or launches or profile.compiled):
        return None
    compiling = [o for o in _rows(profile, COMPILING) if o.cpu_total_us > 0]
    compile_ids = sorted({f"{m[1]}/{m[2]}" for o in profile.ops
                          if o.kind in (KIND_ANNOTATION, KIND_OP)
                          for m in [COMPILE_ID.search(o.name)] if m is not None},
                         key=lambda r: tuple(map(int, r.split("/"))))
    lookups = _rows(profile, CACHE_LOOKUP)
    facts = profile.compiled
    n = max(profile.steps, 1)
    return Compiled(
        steps=n, step_us=step_wall_us(profile),
        regions=sorted({"/".join(REGION.match(o.name).groups())  # type: ignore[union-attr]
                        for o in regions}, key=lambda r: tuple(map(int, r.split("/")))),
        region_calls=sum(o.calls for o in forward),
        # From the trace's events where it placed them (nested regions once, a graph
        # break's eager code left out), else the sums of the rows.
        compiled_us=_num(facts.get("compiled_us"),
                         sum(o.cpu_total_us for o in forward + backward)),
        compiled_device_us=_num(facts.get("compiled_device_us"),
                                sum(o.device_total_us for o in forward + backward)),
        cache_lookups=sum(o.calls for o in lookups),
        cache_lookup_us=sum(o.cpu_total_us for o in lookups),
        # Nested ranges of one compilation: the outermost one recorded.
        compile_us=max((o.cpu_total_us for o in compiling), default=0.0),
        compile_ids=compile_ids if compiling else [],
        kernels=kernels,
        graph_launches=sum(o.calls for o in launches),
        graph_kernels=profile.graph_kernels,
        graph_kernel_us=profile.graph_kernel_us,
        breaks=int(_num(facts.get("breaks"))),
        break_us=_num(facts.get("break_us")),
        break_lookup_us=_num(facts.get("break_lookup_us")),
        break_pairs={str(k): int(_num(v)) for k, v in pairs.items()}
        if isinstance(pairs := facts.get("break_pairs"), dict) else {},
        step_compiled_us=[_num(v) for v in steps]
        if isinstance(steps := facts.get("step_us"), list) else [],
        device_split_us={str(k): _num(v) for k, v in split.items()}
        if isinstance(split := facts.get("compiled_device_split_us"), dict) else {},
    )


def _compile_time(w: Worth) -> Saving:
    """Compiling goes away when nothing makes Dynamo compile again: all of its time."""
    us = w.accounts_us
    if us is None:
        return w.unquantified()
    return Saving(us, us, us, us, w.step_us, host_saving=True)


_SAYS_RECOMPILATION = {"steps": OVER_STEPS,
                       "ids": when("compile_ids", lambda v: of(Recompilation)(v).compile_ids)}


@dataclass(kw_only=True)
class Recompilation(Evidence):
    basis: str  # "step"
    share: float  # compiling's share of the compiled steps
    threshold: float
    op_time_us: float  # compiling
    step_us: float
    steps: int | None = opt()
    calls: int  # compilations
    compile_ids: list[str]  # "F/C" of what was compiled
    frames: list[str]  # the frames compiled again


@rule("recompilation", says=_SAYS_RECOMPILATION, evidence=Recompilation,
      saving=_compile_time, share=0.03)
def recompilation(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """torch.compile compiled inside the profiled window, after its warm-up: a guard
    failed (a new shape, dtype, or Python value) and Dynamo compiled the frame again."""
    c = compiled(profile)
    if c is None or c.compile_us <= 0 or c.step_us <= 0:
        return None
    share = min(1.0, c.compile_us / c.step_us)
    if share < limits["share"]:
        return None
    return Finding("recompilation", "high" if share >= 0.25 else "medium",
                   Recompilation(basis="step", share=share, threshold=limits["share"],
                                 op_time_us=c.compile_us, step_us=c.step_us, steps=c.steps,
                                 calls=len(c.compile_ids) or 1,
                                 compile_ids=c.compile_ids, frames=c.recompiled))


_SAYS_GRAPH_BREAK = {
    "steps": OVER_STEPS,
    "pairs": when("break_pairs", lambda v: of(GraphBreak)(v).pairs),
    "lookup": when("guard_checks_after", lambda v: of(GraphBreak)(v).lookup_us is not None),
}


@dataclass(kw_only=True)
class GraphBreak(Evidence):
    basis: str  # "step"
    share: float  # the time between the compiled regions, of the compiled steps
    threshold: float
    op_time_us: float
    step_us: float
    steps: int | None = opt()
    calls: int  # graph breaks
    per_step: float  # graph breaks a step
    lookup_us: float | None = opt()  # Dynamo's guard checks after a break
    pairs: list[str]  # the regions a break lies between, most frequent first


@rule("graph-break", says=_SAYS_GRAPH_BREAK, evidence=GraphBreak,
      saving=savings.unquantified, share=0.03)
def graph_break(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """A compiled call split by graph breaks: between its regions the host runs eager
    code and Dynamo checks its guards again, for 3% of the step or more. Its worth is not
    estimated: mending a break compiles that code rather than removing it, and what the
    compiled code would take the profile cannot say."""
    c = compiled(profile)
    if c is None or c.breaks == 0 or c.step_us <= 0:
        return None
    share = min(1.0, c.break_us / c.step_us)
    if share < limits["share"]:
        return None
    return Finding("graph-break", "high" if share >= 0.25 else "medium",
                   GraphBreak(basis="step", share=share, threshold=limits["share"],
                              op_time_us=c.break_us, step_us=c.step_us, steps=c.steps,
                              calls=c.breaks, per_step=c.breaks / c.steps,
                              lookup_us=c.break_lookup_us if c.break_lookup_us > 0 else None,
                              pairs=sorted(c.break_pairs, key=lambda k: -c.break_pairs[k])))
