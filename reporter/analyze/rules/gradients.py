"""Rules about the gradients between two steps: zeroed in place of freed.

``optimizer.zero_grad(set_to_none=False)`` (or ``model.zero_grad(False)``, or a
``p.grad.zero_()`` loop of one's own) fills every gradient with zeros after each step, and
the next backward then adds each new gradient into those zeros instead of storing it. With
``set_to_none=True`` (torch's default since 2.0) both go: the gradients are freed, and
autograd's ``AccumulateGrad`` takes the new gradient as it is. The runner calls
``zero_grad(set_to_none=True)`` itself, so this is seen in a user's own profiles (a table
or a trace of their training loop): torch.optim wraps ``zero_grad`` in a
``Optimizer.zero_grad#<Class>.zero_grad`` mark, under which the fills show as
``aten::zero_`` (one a gradient) or ``aten::_foreach_zero_`` (one a device and dtype)."""

from __future__ import annotations

from dataclasses import dataclass

from ...model.choice import OVER_STEPS, on_gpu, when
from ...model.finding import Evidence, Finding, Saving
from ...model.profile import Op, Profile
from ..findings import Worth, basis, rule, step_wall_us

ZERO_GRAD_MARK = "Optimizer.zero_grad#"
_FILLS = ("aten::zero_", "aten::_foreach_zero_")
_ACCUMULATE = "torch::autograd::AccumulateGrad"


def _zeroing(w: Worth) -> Saving:
    """The fills go (``zero_us``), and the backward's additions into the zeros
    (``accumulate_us``: AccumulateGrad's time in what it calls, as many of its calls as
    gradients were zeroed), per step: the saving is both, at least the fills alone (an
    addition into zeros may cost little more than the store that replaces it)."""
    e = w.finding.evidence
    if not isinstance(e, ZeroGradFill):
        return w.unquantified()
    steps = max(w.steps, 1)
    low = float(e.zero_us or 0.0) / steps
    high = low + float(e.accumulate_us or 0.0) / steps
    if high <= 0:
        return w.unquantified()
    return Saving(high, high, low, high, w.step_us, host_saving=basis(w.profile).name == "cpu")


# On the CPU the freed gradients are allocated afresh by the next backward, and glibc's
# malloc hands blocks this large back to the kernel and maps them again: their first
# writes then fault (a 512-wide MLP's step, 2026-12-05: 13-17% faster with glibc holding
# its memory, 40% slower in one process of three without; the page-faults rule tells it)
_SAYS_ZERO_GRAD_FILL = {"steps": OVER_STEPS,
                        "allocator": when("cpu_allocator", lambda v: not on_gpu(v))}


@dataclass(kw_only=True)
class ZeroGradFill(Evidence):
    basis: str  # "step"
    share: float  # the fills and the additions into them, of the profiled steps
    threshold: float
    op: str  # the zero_grad mark
    op_time_us: float
    zero_us: float  # the fills
    accumulate_us: float  # the backward's additions into the zeros
    calls: int  # zero_grad calls
    filled: int  # fills


@rule("zero-grad-fill", says=_SAYS_ZERO_GRAD_FILL, evidence=ZeroGradFill, saving=_zeroing,
      share=0.03)
def zero_grad_fill(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The optimizer's ``zero_grad`` fills the gradients with zeros (``set_to_none=False``)
    at least once a call, and the fills with the backward's additions into them take more
    than ``share`` of the step."""
    marks = [o for o in profile.ops if o.name.startswith(ZERO_GRAD_MARK)]
    fills = [o for o in profile.ops if o.name in _FILLS]
    calls = sum(o.calls for o in marks)
    filled = sum(o.calls for o in fills)
    if not marks or not calls or filled < calls:
        return None
    device = basis(profile).name == "device"

    def inside(rows: list[Op]) -> float:
        """The time of what the rows call (their inclusive time less their own): the
        fills under zero_grad, the additions under AccumulateGrad."""
        if device:
            return float(sum(o.device_total_us for o in rows))
        return float(sum(max(0.0, o.cpu_total_us - o.self_cpu_us) for o in rows))

    zero_us = inside(marks)
    accumulates = [o for o in profile.ops if o.name == _ACCUMULATE]
    n = sum(o.calls for o in accumulates)
    # one addition into zeros for each zeroed gradient; more calls than that are a
    # gradient accumulation's own additions, which set_to_none keeps
    tensors = filled if any(o.name == "aten::zero_" for o in fills) else n
    accumulate_us = inside(accumulates) * min(1.0, tensors / n) if n else 0.0
    wall = step_wall_us(profile)
    share = (zero_us + accumulate_us) / wall if wall > 0 else 0.0
    if share <= limits["share"]:
        return None
    name = max(marks, key=lambda o: o.cpu_total_us).name
    return Finding("zero-grad-fill", "medium",
                   ZeroGradFill(basis="step", share=share, threshold=limits["share"],
                                op=name, op_time_us=zero_us + accumulate_us,
                                zero_us=zero_us, accumulate_us=accumulate_us,
                                calls=calls, filled=filled),
                   ops=[o.name for o in (*marks, *fills)])
