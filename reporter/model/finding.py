"""What the analysis finds, and what each finding is worth: the records every stage
reads (the analyzer makes them, the savings price them, the views format them and the
runner's what-ifs measure them)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Self

# A saving's note: the profile cannot give an estimate; the replacement, timed on the
# device, saves nothing there; the finding's time lies in other findings' operators and
# goes with their fixes (page faults where those operators write their fresh pages); or
# what the fixed step keeps (savings.kept_us) fills the step as timed, so no saving is
# left to tell (a busy machine's step, say).
NOT_QUANTIFIABLE = "not-quantifiable"
NOT_FASTER = "not-faster"
IN_OTHERS = "in-others"
NO_ROOM = "no-room"
# No saving can be told, but an upper bound can: the time the finding's operators take,
# which no fix of them can beat (Saving.high_us; savings.upper_bound).
UP_TO = "up-to"
# No saving was measured, only the most a faster dtype could save by the peaks' ratio
# (Saving.high_us; savings.peaks_bound, savings.faster_dtype): the report says "up to".
UP_TO_PEAKS = "up-to-peaks"
BOUNDS = (UP_TO, UP_TO_PEAKS)
# A finding whose fix saves less than this share of the step is minor.
MINOR_SHARE = 0.03


# A finding's evidence --------------------------------------------------------------

def opt() -> Any:
    """An evidence field a rule gives only where it has it: left out of the JSON while
    None (as a key the rule's dict did not hold)."""
    return field(default=None)


def nullable() -> Any:
    """An evidence field that is always in the JSON, null where the rule has no value."""
    return field(default=None, metadata={"keep_none": True})


@dataclass(kw_only=True)
class Evidence:
    """What a rule found, as raw numbers with their units in their names: shares in 0..1
    (``share``, ``*_share``), times in microseconds (``*_us``), memory in bytes (``*_b``),
    FLOP/s (``*_fps``). Each rule declares its own (a subclass, beside its detection,
    ``@rule(..., evidence=...)``); its fields, in their order, are the finding's keys in
    ``--json`` and the names its words read (reporter.render.report_view).

    The fields here are the ones the stages after detection read of any finding (the
    ranking, the savings, the profiler's distortion); a rule redeclares those it gives,
    in its own order. The rest are set after detection, by the analyzer. A field left
    None is not in the JSON (``opt``), unless declared ``nullable``; one set after the
    evidence was made comes after the others, in the order it was set, as a key added
    to a dict would. Keys an old record holds that no field declares are kept in
    ``extra`` (``from_dict``)."""

    # what the share is of: "device", "cpu", "step" (the profiled steps' wall time) or
    # "memory"
    basis: str | None = opt()
    share: float | None = opt()
    op: str | None = opt()  # the operator (or call, kernel) the finding names first
    op_time_us: float | None = opt()  # the time it accounts for, over the profiled steps
    saving_us: float | None = opt()  # a saving the rule states itself (savings.stated)
    unprofiled: bool | None = opt()  # measured without the profiler: nothing to distort
    # Set after detection (reporter.analyze.analyzer): the model is compiled already; the
    # profiled steps a total is over; the page faults the profiler added, and its cost a
    # call (profiler_distortion)
    compiled: bool | None = opt()
    steps: int | None = opt()
    profiled_faults: int | None = opt()
    unprofiled_faults: int | None = opt()
    profiled_faults_step_us: float | None = opt()
    unprofiled_faults_step_us: float | None = opt()
    first_touch: bool | None = opt()
    profiler_call_us: float | None = opt()
    extra: dict[str, Any] = field(default_factory=dict, metadata={"extra": True})

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keys", [n for n in self._order() if self._present(n)])
        object.__setattr__(self, "_nulls", set())

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        keys: list[str] | None = self.__dict__.get("_keys")
        if keys is not None and name not in keys and name in self._fields() \
                and self._present(name):
            keys.append(name)

    @classmethod
    def _fields(cls) -> dict[str, Any]:
        return {f.name: f for f in fields(cls) if not f.metadata.get("extra")}

    @classmethod
    def _order(cls) -> list[str]:
        """The fields in the order the rule declares them (a field redeclared takes its
        new place), then the ones declared here that it did not."""
        names = cls._fields()
        out: list[str] = []
        for c in cls.__mro__:
            for n in getattr(c, "__annotations__", {}):
                if n in names and n not in out:
                    out.append(n)
        return out

    def _present(self, name: str) -> bool:
        """Whether the field is in the JSON: set, declared ``nullable``, or null in the
        record it was read from (``from_dict``, ``keep``)."""
        return getattr(self, name) is not None or name in self.__dict__.get("_nulls", ()) \
            or bool(self._fields()[name].metadata.get("keep_none"))

    def as_dict(self) -> dict[str, Any]:
        """The evidence as the JSON and the words read it: its fields by name (a field
        set to None since is left out, as a key deleted from a dict)."""
        keys: list[str] = self.__dict__["_keys"]
        return {**{n: getattr(self, n) for n in keys if self._present(n)}, **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The evidence of these keys, in their order; keys no field declares go to
        ``extra``. TypeError where a field the class needs is missing."""
        names = cls._fields()
        ev = cls(**{k: v for k, v in data.items() if k in names},
                 extra={k: v for k, v in data.items() if k not in names})
        object.__setattr__(ev, "_keys", [k for k in data if k in names])
        object.__setattr__(ev, "_nulls", {k for k in data if k in names and data[k] is None})
        return ev

    def keep(self, *names: str) -> None:
        """Right after it is made: these fields are in the JSON even where None (a
        record read whole, some of whose values are null)."""
        self.__dict__["_nulls"].update(names)
        keys = set(self.__dict__["_keys"]) | set(names)
        object.__setattr__(self, "_keys", [n for n in self._order() if n in keys])

    # What the stages after detection read of a rule's own fields, where it has them.

    def fresh_ops(self) -> list[str]:
        """Operators beyond the finding's ``ops`` whose time and fresh pages are its (a
        blow-up's copies)."""
        return []

    def copies_share(self) -> float:
        """The share (of the basis) of copies another finding reports that are this
        one's (a blow-up's materialising copies)."""
        return 0.0

    def freed_b(self) -> float:
        """Bytes its fix no longer allocates beyond its operators' (attention scores'
        scaling)."""
        return 0.0

    def profiler_faults_us(self) -> float | None:
        """The page faults the profiler added to the step its share is of, where that
        share leaves them out (a per-sample loop's)."""
        return None


# A rule's class redeclares the fields here that it gives, without a default where it
# always does: the defaults' class attributes go, or a dataclass would inherit them and
# take such a field as optional.
for _f in fields(Evidence):
    if _f.name in Evidence.__dict__:
        delattr(Evidence, _f.name)


# Each rule's evidence class, by rule id (reporter.analyze.findings registers them).
EVIDENCE: dict[str, type[Evidence]] = {}


def evidence_from(rule: str, data: Mapping[str, Any]) -> Evidence:
    """A rule's evidence from its keys (a stored finding's JSON, a test's dict), in their
    order (``Evidence.from_dict``). Where the keys lack a field its class needs, or the
    rule is unknown, the plain ``Evidence`` holds them: the stages after detection read
    its shared fields, and a rule's own saving model, finding no evidence of its own,
    says the profile cannot tell."""
    cls = EVIDENCE.get(rule, Evidence)
    try:
        return cls.from_dict(data)
    except TypeError:
        return Evidence.from_dict(data)


@dataclass
class Finding:
    rule: str
    severity: str
    evidence: Evidence  # its rule's (EVIDENCE): raw numbers, units in their names
    ops: list[str] = field(default_factory=list)  # operators the finding explains

    def __post_init__(self) -> None:
        if isinstance(self.evidence, Mapping):  # a stored finding's or a test's keys
            self.evidence = evidence_from(self.rule, self.evidence)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "ops": self.ops,
                **self.evidence.as_dict()}


@dataclass
class Saving:
    """What a finding is worth, per step (reporter.analyze.savings)."""

    accounts_us: float | None  # the time the finding accounts for, per step
    saving_us: float | None  # the estimated saving of its fix, per step
    low_us: float | None
    high_us: float | None
    step_us: float | None  # the step the shares are of (see savings.estimate)
    # NOT_QUANTIFIABLE, NOT_FASTER, IN_OTHERS, NO_ROOM, UP_TO or UP_TO_PEAKS (above)
    note: str | None = None
    # {"before_ms", "after_ms", ...}: timed here; a fix timed on the model's whole step
    # also says "whole_step" (True), "saved_share" and what was applied ("fix")
    measured: dict[str, Any] | None = None
    # Set when the step timed without the profiler bounded an idle-time saving.
    unprofiled_step_us: float | None = None
    # Time taken off the saving because other findings own it (an idle device's: the host
    # work they account for, savings.idle_left); the saving is what is left.
    others_us: float | None = None
    host_saving: bool = False  # the saving is host time under the profiler (see estimate)
    # The time it accounts for was brought from the profiled step to the step timed
    # without the profiler (savings.estimate): not the profiled time the finding states.
    accounts_unprofiled: bool = False

    def share(self, us: float | None) -> float | None:
        return us / self.step_us if us is not None and self.step_us else None

    @property
    def with_others_us(self) -> float | None:
        """The saving with the part other findings own put back (an idle device's whole
        idle time, savings.idle_left); the saving itself where none was taken off."""
        return (self.saving_us + (self.others_us or 0.0)
                if self.saving_us is not None else None)

    @property
    def minor(self) -> bool:
        s = self.share(self.saving_us)
        return s is not None and s < MINOR_SHARE

    def to_json(self) -> dict[str, Any]:
        """The fields --json adds to a finding."""
        def ms(us: float | None) -> float | None:
            return us / 1e3 if us is not None else None

        return {"accounts_ms": ms(self.accounts_us), "saving_ms": ms(self.saving_us),
                "saving_share": self.share(self.saving_us), "saving_low": ms(self.low_us),
                "saving_high": ms(self.high_us), "saving_note": self.note,
                "measured": self.measured,
                "bounded_by_unprofiled_step_ms": ms(self.unprofiled_step_us),
                "in_other_findings_ms": ms(self.others_us)}
