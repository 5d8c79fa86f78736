"""The device the runner measures on, behind one small interface.

``get(name)`` gives the runner its device: synchronise (every stream of it),
timing events and the time between them, the memory peaks and their reset, the
properties, the profiler activities, TF32 set and read. ``CudaDevice`` is the only
place in reporter.collect that calls ``torch.cuda``; ``HostDevice`` is the CPU, where
synchronising is nothing and an event is a ``perf_counter`` reading.

Tests put a fake in its place with ``use(factory)``: ``profile_target`` with
``device="cuda"`` then runs end to end on the CPU, with the model's tensors on
``tensor_device`` ("cpu") and every device call logged by the fake.

TF32 is not a ``torch.cuda`` call but torch's global precision state; it is set and
read here for the runner, the what-ifs and the calibration alike (one helper, both
of torch's APIs: see ``tf32``).
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ..model import device as kinds


@dataclass(frozen=True)
class Properties:
    name: str
    total_memory: int
    major: int
    minor: int


class HostEvent:
    """A point in time on the host: the CPU's work is done when its call returns."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "HostEvent") -> float:
        """Milliseconds from this event to ``end``, as torch.cuda.Event says them."""
        return (end.t - self.t) * 1e3


class HostDevice:
    """The CPU: its work is done when the call returns."""

    is_gpu = False

    def __init__(self, name: str = "cpu") -> None:
        self.name = name
        self.tensor_device = name  # where the target's tensors live

    def synchronize(self) -> None:
        pass

    def event(self) -> Any:
        return HostEvent()

    def reset_peaks(self) -> None:
        pass

    def memory_peaks(self) -> tuple[int, int] | None:
        return None

    def free_memory(self) -> int | None:
        """Bytes that can still be allocated where the tensors live (None: cannot tell)."""
        from .. import memory

        return memory.available()

    def properties(self) -> Properties | None:
        return None

    def index(self) -> int | None:
        return None

    def cudnn_version(self) -> int | None:
        return None

    def driver(self) -> str | None:
        return None

    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU]

    def bf16_supported(self) -> bool:
        return True

    def tf32(self, enabled: bool) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # a CPU run has no TF32: the flags are left alone

    def tf32_state(self) -> dict[str, Any]:
        return {}


class CudaDevice(HostDevice):
    """One CUDA device (``cuda`` or ``cuda:N``)."""

    is_gpu = True

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.name)  # every stream of the device, not only the current

    def event(self) -> Any:
        return torch.cuda.Event(enable_timing=True)

    def reset_peaks(self) -> None:
        """Start the peaks from what is held now, not from what earlier work left in the
        caching allocator."""
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.name)

    def memory_peaks(self) -> tuple[int, int]:
        """(allocated, reserved) peaks since reset_peaks, in bytes."""
        return (int(torch.cuda.max_memory_allocated(self.name)),
                int(torch.cuda.max_memory_reserved(self.name)))

    def free_memory(self) -> int | None:
        """The device's free memory (the caching allocator's cache counts as used)."""
        free, _total = torch.cuda.mem_get_info(torch.device(self.name))
        return int(free)

    def properties(self) -> Properties:
        p = torch.cuda.get_device_properties(torch.device(self.name))
        return Properties(name=p.name, total_memory=int(p.total_memory), major=p.major,
                          minor=p.minor)

    def index(self) -> int:
        if ":" in self.name:
            return int(self.name.split(":", 1)[1])
        return int(torch.cuda.current_device())

    def cudnn_version(self) -> int | None:
        return torch.backends.cudnn.version()

    def driver(self) -> str | None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout
            return out.strip().splitlines()[0] or None
        except (OSError, subprocess.SubprocessError, IndexError):
            return None

    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def bf16_supported(self) -> bool:
        return bool(torch.cuda.is_bf16_supported())

    def tf32(self, enabled: bool) -> contextlib.AbstractContextManager[None]:
        return tf32(enabled)

    def tf32_state(self) -> dict[str, Any]:
        return tf32_state()


# What tests put in CudaDevice's place (see use()); None: the real one.
_fake: Callable[[str], Any] | None = None


def get(name: str) -> Any:
    """The device a run names: ``cuda``/``cuda:N`` or the CPU."""
    if kinds.cuda_api(name):
        return _fake(name) if _fake is not None else CudaDevice(name)
    return HostDevice(name)


def cuda_available() -> bool:
    return True if _fake is not None else torch.cuda.is_available()


def device_count() -> int:
    if _fake is not None:
        return int(getattr(_fake("cuda"), "count", 1))
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def set_current(index: int) -> None:
    """Make GPU ``index`` this process's current one (a rank's own GPU)."""
    if _fake is None:
        torch.cuda.set_device(index)


@contextlib.contextmanager
def use(factory: Callable[[str], Any]) -> Iterator[None]:
    """Tests: ``factory(name)`` gives the device of every ``cuda`` name in the block."""
    global _fake
    saved, _fake = _fake, factory
    try:
        yield
    finally:
        _fake = saved


# --- TF32: torch's global precision state, through both of its APIs -------------------

def new_tf32_api() -> bool:
    """torch >= 2.9 has fp32_precision; reading the legacy allow_tf32 flags then raises
    once anything set the new API alone."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(
        torch.backends.cudnn, "conv")


def matmul_precision() -> str | None:
    """``torch.get_float32_matmul_precision()``, or None where it raises (a target set
    ``fp32_precision`` alone: "a mix of the legacy and new APIs")."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        value = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
        return {"tf32": "high", "ieee": "highest"}.get(value or "")


@contextlib.contextmanager
def tf32_matmul(precision: str) -> Iterator[None]:
    """fp32 matrix products at ``precision`` ("highest": fp32, "high": TF32) for the
    block, through ``set_float32_matmul_precision``, which sets the legacy flag and the
    new API alike; put back as they were, the new API's value included."""
    was = matmul_precision()
    new = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(was or "highest")
        if new is not None and new != "none":
            torch.backends.cuda.matmul.fp32_precision = new


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """TF32 matmuls and convolutions while a target that asks for them runs; the flags
    are not touched (not even read) for the others.

    Matmuls go through ``torch.set_float32_matmul_precision("high")``, which sets the
    legacy flag and the new API alike: setting only the new ``fp32_precision`` (torch >=
    2.9) leaves the two disagreeing, and then torch's legacy getters raise for the whole
    target, in the target's own code (torch.compile, Lightning) as in ours. Convolutions:
    ``cudnn.conv.fp32_precision`` and the legacy ``cudnn.allow_tf32`` both, so that
    either getter answers."""
    if not enabled:
        yield
        return
    new_api = new_tf32_api()
    saved_conv = torch.backends.cudnn.conv.fp32_precision if new_api else None
    try:
        saved_legacy: bool | None = torch.backends.cudnn.allow_tf32
    except RuntimeError:
        saved_legacy = None
    with tf32_matmul("high"):
        _set_conv_tf32(True, new_api)
        try:
            yield
        finally:
            if saved_legacy is not None:
                torch.backends.cudnn.allow_tf32 = saved_legacy
            if new_api:
                torch.backends.cudnn.conv.fp32_precision = saved_conv


def _set_conv_tf32(on: bool, new_api: bool) -> None:
    # The legacy setter first: on torch >= 2.9 it sets the new attribute too, and the
    # new one after it leaves the two agreeing.
    torch.backends.cudnn.allow_tf32 = on
    if new_api:
        torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"


def tf32_state() -> dict[str, Any]:
    """Whether fp32 matmuls and convolutions run as TF32 now (None: cannot tell), and
    whether the environment forces it (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, set by some
    containers, makes even an "fp32" baseline's GEMMs TF32)."""
    override = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") == "1"

    def read(new: Any, legacy: Callable[[], bool]) -> bool | None:
        value = getattr(new, "fp32_precision", "none") if new is not None else "none"
        if value in ("tf32", "ieee"):
            return value == "tf32"
        try:
            return bool(legacy())
        except RuntimeError:  # the legacy flag after the new API was used
            return None

    matmul = read(torch.backends.cuda.matmul if new_tf32_api() else None,
                  lambda: torch.backends.cuda.matmul.allow_tf32)
    conv = read(torch.backends.cudnn.conv if new_tf32_api() else None,
                lambda: torch.backends.cudnn.allow_tf32)
    return {"matmul": True if override else matmul, "conv": conv, "override": override}
