"""near-roofline: a statement, not a problem. Made after the rules ran, from their
findings and the profile's efficiency (reporter.analyze.efficiency): a dominant matrix
operator, or matrix products that together bound the step, running near their roofline
are the step's shape, and the lever left is a dtype with a higher peak on this machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from ..model.choice import Values, always, either, first, of, when
from ..model.finding import Evidence, Finding, nullable, opt
from . import savings
from .findings import RULES, Rule, WhatIf, statement
from .rules.operators import DominantOperator

# An operator at this share of its roofline or more runs as well as can be expected.
NEAR_ROOFLINE = 0.5
# Matrix products holding this share of the operators' time together bound the step.
MATRIX_BOUND = 0.5
# On a GPU, the products bound the step only where the GPU works this share of it at
# least (its kernels' time over the step, timed without the profiler where it was): else
# the host holds the step, whatever the products' roofline (a trace of a host-bound
# step, 9% of it on the GPU, is not "bound by its matrix work").
DEVICE_BOUND = 0.5
# The dtypes a lever may name: what torch.autocast (bf16, fp16) and the TF32 switch reach.
# fp8 products need Transformer Engine or torch._scaled_mm, not a switch: never a lever.
LEVER_DTYPES = ("tf32", "bf16", "fp16")


def _near(v: Values) -> NearRoofline:
    return of(NearRoofline)(v)


_SAYS_NEAR_ROOFLINE = {
    "what": either("products_at_roofline", "operator_at_roofline", lambda v: _near(v).products),
    "which": either("these_products", "this_operator", lambda v: _near(v).products),
    "how": either("with_tf32", "with_autocast", lambda v: _near(v).faster_dtype == "tf32"),
    # the lever timed on the model (the step under autocast or TF32, whatif.lever_step),
    # else the peaks' ratio, an upper bound
    "lever": first(("lower_precision_not_faster",
                    lambda v: _near(v).lever_timed and not _near(v).lever_faster),
                   ("lower_precision_timed", lambda v: _near(v).lever_timed),
                   ("lower_precision", lambda v: _near(v).faster_dtype),
                   ("no_faster_dtype", always)),
    "also": when("also", lambda v: _near(v).faster_dtype and (
        not _near(v).lever_timed or _near(v).lever_faster)),
}


@dataclass(kw_only=True)
class NearRoofline(Evidence):
    """A dominant operator's evidence (rules.operators.DominantOperator, less its
    threshold), or that of the products together (``_matrix_bound``), and the lever."""

    basis: str
    share: float  # the operator's (the products') share of the basis
    op: str  # the operator (the largest product)
    op_share: float
    # the dominant operator's, where it was one (DominantOperator)
    op_time_us: float | None = opt()
    calls: int | None = opt()
    mem_per_call_b: int | None = opt()
    matrix_op: bool | None = opt()
    most: bool | None = opt()
    calls_per_step: float | None = opt()
    step_calls: int | None = opt()
    growing: bool | None = opt()
    module: str | None = opt()
    forward_at: str | None = opt()
    first_elements: int | None = opt()
    last_elements: int | None = opt()
    loop_us: float | None = opt()
    others: list[str] | None = opt()  # the next products (of several)
    products: int  # how many products together (0: one operator)
    roofline_share: float  # their time at the roofline, of their time
    achieved_fps: float
    # the lever (_lever): the products' peak and dtype, the peaks' source, a faster dtype
    # on this machine, its peak, and what it would save at most a step
    peak_fps: float
    dtype: str
    source: str | None = nullable()
    faster_dtype: str | None = nullable()
    faster_fps: float | None = nullable()
    saving_us: float | None = nullable()
    saving_share: float | None = nullable()
    lever_timed: bool | None = opt()  # the lever timed on the model's step (_lever_timed)
    lever_faster: bool | None = opt()  # and faster there


def _lever_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether the lever was timed on the model's step (whatif.lever_step) and was faster
    there: where it was not, the statement gives no precision advice."""
    shares = timed.get("saved_share")
    if not timed.get("whole_step") or not isinstance(shares, list) or not shares:
        return
    if isinstance(f.evidence, NearRoofline):
        f.evidence.lever_timed = True
        f.evidence.lever_faster = sum(float(x) for x in shares) / len(shares) > 0


@statement("near-roofline", says=_SAYS_NEAR_ROOFLINE, evidence=NearRoofline,
           about_products=True,
           saving=savings.peaks_bound, roofline=NEAR_ROOFLINE, share=MATRIX_BOUND,
           whatif=WhatIf("lower-precision", notes=_lever_timed))
def near_roofline(found: list[Finding], efficiency: Any, limits: dict[str, float]
                  ) -> list[Finding]:
    """Each dominant operator near its roofline becomes this statement; without any
    finding about the products, a step bound by products near their roofline gets it."""
    if not _work_bound(efficiency):
        return found
    # A dominant product under half the time, near its roofline, is part of a step bound
    # by its products together: their statement, not its own (a compiled transformer's
    # addmm, 37.9% of the step, read alone where its products took 81.2%)
    bound = _matrix_bound(efficiency, limits)
    kept = []
    for finding in found:
        g = _near_roofline(finding, efficiency, limits) if _rule(finding).catch_all \
            else finding
        if g is not None and g is not finding and bound is not None \
                and isinstance(finding.evidence, DominantOperator) \
                and not finding.evidence.most and set(g.ops) <= set(bound.ops):
            g, bound = bound, None
        kept.append(g)
    out = [f for f in kept if f is not None]
    # with a finding that speaks of the matrix products already, no statement for several
    if not any(_rule(f).about_products for f in out):
        bound = _matrix_bound(efficiency, limits)
        if bound is not None:
            out.append(bound)
    return out


def _work_bound(efficiency: Any) -> bool:
    """Whether the step is bound by the operators' work: always on the CPU (they are the
    step); on a GPU, where its kernels fill DEVICE_BOUND of the step at least."""
    if efficiency.basis != "device":
        return True
    step, busy = float(efficiency.step_us), float(efficiency.total_us)
    return step > 0 and busy / step >= DEVICE_BOUND


def _rule(f: Finding) -> Rule:
    """The rule of a finding: the catch-all one (dominant-operator) is what a dominant
    operator near its roofline turns into this statement from."""
    return RULES[f.rule]


def _near_roofline(dominant: Finding, efficiency: Any, limits: dict[str, float]
                   ) -> Finding | None:
    """A dominant matrix operator that runs near its roofline: not a problem but the
    step's shape. Its lever: a dtype with a higher peak on this machine, worth the
    operator's time x (1 - its peak / the faster one) per step, if any."""
    row = next((o for o in efficiency.ops if o.name == dominant.evidence.op), None)
    if row is None or not row.matrix or row.bound != "compute" or \
            row.roofline_share < limits["roofline"]:
        return dominant
    # the dominant operator's keys, in their order (its call site's ``source`` takes the
    # lever's value there, as a dict's key would)
    return Finding("near-roofline", "low", NearRoofline.from_dict({
        **{k: v for k, v in dominant.evidence.as_dict().items() if k != "threshold"},
        "products": 0,  # one operator (see _matrix_bound for several)
        "roofline_share": row.roofline_share, "achieved_fps": row.achieved_flops,
        **_lever(efficiency, row.dtypes, row.time_us),
    }), ops=dominant.ops)


class Lever(TypedDict):
    """The near-roofline lever's fields (``_lever``)."""

    peak_fps: float
    dtype: str
    source: str | None
    faster_dtype: str | None
    faster_fps: float | None
    saving_us: float | None
    saving_share: float | None


def _lever(efficiency: Any, dtypes: list[str], time_us: float) -> Lever:
    """The near-roofline lever: the peak of ``dtypes`` (the products' own), the dtype with
    the highest peak above it on this machine (fp32 aside), and what ``time_us`` of
    products would save at that peak, per step: an upper bound (the products' other costs,
    the casts autocast adds, a dtype a CPU emulates stay), which the runner replaces with
    the step timed in that dtype (whatif.lever_step)."""
    peaks = efficiency.peaks.flops
    # fp32 products ran at the TF32 peak when TF32 was on (the step's peak dtype says so)
    keys = ["tf32" if d == "fp32" and efficiency.peak_dtype == "tf32" else d for d in dtypes]
    current = max((peaks.get(k, 0.0) for k in keys), default=0.0) or efficiency.peak_flops
    faster = max(((k, v) for k, v in peaks.items() if k in LEVER_DTYPES and v > current * 1.1),
                 key=lambda kv: kv[1], default=None)
    saving = time_us * (1 - current / faster[1]) if faster else None
    step = efficiency.profiled_step_us
    return {"peak_fps": current, "dtype": ", ".join(dtypes), "source": efficiency.peaks.source,
            "faster_dtype": faster[0] if faster else None,
            "faster_fps": faster[1] if faster else None,
            "saving_us": saving, "saving_share": saving / step if saving and step else None}


def _matrix_bound(efficiency: Any, limits: dict[str, float]) -> Finding | None:
    """A step bound by matrix products that no single one dominates (a ViT, say), all
    running near their roofline: the same statement as for one dominant product, for
    them together, with the lever a faster dtype would give them."""
    rows = [o for o in efficiency.ops if o.matrix and o.bound == "compute" and o.time_us > 0]
    time_us = sum(o.time_us for o in rows)
    if not rows or not efficiency.total_us or time_us / efficiency.total_us < limits["share"]:
        return None
    roofline = sum(min(o.roof_us, o.time_us) for o in rows) / time_us
    if roofline < limits["roofline"]:
        return None
    flops = sum(o.flops for o in rows)
    return Finding("near-roofline", "low", NearRoofline(
        basis=efficiency.basis, share=time_us / efficiency.total_us,
        op=rows[0].name, op_share=time_us / efficiency.total_us,
        others=[o.name for o in rows[1:5]], products=len(rows),
        roofline_share=roofline, achieved_fps=flops / time_us * 1e6,
        **_lever(efficiency, sorted({d for o in rows for d in o.dtypes}), time_us),
    ), ops=[o.name for o in rows])
