"""Rules about host-side work: padding on the CPU, per-parameter optimizer steps, Python
loops over samples, dispatch-bound rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model.choice import OVER_STEPS, either, evidence, first, of, on_gpu, when
from ...model.finding import Evidence, Finding, Saving, opt
from ...model.profile import KIND_ANNOTATION, Op, Profile
from .. import savings
from ..breakdown import MODULE_MARK
from ..findings import WhatIf, Worth, operators, rule, step_share, step_wall_us
from ._common import largest_in_step, severity


def _optimizer_saving(w: Worth) -> Saving:
    """The optimizer phase, less what its element-wise updates need at their roofline
    (the mean roofline share of the profile's element-wise operators stands in)."""
    b = w.profile.breakdown
    accounted = w.accounts_us
    if b is not None and b.host_us.get("optimizer"):
        accounted = b.mean(b.host_us["optimizer"])
    names = ([o.name for o in w.eff.ops if not o.matrix]
             if w.eff is not None and not isinstance(w.eff, str) else [])
    beyond = savings.beyond_roof(names, accounted or 0.0, w.eff)
    if not accounted or beyond is None:
        return w.unquantified()
    return Saving(accounted, beyond, beyond / 2, beyond, w.step_us, host_saving=True)


_PADDING = ("aten::pad_sequence", "aten::_pad_packed_sequence", "aten::pad",
            "aten::constant_pad_nd")


# A Python loop (per-sample-loop, dispatch-bound): a kernel launch per call on a GPU, and
# the fix compiles the loop (or unrolls it inside a model that is compiled already).
LOOP = {
    "steps": OVER_STEPS,
    "launch": when("and_a_kernel_launch", on_gpu),
    "loop_fix": either("unroll_inside_compiled", "compile_the_loop",
                       lambda v: evidence(v).compiled),
}


_SAYS_CPU_SIDE_PADDING = {"steps": OVER_STEPS}


@dataclass(kw_only=True)
class CpuSidePadding(Evidence):
    basis: str  # "step"
    share: float  # the padding's share of the profiled steps
    threshold: float
    op: str  # the largest padding or collation row
    op_time_us: float
    step_us: float
    calls: int


@rule("cpu-side-padding", says=_SAYS_CPU_SIDE_PADDING, evidence=CpuSidePadding, host_work=True,
      saving=savings.removed, share=0.10)
def cpu_side_padding(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Padding or collation on the CPU takes a large share of the step."""
    rows = [o for o in profile.ops if o.name in _PADDING or "collate" in o.name.lower()]
    largest = largest_in_step(profile, rows, limits["share"])
    if largest is None:
        return None
    top, s, wall = largest
    return Finding("cpu-side-padding", "medium",
                   CpuSidePadding(basis="step", share=s, threshold=limits["share"],
                                  op=top.name, op_time_us=top.cpu_total_us, step_us=wall,
                                  calls=top.calls),
                   ops=[top.name])


_PER_TENSOR_UPDATES = ("aten::add_", "aten::mul_", "aten::addcdiv_", "aten::addcmul_",
                       "aten::lerp_", "aten::sqrt", "aten::div_")


# torch.optim classes with foreach=True, and those with fused=True too (torch >= 2.4).
_FOREACH_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad", "Adamax", "NAdam", "RAdam",
                       "RMSprop", "Rprop", "ASGD", "Adadelta")


_FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")


def _optimizer_call(name: str) -> tuple[str, bool]:
    """The call the advice gives for the optimizer class ``name`` (AdamW's for a class
    torch.optim does not have), and whether it is the fused implementation."""
    if name not in _FOREACH_OPTIMIZERS:
        name = "AdamW"
    fused = name in _FUSED_OPTIMIZERS
    return f"torch.optim.{name}(params, lr=..., {'fused' if fused else 'foreach'}=True)", fused


def _foreach_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether ``foreach=True`` timed no faster than one parameter at a time
    (``foreach_slower``): on a CPU it often is not (T5's Adam: 16.5 ms a step one parameter
    at a time, 14-22 ms with foreach, 6.0 ms fused), and the advice then gives fused
    alone."""
    before, foreach = timed.get("before_ms"), timed.get("foreach_ms")
    if isinstance(before, (int, float)) and isinstance(foreach, (int, float)) \
            and not isinstance(before, bool) and not isinstance(foreach, bool):
        if isinstance(f.evidence, SingleTensorOptimizer):
            f.evidence.foreach_slower = bool(foreach >= before)


@dataclass(kw_only=True)
class SingleTensorOptimizer(Evidence):
    basis: str  # "step"
    share: float  # the optimizer step's share of the profiled steps
    threshold: float
    op: str  # Optimizer.step#<Class>.step
    op_time_us: float
    calls: int  # optimizer steps
    updates_per_step: float  # per-tensor updates per optimizer step
    call: str  # the advice: the user's torch.optim class with foreach or fused
    fused: bool  # the class has fused=True
    foreach_slower: bool | None = opt()  # foreach timed no faster (whatif: _foreach_timed)


_SAYS_SINGLE_TENSOR_OPTIMIZER = {
    "steps": OVER_STEPS,
    "foreach": first(("foreach_no_faster", lambda v: of(SingleTensorOptimizer)(v).foreach_slower),
                     ("or_foreach", lambda v: of(SingleTensorOptimizer)(v).fused)),
    # kernels on a GPU; on a CPU "ядер" reads as cores (review RR12)
    "small_work": either("small_kernels", "small_operations", on_gpu),
}


@rule("single-tensor-optimizer", says=_SAYS_SINGLE_TENSOR_OPTIMIZER,
      evidence=SingleTensorOptimizer,
      saving=_optimizer_saving,
      whatif=WhatIf("optimizer", notes=_foreach_timed), share=0.05, per_step=4)
def single_tensor_optimizer(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The optimizer updates one parameter at a time instead of foreach or fused kernels
    (on the CPU too: whether they help there, a live run times on the device)."""
    names = " ".join(o.name for o in profile.ops)
    if "_foreach_" in names or "_fused_" in names:
        return None
    steps = [o for o in profile.ops if o.name.startswith("Optimizer.step#")]
    if not steps:
        return None
    step_calls = sum(o.calls for o in steps) or 1
    updates = sum(o.calls for o in profile.ops if o.name in _PER_TENSOR_UPDATES)
    s, _ = step_share(profile, max(o.cpu_total_us for o in steps))
    if updates < limits["per_step"] * step_calls or s <= limits["share"]:
        return None
    call, fused = _optimizer_call(steps[0].name.partition("#")[2].partition(".")[0])
    return Finding("single-tensor-optimizer", "medium",
                   SingleTensorOptimizer(
                       basis="step", share=s, threshold=limits["share"],
                       op=steps[0].name, op_time_us=steps[0].cpu_total_us,
                       calls=step_calls, updates_per_step=updates / step_calls,
                       # the advice: the user's own torch.optim class (Optimizer.step#
                       # <Class>.step) with the argument it has
                       call=call, fused=fused),
                   ops=[o.name for o in steps])


def _batched_saving(w: Worth) -> Saving:
    """Calling the module once on the stacked batch instead of N times: at most its time
    less one call's (each call is overhead-bound: the same framework work per call,
    whatever its size); at least that less the operators' own time in the step, which a
    batched call may still take in full."""
    e = w.finding.evidence
    n = float(e.calls_per_step or 0) if isinstance(e, PerSampleLoop) else 0.0
    if not w.accounts_us or n < 2:
        return w.unquantified()
    high = w.accounts_us * (1 - 1 / n)
    ops_us = sum(o.self_cpu_us for o in operators(w.profile)) / max(w.steps, 1)
    return Saving(w.accounts_us, high, max(0.0, high - ops_us), high, w.step_us,
                  host_saving=True)


def _framework_call_us(ops: list[Op]) -> float | None:
    """The framework's fixed cost of one operator call in this profile: the mean time of
    the view operators, which compute nothing (None without any). It stretches with the
    profiler and with a busy machine as every other call does, so limits in its units
    hold under both."""
    views = [o for o in ops if o.name in _VIEW_OPS and o.calls]
    n = sum(o.calls for o in views)
    return sum(o.self_cpu_us for o in views) / n if n else None


@dataclass(kw_only=True)
class PerSampleLoop(Evidence):
    basis: str  # "step"
    share: float  # the module's calls and their backward, of the step less added faults
    threshold: float
    op: str  # the module
    op_time_us: float
    step_us: float  # the step less the page faults the profiler added
    calls: int  # the module's calls
    # where the profiler added page faults: them, and the profiled step they were in
    faults_added_us: float | None = opt()
    profiled_step_us: float | None = opt()
    calls_per_step: int  # the module's calls a step, rounded
    mean_call_us: float
    op_calls_per_step: int  # operator calls a step
    mean_op_us: float

    def profiler_faults_us(self) -> float | None:
        return self.faults_added_us


_SAYS_PER_SAMPLE_LOOP = {**LOOP, "faults_added": when(
    "less_faults_added", lambda v: of(PerSampleLoop)(v).faults_added_us is not None)}


@rule("per-sample-loop", says=_SAYS_PER_SAMPLE_LOOP, evidence=PerSampleLoop, host_work=True,
      saving=_batched_saving, calls_per_step=16, share=0.15,
      call_ratio=25.0, call_us=500.0)
def per_sample_loop(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One module called many times per step, each call short: a Python loop over the
    samples (or time steps) of a batch, paying the framework's per-call cost each time
    (the runner's module marks say how often each module ran), its calls and their
    backward (the step breakdown's, by module) over ``share`` of the step less the page
    faults the profiler added to it (``savings.first_touch_us``). Short is relative to the
    profile's own cost of a call (``_framework_call_us``): a call of the module takes at
    most ``call_ratio`` times that per operator call it makes (the step's operator calls
    over the module's calls), so that a machine or profiler that slows every call does not
    hide the loop; ``call_us`` per call of the module, where no view operator gives that
    yardstick."""
    steps = max(profile.steps, 1)
    ops = operators(profile)
    op_calls = sum(o.calls for o in ops)
    framework_us = _framework_call_us(ops)

    def short(o: Op) -> bool:
        mean = o.cpu_total_us / o.calls
        if framework_us is None or not op_calls:
            return mean <= limits["call_us"]
        per_op = mean / max(1.0, op_calls / o.calls)
        return per_op <= limits["call_ratio"] * framework_us

    marks = [o for o in profile.ops if o.kind == KIND_ANNOTATION and
             o.name.startswith(MODULE_MARK) and o.calls / steps >= limits["calls_per_step"]
             and short(o)]
    backward = profile.breakdown.module_backward_us if profile.breakdown else {}

    def both(o: Op) -> float:  # its forward calls, and their backward (a mean per step)
        return o.cpu_total_us + backward.get(o.name[len(MODULE_MARK):], 0.0) * steps

    if not marks:
        return None
    top = max(marks, key=both)
    # Of the step less the first touch of fresh memory the profiler added to the writers
    # (savings.first_touch_us): seq2seq's loop took 5% of a profiled step that page faults
    # under the profiler stretched fivefold, 19% of the rest
    wall = step_wall_us(profile)
    touched = savings.first_touch_us(profile) * steps
    of = wall - touched if 0 <= touched < wall else wall
    s = both(top) / of if of > 0 else 0.0
    if s <= limits["share"]:
        return None
    return Finding("per-sample-loop", severity(s, 0.6),
                   PerSampleLoop(basis="step", share=s, threshold=limits["share"],
                                 op=top.name[len(MODULE_MARK):], op_time_us=both(top),
                                 step_us=of, calls=top.calls,
                                 faults_added_us=touched if of != wall else None,
                                 profiled_step_us=wall if of != wall else None,
                                 calls_per_step=round(top.calls / steps),
                                 mean_call_us=both(top) / top.calls,
                                 op_calls_per_step=round(op_calls / steps),
                                 mean_op_us=sum(o.self_cpu_us for o in ops) / op_calls
                                 if op_calls else 0.0),
                   ops=[top.name])


# Operators that only make a view of a tensor: their time is the framework's per-call
# cost alone (Python, dispatch, the profiler's record), no compute.
_VIEW_OPS = {"aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::expand",
             "aten::resolve_conj", "aten::resolve_neg", "aten::select", "aten::slice",
             "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::reshape",
             "aten::_unsafe_view", "aten::alias", "aten::detach", "aten::narrow",
             "aten::unbind", "aten::split", "aten::chunk"}


# Taking a tensor's rows one by one: `for row in x` (unbind, a select per row), `x[i]`.
_ROW_OPS = ("aten::select",)


def _row_loop(profile: Profile, steps: int, least: float) -> tuple[int, int] | None:
    """A tensor of at least ``least`` rows whose rows were taken one by one, as a Python
    loop over a batch takes them: (its rows, the row selections per step), the largest
    such tensor; None without one. With the recorded shapes (a run's profile), the
    selected tensor's first dimension; without them (``reporter analyze`` reads a trace's
    operators only), the selections per ``unbind`` (``for row in x``), or per step
    (``x[i]``)."""
    from ..shapes import dims

    found: dict[int, int] = {}
    for o in profile.ops_by_shape:
        if o.name in _ROW_OPS:
            d = dims(o)
            if d and d[0] and d[0][0] >= least:
                found[d[0][0]] = found.get(d[0][0], 0) + o.calls
    if not profile.ops_by_shape:
        selected = sum(o.calls for o in operators(profile) if o.name in _ROW_OPS) / steps
        unbinds = sum(o.calls for o in operators(profile) if o.name == "aten::unbind") / steps
        rows = round(selected / unbinds) if unbinds >= 1 else round(selected)
        if rows >= least:
            found[rows] = round(selected * steps)
    loops = [(rows, round(calls / steps)) for rows, calls in found.items()
             if calls / steps >= rows]
    return max(loops) if loops else None


def _overhead_saving(w: Worth) -> Saving:
    """One call on the stacked batch instead of one per row: the step's framework time
    (all of it but what the operators compute: Python between the calls, dispatch, each
    call's fixed cost) falls by the loop's rows, at most; at least the operator calls' own
    fixed cost does (each call at the view operators' mean time: they compute nothing),
    the Python between them kept."""
    e = w.finding.evidence
    if not isinstance(e, DispatchBound):
        return w.unquantified()
    rows, per_call = float(e.rows or 0), float(e.overhead_us or 0)
    if rows < 2 or not w.accounts_us:
        return w.unquantified()
    fewer = 1 - 1 / rows
    high = w.accounts_us * fewer
    low = min(high, float(e.op_calls_per_step) * per_call * fewer)
    return Saving(w.accounts_us, high, low, high, w.step_us, host_saving=True)


@dataclass(kw_only=True)
class DispatchBound(Evidence):
    basis: str  # "step"
    share: float  # the framework's time, of the step
    threshold: float
    op: str  # the operator called most
    calls: int  # its calls
    op_time_us: float  # the framework's time
    step_us: float
    rows: int  # the tensor's rows taken one by one
    selected_per_step: int  # row selections a step
    op_calls_per_step: int
    calls_per_row: int
    mean_op_us: float
    overhead_us: float  # the framework's fixed cost of a call (the view operators')
    op_us_limit_us: float  # the rule's limit on mean_op_us


_SAYS_DISPATCH_BOUND = LOOP


@rule("dispatch-bound", says=_SAYS_DISPATCH_BOUND, evidence=DispatchBound, host_work=True,
      saving=_overhead_saving, rows=16, calls_per_row=4, op_us=50.0,
      share=0.30)
def dispatch_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Many small operators whose framework cost outweighs their work, in a loop over the
    rows of a batch: read from the operators alone (a user's trace), where the runner's
    module marks, which per-sample-loop counts, are absent. A tensor of ``rows`` or more
    rows taken row by row each step, ``calls_per_row`` operator calls per row or more, a
    mean operator call of at most ``op_us``, and the step's framework time (the step less
    what the operators compute, each call's fixed cost measured by the view operators; on
    a GPU, where the host waits for the device, the calls' fixed cost alone) over
    ``share`` of the step."""
    if any(o.kind == KIND_ANNOTATION and o.name.startswith(MODULE_MARK) for o in profile.ops):
        return None  # the runner's marks: per-sample-loop counts the module's calls
    steps = max(profile.steps, 1)
    ops = operators(profile)
    calls = sum(o.calls for o in ops)
    own = sum(o.self_cpu_us for o in ops)
    views = [o for o in ops if o.name in _VIEW_OPS and o.calls]
    loop = _row_loop(profile, steps, limits["rows"])
    if not calls or not views or loop is None or own <= 0:
        return None
    rows, selected = loop
    per_step, mean = calls / steps, own / calls
    overhead = sum(o.self_cpu_us for o in views) / sum(o.calls for o in views)
    compute = max(0.0, own - calls * overhead)  # what the operators do beyond their calls
    s, wall = step_share(profile, 0.0)
    # On a GPU the host's time outside the operators is mostly waiting for the device:
    # there, only the operator calls' fixed cost counts
    framework = calls * overhead if profile.has_device else max(0.0, wall - compute)
    s = framework / wall if wall > 0 else 0.0
    if per_step < limits["calls_per_row"] * rows or mean > limits["op_us"] or \
            s <= limits["share"]:
        return None
    top = max(ops, key=lambda o: o.calls)
    return Finding("dispatch-bound", severity(s, 0.6),
                   DispatchBound(basis="step", share=s, threshold=limits["share"],
                                 op=top.name, calls=top.calls, op_time_us=framework,
                                 step_us=wall, rows=rows, selected_per_step=selected,
                                 op_calls_per_step=round(per_step),
                                 calls_per_row=round(per_step / rows), mean_op_us=mean,
                                 overhead_us=overhead, op_us_limit_us=limits["op_us"]),
                   ops=sorted({o.name for o in ops if o.calls / steps >= rows}))
