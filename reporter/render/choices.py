"""What the report's sentence choices read: for each kind of value a sentence is about, a
frozen dataclass of exactly the facts its choices test, typed, which the view builder
computes in Python and carries with the view (``choices``: a key of a view's dict, a field
of SectionView, ReportView and ModeView).

reporter.render.sentences reads them through ``carried(Cls)``, an isinstance-checked
getter, as a rule's choices read its evidence through ``reporter.model.choice.of``:
``section(s).interval`` is checked by mypy, a misspelled or removed field fails it, and a
view that carries no choices of that kind fails the render (TypeError), never a sentence
silently changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, TypeVar

Mode = Literal["train", "inference"]


def mode_of(label: str | None) -> Mode | None:
    """A section's label as a mode, where it is one."""
    return "train" if label == "train" else "inference" if label == "inference" else None


@dataclass(frozen=True, kw_only=True)
class RunChoices:
    """The report's own values (ReportView), for the slots said of no value: the run's
    facts and the closing line."""

    cuda: bool  # the runtime's version torch was built with is known
    driver: bool  # the driver's version is known
    batch: bool  # the target's batch size is known
    threads: bool  # torch's threads are known
    seed: bool  # the target's seed is known (and not 0)
    device_memory: bool  # the device's memory is known
    larger_preset: bool  # a built-in target, run at a preset smaller than the largest
    on_gpu: bool  # the run's device is a GPU
    traces: int  # the sections with a Chrome trace
    first_trace: bool  # the first section has one


@dataclass(frozen=True, kw_only=True)
class BusyChoices:
    """The busy-machine statement of a section (SectionView.busy)."""

    time: bool  # the share of the timed time disturbed is known
    wait: bool  # the share of time the threads waited for a core is known
    all_windows: bool  # every timed window was disturbed
    windows: int  # the timed windows (all of them, disturbed or not)
    unreliable: bool  # too few quiet windows for an interval
    profile: bool  # the profiled steps were disturbed (their share is known)
    whatif: bool  # the replacements' timings were disturbed
    peaks: bool  # the peaks' measurement was disturbed


@dataclass(frozen=True, kw_only=True)
class WhatifChoices:
    """A what-if not timed (a row of SectionView.whatifs_failed)."""

    estimated: bool  # its finding has a saving estimated from the profile
    over_cap: bool  # its operands were over the cap
    exited: bool  # the target called sys.exit


@dataclass(frozen=True, kw_only=True)
class SectionChoices:
    """A section (SectionView): its throughput, summary lines and findings."""

    ranged: bool  # the timed windows gave a range (its top differs from its bottom)
    interval: bool  # the throughput has a confidence interval
    interval_high: bool  # the interval's top differs from its bottom, as printed
    outliers: int  # windows left out as outliers
    windows: int  # timed windows used
    disturbed_windows: int  # windows left out as disturbed
    tf32_forced: bool  # the environment forced TF32's setting
    driven: Mode | None  # how the runner drove the step
    probe: Literal["graph", "none"] | None  # the user's forward built autograd state or not
    training_modules: int | None  # the modules the target handed over in training mode
    host_held: bool  # the process held host memory before the mode began
    mode: Mode | None  # the section is one mode of a run
    tensor_categories: tuple[str, ...]  # the memory profile's categories at its peak
    findings: tuple[str, ...]  # the main findings' rules, in order
    minor_findings: int  # the minor findings


@dataclass(frozen=True, kw_only=True)
class RankChoices:
    """A rank's row (the ranks' table)."""

    error: bool  # the rank failed with an error the report quotes


@dataclass(frozen=True, kw_only=True)
class BreakdownChoices:
    """The step breakdown (SectionView.breakdown): its reading, launches and ranks."""

    gpu_bound: bool  # the GPU bounds the step
    unmarked_first: bool  # time no phase marks is larger than any phase: said first
    idle_known: bool  # the GPU's busy and idle shares are known
    idle_reason: str | None  # why the GPU mostly idles (breakdown's reading)
    comm_hidden: bool  # compute hides communication (its share is known)
    pageable: bool  # copies through pageable host memory take time per step
    pageable_from_host: bool  # ... and all of them go host -> device
    dry_steps: int  # the steps in which the GPU ran out of queued work (0: no launches)
    launch_steps: int  # the steps the launch statistics are over (0: none)
    all_steps_dry: bool  # the GPU ran dry in every one of them
    two_ranks: bool  # the ranks side by side are two: "the other rank"
    ranks_on_device: bool  # the ranks ran on GPUs (else on CPUs, gloo)


@dataclass(frozen=True, kw_only=True)
class StreamChoices:
    """A stream's row (the streams' and the launch queue's tables)."""

    device: bool  # the trace names its device


@dataclass(frozen=True, kw_only=True)
class PathRowChoices:
    """A row of the critical path."""

    group: Literal["host", "device", "link"]  # where the row's time lies


@dataclass(frozen=True, kw_only=True)
class CriticalChoices:
    """The critical path (the breakdown's ``critical``)."""

    unprofiled: bool  # the profiler lengthened a host-held step: the timed step is said


@dataclass(frozen=True, kw_only=True)
class LongStepChoices:
    """A long step (a row of the breakdown's ``long_steps``)."""

    first: bool  # the first of them
    count: int  # how many there are


@dataclass(frozen=True, kw_only=True)
class CompiledChoices:
    """What torch.compile did (SectionView.compiled)."""

    device_parts: bool  # the regions' GPU time is split by how it was launched
    device_share: bool  # the regions' share of GPU time is known
    share: bool  # their share of the step is known
    lookups: bool  # Dynamo checked guards
    step_range: bool  # the compiled time per step varied between steps
    breaks: bool  # graph breaks were found
    frames: int  # the frames compiled
    breaks_known: bool  # the trace places the regions (breaks can be told)
    by_region: bool  # kernels are named by their region
    by_source: bool  # kernels show the model code they came from
    recompiled: bool  # frames were recompiled
    compile_time: bool  # compilation took time in the profiled window
    kernels: int  # generated kernels shown
    kernels_more: int  # generated kernels the table leaves out
    unnamed_fusions: bool  # a kernel shown names no operators it fuses
    on_gpu: bool  # the profile has device time


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """What the step computes (the efficiency's and the counts' views)."""

    training: bool  # the step trains: the backward's FLOPs counted


@dataclass(frozen=True, kw_only=True)
class EfficiencyChoices(StepWork):
    """MFU, the peaks and the efficiency table (SectionView.efficiency)."""

    step_timed: bool  # the step is the one timed without the profiler
    measured: bool  # the peaks were measured here (their time is known)
    threads: bool  # a CPU measurement's threads are known
    sparse: bool  # the datasheet's peaks are for sparse matrices (halved)
    raised: bool  # the run beat the peaks: they were raised
    tf32_inferred: bool  # fp32 products ran as TF32
    basis: Literal["device", "cpu"]  # whose time the operators are measured in
    not_modelled: bool  # operators with time and no formula
    over_roof: bool  # an operator ran above the memory roof
    no_peak: bool  # dtypes without a peak


@dataclass(frozen=True, kw_only=True)
class CountsChoices(StepWork):
    """What the step computes where no rate is given (SectionView.efficiency_counts)."""

    more: int  # modelled operators the table leaves out


@dataclass(frozen=True, kw_only=True)
class WorthChoices:
    """What a finding is worth (its view's ``worth``; NO_WORTH where it has none)."""

    users_step: bool  # the saving is of the user's own step (the fixed one was timed)
    step_less: bool  # the whole step was timed with the fix and without it
    recorded: bool  # the operators' recorded time ran past the step
    faults: bool  # the timing lacked the page faults the step took
    before: bool  # the replacement was timed
    saving: bool  # a saving is told
    at_top: bool  # the saving is the top of its own range, as printed
    peaks: bool  # the bound is the peaks' ratio
    upper: bool  # an upper bound, not a saving
    band: bool  # the saving has a range around it
    floor: bool  # the range's floor is above 0
    all_of_it: bool  # the bound is all of the operators' time
    accounts: bool  # the operators' time is told
    accounts_unprofiled: bool  # ... of the step timed without the profiler
    accounts_share: bool  # ... with its share of the step
    beyond: bool  # the step saved more than the operators take
    unprofiled: bool  # the GPU idles at most this, in the unprofiled step
    others: bool  # other findings' host work accounts for idle time
    varied: bool  # the replacement was timed twice, the savings apart
    note: str | None  # the saving's note (reporter.model.finding: NOT_FASTER...)


NO_WORTH = WorthChoices(
    users_step=False, step_less=False, recorded=False, faults=False, before=False,
    saving=False, at_top=False, peaks=False, upper=False, band=False, floor=False,
    all_of_it=False, accounts=False, accounts_unprofiled=False, accounts_share=False,
    beyond=False, unprofiled=False, others=False, varied=False, note=None)


@dataclass(frozen=True, kw_only=True)
class FindingChoices:
    """A finding's view (finding_view._finding_view: the report's and a comparison's)."""

    op: bool  # the finding names an operator
    loop: bool  # its loop's module's own code is timed (dominant-operator's loop_us)
    first_touch: bool  # the profiler's page faults are the tensors' first touch
    profiled_faults: bool  # the profiler added page faults (their count is told)
    worth: WorthChoices


@dataclass(frozen=True, kw_only=True)
class ModeChoices:
    """A mode compared (ModeView)."""

    ratio_low: bool  # the ratio has an interval
    ratio_high: bool  # the interval's top differs from its bottom, as printed
    busy_runs: int  # the compared runs other work disturbed


C = TypeVar("C")


def carried(cls: type[C]) -> Callable[[Any], C]:
    """The choices a view carries (a dict's or a jinja2 Context's ``"choices"``, else the
    object's ``choices``), as ``cls``, whose fields mypy checks: ``carried(SectionChoices)
    (s).interval``. A view without them, or with another kind's, is a TypeError."""
    def get(x: Any) -> C:
        held = x.get("choices") if isinstance(x, Mapping) else getattr(x, "choices", None)
        if not isinstance(held, cls):
            raise TypeError(f"a report sentence about {cls.__name__} read "
                            f"{type(held).__name__} ({type(x).__name__}'s choices)")
        return held
    return get
