"""What a run is asked for (RunOptions) and how it reports its progress (Progress)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


Progress = Callable[[str], None]


@dataclass
class RunOptions:
    device: str = "auto"  # auto | cuda | cpu
    preset: str = "default"
    warmup_steps: int = 2  # then one more, timed, sizes the windows
    windows: int = 5  # un-profiled timed windows: at least these (exactly, with ranks)
    window_s: float = 0.25  # aim for windows this long (and at least 3 steps)
    # Seconds of timed windows per target (shared by its modes): windows are added until
    # the median's 95% interval is within +-precision, or until the budget is spent.
    time_budget_s: float = 1.5
    precision: float = 0.02
    max_windows: int = 200
    profile_steps: int = 3  # active steps of the profiler schedule: at least these,
    max_profile_steps: int = 10  # up to these when steps are short (see below)
    profile_s: float = 0.1  # aim for a profiled window this long
    # In a distributed run, how ranks settle on a number they must share (the
    # steps per timed window: DDP's collectives pair up step by step).
    agree: Callable[[int], int] | None = None
    threads: int | None = None  # torch's intra-op threads while profiling (None: as set)
