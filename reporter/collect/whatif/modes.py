"""The modes' what-ifs: the step with autograd's anomaly detection off (``anomaly_step``) and
the inference step as the user's code runs it against the runner's (``inference_step``)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .steps import _patchable, fixed_step


@contextlib.contextmanager
def anomaly_off() -> Iterator[None]:
    """Autograd's anomaly detection off inside the block, whether the process set it
    (``torch.autograd.set_detect_anomaly(True)``) or the step enters it itself (``with
    torch.autograd.detect_anomaly():``, which calls ``torch.set_anomaly_enabled`` as it
    is entered and left: that call keeps it off inside the block); the mode and the
    function put back after."""
    import torch

    state = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
    orig = torch.set_anomaly_enabled

    def kept_off(enabled: bool, check_nan: bool = True) -> None:
        orig(False, check_nan)

    torch.set_anomaly_enabled = kept_off
    orig(False, state[1])
    try:
        yield
    finally:
        torch.set_anomaly_enabled = orig
        orig(*state)


def anomaly_step(device: str, step: Any) -> dict[str, Any] | None:
    """The model's step with anomaly detection off (``anomaly_off``) and as it is, in turn
    (``fixed_step``)."""
    return fixed_step(device, step, anomaly_off, "anomaly-off") if step is not None else None


class _AsUser:
    """The section's inference step as the target's own code runs it (runner._Stepper's
    ``forward_as_user``): a batch, then the forward in the process's grad mode, the
    model's modules in the modes they are in, no inference_mode of the runner's."""

    def __init__(self, step: Any) -> None:
        self._step, self.target, self.mode = step, step.target, step.mode

    def __call__(self) -> None:
        self._step.forward_as_user(self._step.load())


def inference_step(device: str, step: Any) -> dict[str, Any] | None:
    """The inference step as the user's own code runs it (the modules in the modes the
    target handed them over in, ``_Stepper.as_built``; the process's grad mode) and as the
    runner runs it (``torch.inference_mode()`` and ``eval()``: the fix), in turn
    (``fixed_step``). The section's step is the fixed one here (``step_is_fixed``:
    reporter.analyze.savings takes the saving as a share of it). None without the modes
    as built or for a compiled model (it would compile again for the other grad mode)."""
    import torch

    built = getattr(step, "as_built", None)
    if built is None or not _patchable(step):
        return None
    model = step.target.model

    @contextlib.contextmanager
    def as_the_runner_runs_it() -> Iterator[None]:
        now = [(m, m.training) for m, _ in built]
        model.train(False)
        try:
            with torch.inference_mode():
                yield
        finally:
            for m, training in now:
                m.training = training

    now = [(m, m.training) for m, _ in built]
    for m, training in built:
        m.training = training
    try:
        timed = fixed_step(device, _AsUser(step), as_the_runner_runs_it, "inference-mode",
                           in_mode=False)
    finally:
        for m, training in now:
            m.training = training
    timed.pop("faults", None)  # of another step than the one the run counted before
    return {**timed, "step_is_fixed": True}
