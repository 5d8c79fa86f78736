"""What the analysis finds, and what each finding is worth: the records every stage
reads (the analyzer makes them, the savings price them, the views format them and the
runner's what-ifs measure them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Finding:
    rule: str
    severity: str
    evidence: dict[str, Any]  # raw numbers: shares in 0..1, times in us, memory in bytes
    ops: list[str] = field(default_factory=list)  # operators the finding explains

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "ops": self.ops, **self.evidence}


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
