"""One step of the target in a mode (_Stepper): its batch moved to the device, the
forward, loss, backward and optimizer step, each under its record_function mark."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from torch.profiler import record_function

from . import device as devices
from .target import Target
from .whatif import tensors_mapped


def _to_device(batch: Any, device: str, non_blocking: bool) -> Any:
    return tensors_mapped(batch, lambda t: t.to(device, non_blocking=non_blocking))


class _Stepper:
    """One step of a target in one mode, with the phase marks of the seeds."""

    def __init__(self, target: Target, mode: str, device: str):
        self.target, self.mode, self.device = target, mode, device
        self._tensors = devices.get(device).tensor_device  # where the inputs go
        self._it = iter(target.batches)
        self._forward = target.forward or (lambda model, batch: model(batch[0]))
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(target.autocast or "")
        device_type = self._tensors.split(":")[0]
        self._autocast = (lambda: torch.autocast(device_type, dtype=dtype)) if dtype \
            else contextlib.nullcontext
        # the model's modules and their modes as the target handed it over (set by
        # _profile_target before the first step changes them): the user's own path
        self.as_built: list[tuple[Any, bool]] | None = None
        if hasattr(target.model, "train"):
            target.model.train(mode == "train")
        self._copies = not device.startswith("cpu")  # inputs move to the device
        # A what-if's change to each batch as it is loaded (whatif.single_precision)
        self.cast: Callable[[Any], Any] | None = None

    def _next_batch(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.target.batches)
            return next(self._it)

    def __call__(self) -> None:
        self.run(self.load())

    def load(self) -> Any:
        """The next batch, on the device."""
        with record_function("data_loading"):
            batch = self._next_batch()
            if self.cast is not None:
                batch = self.cast(batch)
        if self._copies:
            with record_function("input_copy"):
                batch = _to_device(batch, self._tensors, self.target.non_blocking)
        return batch

    def forward_as_user(self, batch: Any) -> Any:
        """The forward on one batch as the target's own code runs it: the process's grad
        mode, the model's modes as they are, no inference_mode of the runner's."""
        with self._autocast():
            return self._forward(self.target.model, batch)

    def run(self, batch: Any) -> None:
        """The model's part of the step on one batch."""
        t = self.target
        if self.mode == "inference":
            with torch.inference_mode(), self._autocast(), record_function("forward"):
                self._forward(t.model, batch)
            return
        with self._autocast():
            with record_function("forward"):
                out = self._forward(t.model, batch)
            with record_function("loss"):
                assert t.loss is not None  # Target.check: training has a loss
                loss = t.loss(out, batch)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer_step"):
            assert t.optimizer is not None  # Target.check: training has an optimizer
            t.optimizer.step()
            t.optimizer.zero_grad(set_to_none=True)
