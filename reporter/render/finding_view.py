"""A finding's view: its evidence formatted for one locale by naming convention, what it
is worth, and what the report's sentence choices read of it (reporter.render.choices);
the report's and a comparison's (render/report_view.py, render/compare_view.py)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..model.finding import BOUNDS, UP_TO_PEAKS, Finding, Saving
from . import markup
from .choices import NO_WORTH, FindingChoices, WorthChoices
from .fmt import Fmt, md_name


_SHARES = ("share", "threshold", "op_share", "per_call_share", "overlap_share",
           "materialised_share")
_TEXT = ("dtype", "faster_dtype")  # read from a stored run: text, never Markdown
_COUNTS = ("launches_per_step",)  # a count per step, averaged: "79", not "79.0"
# dominant-operator's calls per step, averaged over the steps (a float): "7", not "7.00"
# (review R8/Z4); per-sample-loop's is rounded already (an int, its plural's number)
_AVERAGED_COUNTS = ("calls_per_step",)


def _at_top(saving: Saving, fmt: Fmt) -> bool:
    """A saving whose point is the top of its own range, as printed."""
    return (saving.saving_us is not None and saving.low_us is not None
            and saving.high_us is not None and saving.high_us > saving.low_us
            and fmt.time(saving.saving_us) == fmt.time(saving.high_us))


def _finding_view(f: Finding, fmt: Fmt, saving: Saving | None = None) -> dict[str, Any]:
    """A finding's evidence formatted for the locale, by naming convention.

    ``x_us`` becomes a time ``x``, ``x_b`` a size ``x`` (None when zero), shares
    (``x_share``) become percentages, ``x_fps`` a FLOP/s rate, ints get an ``x_text``
    with digit grouping, operator names become inline code.
    """
    # the evidence itself, for the rule's sentence choices (reporter.model.choice.of)
    view: dict[str, Any] = {"rule": f.rule, "severity": f.severity, "evidence": f.evidence}
    ev = f.evidence.as_dict()  # its fields by name, as the JSON has them
    for key, value in ev.items():
        if key.endswith("_us"):
            view[key[:-3]] = fmt.time(value)
        elif key.endswith("_b"):  # under 1 KiB, or negative (memory freed): not said
            view[key[:-2]] = fmt.bytes(value) if value and value >= 1024 else None
        elif key in _SHARES or key.endswith("_share"):
            view[key] = fmt.pct(value) if value is not None else None
        elif key.endswith("_fps"):  # FLOP/s
            view[key] = fmt.si(value, "FLOP/s") if value else None
        elif key in _TEXT:
            view[key] = markup.text(value) if value is not None else None
        elif isinstance(value, bool) or value is None or isinstance(value, (str, list)):
            view[key] = value
        elif isinstance(value, int):
            view[key], view[f"{key}_text"] = value, fmt.int(value)
        elif isinstance(value, float):
            view[key] = fmt.num(value)
    # The profiled steps a total in the evidence (``op_time``, ``step``...) is over: the
    # templates say "over N steps" when there are several.
    steps = f.evidence.steps
    view["steps"] = steps if isinstance(steps, int) and not isinstance(steps, bool) else 0
    view["steps_text"] = fmt.int(view["steps"])
    for key in _COUNTS:  # counts averaged over the steps: whole, as counts are
        if isinstance(ev.get(key), (int, float)):
            view[key], view[f"{key}_n"] = fmt.count(ev[key]), round(ev[key])
    for key in _AVERAGED_COUNTS:
        if isinstance(ev.get(key), float):
            view[key], view[f"{key}_n"] = fmt.count(ev[key]), round(ev[key])
    # a finding with no share of the step (inference-autograd: memory, and work outside
    # the step measured here): a dash where a comparison lists findings by their share
    view.setdefault("share", "—")
    view.setdefault("compiled", False)  # set by the analyzer on a compiled model's findings
    view["op"] = md_name(f.evidence.op) if f.evidence.op else ""
    view.setdefault("matrix_op", False)  # dominant-operator's: the rule decides
    view.setdefault("faults_added", None)  # per-sample-loop's, where the profiler added faults
    for key in ("materialisers", "others"):
        view[key] = [md_name(n) for n in ev.get(key, [])]
    view["products_named"] = [view["op"], *view["others"]]  # near-roofline's products
    made = ev.get("materialised_share")
    if isinstance(made, float) and 0 < made < 0.0005:  # not "0.0%" for copies that cost little
        view["materialised_share"] = markup.Md("<" + fmt.pct(0.001))  # "<" then a digit: text
    if saving is not None and saving.saving_us is not None and "saving_us" in ev:
        # A saving the evidence states (savings.stated) is of the profiled step; the worth
        # line below it, of the step without the profiler: the sentence says the latter.
        view["saving"] = fmt.time(saving.saving_us)
        if "saving_share" in ev and saving.step_us:  # its share, of the same step
            view["saving_share"] = fmt.pct(saving.share(saving.saving_us))
    elif saving is not None and saving.note == UP_TO_PEAKS and saving.high_us is not None \
            and "saving_us" in ev:  # the bound the evidence states, of that step
        view["saving"] = fmt.time(saving.high_us)
        if "saving_share" in ev and saving.step_us:
            view["saving_share"] = fmt.pct(saving.share(saving.high_us))
    if saving is not None:  # what the finding is worth (reporter.analyze.savings)
        upper = saving.high_us if saving.note in BOUNDS else None
        view["worth"] = {
            # an upper bound (savings.upper_bound): the time said "up to", and no other
            "upper": fmt.time(upper) if upper is not None else None,
            "upper_share": fmt.pct(saving.share(upper)) if upper is not None else None,
            "accounts": fmt.time(saving.accounts_us)
            if saving.accounts_us and upper is None else None,
            # of the step timed without the profiler, not the profiled time the finding
            # states ("13.5 ms over 10 steps", then "944 us per step": review C1)
            "accounts_unprofiled": saving.accounts_unprofiled,
            "accounts_share": fmt.pct(saving.share(saving.accounts_us))
            if saving.accounts_us and saving.step_us else None,
            "saving": fmt.time(saving.saving_us) if saving.saving_us is not None else None,
            "share": fmt.pct(saving.share(saving.saving_us)),
            "low": fmt.time(saving.low_us) if saving.low_us is not None else None,
            "high": fmt.time(saving.high_us) if saving.high_us is not None else None,
            "band": saving.low_us is not None and saving.high_us is not None
            and saving.high_us - saving.low_us > 0.01 * (saving.saving_us or 0.0)
            and not _at_top(saving, fmt),
            # the point is its range's top (savings.work_removed: all of the work's time,
            # beyond_roofline: all of its time beyond the roof): "up to 877 us", not
            # "about 877 us (0 to 877 us)" (review C2); the range's floor, where above 0
            "at_top": _at_top(saving, fmt),
            "floor": fmt.time(saving.low_us)
            if _at_top(saving, fmt) and saving.low_us and fmt.time(saving.low_us) != fmt.time(0.0)
            else None,
            "note": saving.note,
            # "up to" the operators' whole time: the worth line says it once (review C-D)
            "all_of_it": bool(saving.accounts_us and upper is None and _at_top(saving, fmt)
                              and saving.saving_us is not None
                              and fmt.time(saving.accounts_us) == fmt.time(saving.saving_us)),
            # the bound is the peaks' ratio (savings.peaks_bound, savings.faster_dtype)
            "peaks": saving.note == UP_TO_PEAKS and upper is not None,
            "unprofiled": (fmt.time(saving.unprofiled_step_us)
                           if saving.unprofiled_step_us else None),
            # an idle device's time that other findings' host work accounts for, taken
            # off its saving (savings.idle_left), and the idle time with it
            "others": fmt.time(saving.others_us) if saving.others_us else None,
            "idle": fmt.time(saving.with_others_us)
            if saving.with_others_us is not None else None,
            "before": fmt.time(saving.measured["before_ms"] * 1e3) if saving.measured else None,
            "after": fmt.time(saving.measured["after_ms"] * 1e3) if saving.measured else None,
            # the operators' recorded time, where it ran past the step and both sides were
            # brought down to the step (savings._within_step)
            "recorded": fmt.time(saving.measured["recorded_ms"] * 1e3)
            if saving.measured and saving.measured.get("recorded_ms") else None,
            "ratio": fmt.pct(saving.measured["after_ms"] / saving.measured["before_ms"])
            if saving.measured and saving.measured.get("before_ms") else None,
            # the model's whole step timed with the fix and without it (its result's whole_step)
            "step_less": fmt.pct(saving.measured["saved_share"])
            if saving.measured and saving.measured.get("whole_step") else None,
            "step": fmt.time(saving.step_us) if saving.step_us else None,
            # the step measured here is the fixed one; the saving is of the user's own
            # (savings.estimate: step_is_fixed)
            "users_step": bool(saving.measured and saving.measured.get("step_is_fixed")
                               and saving.measured.get("whole_step")),
            # the model's step saved more than the finding's operators take (a whole
            # step's timing: the fix changed more of the step than their own time)
            "beyond": bool(saving.measured and saving.measured.get("whole_step")
                           and saving.accounts_us and saving.saving_us
                           and saving.saving_us > 1.05 * saving.accounts_us),
            # the page faults of the finding's tensors, which the timed replacement lacks
            "faults": fmt.time(saving.measured["faults_ms"] * 1e3)
            if saving.measured and saving.measured.get("faults_ms") else None,
            # the replacement timed twice, the two savings apart (savings.varied)
            **({"first": fmt.time(max(0.0, saving.measured["saved_first_ms"]) * 1e3),
                "second": fmt.time(max(0.0, saving.measured["saved_second_ms"]) * 1e3)}
               if saving.measured and "saved_first_ms" in saving.measured else {})}
    # what the report's choices read (reporter.render.sentences)
    view["choices"] = FindingChoices(  # loop: dominant-operator's loop_us, where it has one
        op=bool(view["op"]), loop=bool(view.get("loop")), first_touch=bool(f.evidence.first_touch),
        profiled_faults="profiled_faults_text" in view,
        worth=_worth_choices(view["worth"]) if "worth" in view else NO_WORTH)
    return view


def _worth_choices(w: dict[str, Any]) -> WorthChoices:
    """What the worth line's choices read of a finding's ``worth``: its keys of the same
    names, said or not; whether it was timed twice (``first``), and its note."""
    said = {f.name: bool(w[f.name]) for f in fields(WorthChoices) if f.name not in
            ("varied", "note")}
    return WorthChoices(**said, varied="first" in w, note=w["note"])
