"""The built-in rules. Each is a pure function of a Profile and its limits."""

from __future__ import annotations

from .analyzer import (Finding, basis, dataloader_rows, op_evidence, operators, rule, share,
                       step_wall_us)
from .profile import Profile

ELEMENTWISE = {
    "aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub", "aten::sub_",
    "aten::div", "aten::div_", "aten::sum", "aten::mean", "aten::pow", "aten::exp",
    "aten::neg", "aten::sqrt", "aten::rsqrt", "aten::where", "aten::maximum",
    "aten::minimum", "aten::prod", "aten::addcmul_", "aten::addcdiv_", "aten::mul_out",
}
COPIES = {"aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone"}
MATERIALISERS = ("aten::repeat", "aten::expand", "aten::permute", "aten::contiguous",
                 "aten::repeat_interleave", "aten::tile")


def _severity(value: float, high: float) -> str:
    return "high" if value >= high else "medium"


@rule("elementwise-blowup", share=0.30, high=0.50)
def elementwise_blowup(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Element-wise and reduction operators hold a large share of the time."""
    b = basis(profile)
    ops = sorted((o for o in operators(profile) if o.name in ELEMENTWISE),
                 key=lambda o: getattr(o, b.attr), reverse=True)
    total = share(ops, b)
    if not ops or total <= limits["share"]:
        return None
    present = [name for name in MATERIALISERS
               if any(o.name == name and o.calls for o in profile.ops)]
    return Finding("elementwise-blowup", _severity(total, limits["high"]),
                   {"basis": b.name, "share": total, "threshold": limits["share"],
                    **op_evidence(ops[0], b), "materialisers": present,
                    "others": [o.name for o in ops[1:4]]},
                   ops=[o.name for o in ops[:3]])


@rule("copy-heavy", share=0.20, high=0.40)
def copy_heavy(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Copies hold a large share: say whether transfers, layout copies or CopySlices."""
    b = basis(profile)
    ops = sorted((o for o in operators(profile) if o.name in COPIES),
                 key=lambda o: getattr(o, b.attr), reverse=True)
    total = share(ops, b)
    if not ops or total <= limits["share"]:
        return None
    names = {o.name: o for o in profile.ops}
    kinds = []
    memcpy = [o for o in profile.ops if o.name.startswith("Memcpy") and ("HtoD" in o.name
                                                                          or "DtoH" in o.name)]
    to_total = max((o.cpu_total_us for o in profile.ops if o.name == "aten::to"), default=0.0)
    copy_total = max((o.cpu_total_us for o in ops if o.name == "aten::copy_"), default=0.0)
    if memcpy or (copy_total > 0 and to_total >= 0.5 * copy_total):
        kinds.append("transfer")
    if any("CopySlices" in o.name for o in profile.ops):
        kinds.append("copyslices")
    if any(n in names for n in MATERIALISERS):
        kinds.append("layout")
    pageable = any("Pageable" in o.name for o in memcpy)
    return Finding("copy-heavy", _severity(total, limits["high"]),
                   {"basis": b.name, "share": total, "threshold": limits["share"],
                    **op_evidence(ops[0], b), "kinds": kinds or ["layout"],
                    "pageable": pageable},
                   ops=[o.name for o in ops[:2]])


@rule("dataloader-bound", share=0.05, high=0.30)
def dataloader_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The step waits for its input: enumerate(DataLoader) takes a share of the step."""
    rows = dataloader_rows(profile)
    wall = step_wall_us(profile)
    if not rows or wall <= 0:
        return None
    waited = sum(o.cpu_total_us for o in rows)
    frac = waited / wall
    if frac <= limits["share"]:
        return None
    top = max(rows, key=lambda o: o.cpu_total_us)
    return Finding("dataloader-bound", _severity(frac, limits["high"]),
                   {"basis": "step", "share": frac, "threshold": limits["share"],
                    "op": top.name, "op_time_us": waited, "step_us": wall,
                    "calls": sum(o.calls for o in rows),
                    "multiprocess": "MultiProcessing" in top.name},
                   ops=[o.name for o in rows])


@rule("dominant-operator", share=0.50)
def dominant_operator(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One operator holds most of the self time."""
    b = basis(profile)
    ops = operators(profile)
    if not ops or b.total_us <= 0:
        return None
    top = max(ops, key=lambda o: getattr(o, b.attr))
    s = share([top], b)
    if s <= limits["share"]:
        return None
    return Finding("dominant-operator", "medium",
                   {"basis": b.name, "share": s, "threshold": limits["share"],
                    **op_evidence(top, b)}, ops=[top.name])
