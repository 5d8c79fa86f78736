"""A CUDA device for tests on the CPU (reporter.collect.device's seam).

``FakeCuda`` answers as the H100 of tests/fixtures/runs/cuda-h100-transformer answered
(its properties, cuDNN, driver and the memory peaks it recorded) and logs every device
call the runner makes, in order; the model's tensors stay on the CPU. TF32 is set and
read for real: torch's precision flags exist on a CPU build, and so does the check that
makes its legacy getters raise in a mixed state.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator

from reporter.collect import device as devices

_RUN = json.loads((Path(__file__).parent / "fixtures" / "runs" / "cuda-h100-transformer"
                   / "run.json").read_text(encoding="utf-8"))["run"]
H100_ENV: dict[str, Any] = _RUN["env"]
# (allocated, reserved) peaks as the H100 recorded them, per mode in run order
H100_PEAKS = [(s["memory"]["device_allocated_b"], s["memory"]["device_reserved_b"])
              for s in _RUN["sections"]]


class FakeEvent:
    def __init__(self, log: list[str]) -> None:
        self.log, self.t = log, None

    def record(self) -> None:
        self.log.append("event.record")
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        self.log.append("event.sync")

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.t is not None and end.t is not None, "an event read before it was recorded"
        return (end.t - self.t) * 1e3


class FakeCuda(devices.HostDevice):
    is_gpu = True

    def __init__(self, name: str = "cuda", total_memory: int | None = None,
                 count: int = 1, fail_after_syncs: int | None = None,
                 free_memory: int | None = None) -> None:
        super().__init__(name)
        self.tensor_device = "cpu"
        self.total_memory = int(total_memory or H100_ENV["device_memory_b"])
        self.count = count
        self.log: list[str] = []
        self._peaks = iter(H100_PEAKS * 50)
        self.fail_after_syncs = fail_after_syncs
        # the device's free memory (None: the H100's total less the transformer's peak)
        self.free = free_memory if free_memory is not None else self.total_memory - max(
            p[1] for p in H100_PEAKS)

    def synchronize(self) -> None:
        self.log.append("sync")
        if self.fail_after_syncs is not None and self.log.count("sync") > self.fail_after_syncs:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\n"
                               "CUDA kernel errors might be asynchronously reported")

    def event(self) -> FakeEvent:
        return FakeEvent(self.log)

    def reset_peaks(self) -> None:
        self.log.append("reset_peaks")

    def memory_peaks(self) -> tuple[int, int]:
        self.log.append("memory_peaks")
        return next(self._peaks)

    def free_memory(self) -> int:
        self.log.append("free_memory")
        return self.free

    def properties(self) -> devices.Properties:
        major, minor = (int(x) for x in H100_ENV["capability"].split("."))
        return devices.Properties(name=H100_ENV["device_name"],
                                  total_memory=self.total_memory, major=major, minor=minor)

    def index(self) -> int:
        return 0

    def cudnn_version(self) -> int:
        return int(H100_ENV["cudnn"])

    def driver(self) -> str:
        return str(H100_ENV["driver"])

    def bf16_supported(self) -> bool:
        return True

    @contextlib.contextmanager
    def tf32(self, enabled: bool) -> Iterator[None]:
        self.log.append(f"tf32 {enabled}")
        with devices.tf32(enabled):
            yield
        self.log.append("tf32 restored")

    def tf32_state(self) -> dict[str, Any]:
        return devices.tf32_state()


@contextlib.contextmanager
def fake_cuda(**kwargs: Any) -> Iterator[FakeCuda]:
    """Every ``cuda`` name is ``FakeCuda(**kwargs)`` (the same one) in the block."""
    fake = FakeCuda(**kwargs)
    with devices.use(lambda name: fake):
        yield fake
