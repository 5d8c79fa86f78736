"""What kind of device a run or a trace ran on, decided once: the record every stage
reads instead of testing device strings (``tests/test_registry.py`` holds the package to
no ``startswith("cuda")`` outside this module).

torch names every GPU it drives through CUDA's API ``cuda``, ROCm's included (a HIP
build of torch keeps the ``cuda`` device type and its profiler's CUDA activity); what
tells them apart is the build (``torch.version.hip``), the device's name ("AMD Instinct
MI250X", "NVIDIA H100 80GB HBM3"), or, in a trace, the runtime's calls (``hipLaunchKernel``
against ``cudaLaunchKernel``). Vendor knowledge (kernel and library names, runtime calls,
matrix-engine architectures) is kept in one table by vendor (reporter.model.vendors), the
datasheets and links in reporter.analyze.peaks, both keyed by ``Device.vendor``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .vendors import AMD


@dataclass(frozen=True)
class Device:
    kind: str  # "cpu", "cuda" (NVIDIA), "rocm" (AMD), "xpu" (Intel)
    vendor: str  # "NVIDIA", "AMD", "Intel"; "" for the CPU
    runtime: str  # the name a report prints for the device's runtime: "CUDA", "ROCm", "XPU"
    has_tf32: bool  # fp32 matrix products may run as TF32 (NVIDIA, from Ampere on)
    activity: str  # torch.profiler's activity for its work: "CUDA", "XPU"; "" for none
    collectives: str  # the collective backend its ranks use: "nccl" (RCCL under ROCm)

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"


CPU = Device("cpu", "", "", False, "", "gloo")
CUDA = Device("cuda", "NVIDIA", "CUDA", True, "CUDA", "nccl")
ROCM = Device("rocm", "AMD", "ROCm", False, "CUDA", "nccl")
XPU = Device("xpu", "Intel", "XPU", False, "XPU", "xccl")
KINDS = {d.kind: d for d in (CPU, CUDA, ROCM, XPU)}

# torch's device types, as a device string starts ("cuda:1", "xpu"): the GPUs' API.
_TORCH_TYPES = ("cuda", "xpu")
# What names an AMD device (its marketing name, or the generic name a HIP trace gives),
# and the runtime calls only HIP makes (a ROCm trace's cuda_runtime events hold them):
# AMD's row of the vendor table.
_AMD_NAMES = AMD.device_names
_HIP_PREFIX = AMD.runtime_calls


def is_gpu(device: str | None) -> bool:
    """Whether a torch device string ("cuda", "cuda:1", "xpu", "cpu") names a GPU."""
    return bool(device) and str(device).split(":")[0] in _TORCH_TYPES


def cuda_api(device: str | None) -> bool:
    """Whether torch drives the device through CUDA's API (``cuda``/``cuda:N``): NVIDIA's
    GPUs, and AMD's in a HIP build of torch; torch.cuda's calls apply to it."""
    return bool(device) and torch_type(str(device)) == "cuda"


def torch_type(device: str) -> str:
    """The torch device type of a device string ("cuda:1" -> "cuda")."""
    return str(device).split(":")[0]


def of(device: str | None, name: str | None = None, hip: bool = False,
       runtime_calls: Iterable[str] = (), kernels: Iterable[str] = ()) -> Device:
    """The record of a device: its torch device string (or a profile's device type),
    with what tells the vendor apart where the string cannot: the device's name, the torch
    build (``hip``: torch.version.hip is set), a trace's runtime calls, or the names of its
    kernels (a HIP build's table names its GPU columns CUDA, but its GEMMs are Tensile's
    "Cijk_...": AMD's kernel hints in the vendor table)."""
    base = torch_type(device) if device else "cpu"
    if base == "xpu":
        return XPU
    if base not in ("cuda", "rocm"):
        return CPU
    upper = (name or "").upper()
    if (base == "rocm" or hip or any(n in upper for n in _AMD_NAMES)
            or any(str(c).startswith(_HIP_PREFIX) for c in runtime_calls)
            or any(h in str(k) for k in kernels for h in AMD.kernel_hints)):
        return ROCM
    return CUDA


def named(device_type: str | None) -> Device:
    """The GPU record a profile's device type names ("cuda", "rocm", "xpu"): what a
    report names device time and kernels by ("Self ROCm", "Top XPU kernels"). CUDA's for
    a type the record does not know, or none (the words are printed only where there is
    device time), as reports said before there was a record."""
    record = KINDS.get(device_type or "", CUDA)
    return record if record.is_gpu else CUDA
