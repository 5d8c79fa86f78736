"""What the machine can do at best: peak FLOP/s per dtype and memory bandwidth.

For the NVIDIA GPUs people use, the datasheet's dense figures (never the 2:4
sparse ones, which NVIDIA prints next to them at twice the value); for the CPU
and any other GPU, the runner times a large matrix product per dtype and a
copy on the device itself (reporter.collect.calibrate); this module decides when two
such measurements agree. A trace from a device this table does not know gets
no peaks at all: the report says they are unknown rather than guess.

Keys of ``flops``: "fp32" is the plain (CUDA-core, or the CPU's vector) rate,
which element-wise work runs at; "tf32", "bf16", "fp16", "fp8" are matrix
(tensor-core) rates. TF32 counts only when TF32 was on for the run.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Optional

from ..model import device as devices
from ..model import vendors

T, G = 1e12, 1e9

DATASHEET = "datasheet"
MEASURED = "measured"


@dataclass
class Peaks:
    source: str  # DATASHEET or MEASURED
    device: str  # the table's name for it, or the measured device's name
    flops: dict[str, float]  # dtype -> FLOP/s
    bandwidth: float  # bytes/s
    reference: str = ""  # the datasheet (the report words a measurement itself)
    seconds: float | None = None  # how long measuring took
    threads: int | None = None  # the CPU threads a CPU measurement used
    # A measurement the machine's other work disturbed: no two calibrations agreed on a
    # quiet machine (reporter.collect.machine); its figures are not to be printed as fact.
    disturbed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Optional["Peaks"]:
        if not isinstance(data, dict):
            return None
        if data.get("source") not in (DATASHEET, MEASURED):
            return None
        try:
            flops = {str(k): float(v) for k, v in dict(data["flops"]).items() if float(v) > 0}
            return cls(source=str(data["source"]), device=str(data["device"]), flops=flops,
                       bandwidth=float(data["bandwidth"]),
                       reference=str(data.get("reference", "")),
                       seconds=data.get("seconds") if isinstance(data.get("seconds"),
                                                                 (int, float)) else None,
                       threads=data.get("threads") if type(data.get("threads")) is int
                       else None,
                       disturbed=data.get("disturbed") is True)
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class _Entry:
    name: str
    pattern: str  # matched against the upper-cased device name
    flops_t: dict[str, float]  # TFLOP/s, dense
    bandwidth_g: float  # GB/s
    source: str
    min_mem_gb: float = 0  # tells the 40 and 80 GB A100s apart
    max_mem_gb: float = 1e9


# Dense peaks per dtype (TFLOP/s) and memory bandwidth (GB/s). Sources: NVIDIA's
# product datasheets (the table "Specifications" of each product page or PDF); where a
# datasheet prints only the 2:4 sparse figure, the dense one is half of it, as its footnote
# says. GeForce cards: the architecture whitepapers' "FP16 Tensor TFLOPS with FP32
# accumulate" (the rate PyTorch's matmuls get there), not the FP16-accumulate figure.
TABLE: tuple[_Entry, ...] = (
    # NVIDIA V100 datasheet (2020): SXM2 15.7 FP32, 125 tensor; PCIe 14 / 112; 900 GB/s.
    _Entry("V100S PCIe", r"V100S", {"fp32": 16.4, "fp16": 130}, 1134,
           "NVIDIA V100S datasheet: 16.4 TFLOPS FP32, 130 TFLOPS tensor, 1134 GB/s"),
    _Entry("V100 PCIe", r"V100.*PCIE", {"fp32": 14, "fp16": 112}, 900,
           "NVIDIA V100 datasheet (PCIe): 14 TFLOPS FP32, 112 TFLOPS tensor, 900 GB/s"),
    _Entry("V100 SXM2", r"V100", {"fp32": 15.7, "fp16": 125}, 900,
           "NVIDIA V100 datasheet (SXM2): 15.7 TFLOPS FP32, 125 TFLOPS tensor, 900 GB/s"),
    # NVIDIA T4 datasheet: 8.1 FP32, 65 FP16 mixed precision, 320 GB/s.
    _Entry("T4", r"\bT4\b", {"fp32": 8.1, "fp16": 65}, 320,
           "NVIDIA T4 datasheet: 8.1 TFLOPS FP32, 65 TFLOPS FP16, 320 GB/s"),
    # NVIDIA A10 datasheet: 31.2 FP32, TF32 62.5 (125 sparse), BF16/FP16 125 (250), 600 GB/s.
    _Entry("A10", r"\bA10\b", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125}, 600,
           "NVIDIA A10 datasheet: 31.2 FP32, 62.5 TF32, 125 BF16/FP16 TFLOPS dense, 600 GB/s"),
    # NVIDIA A100 datasheet: 19.5 FP32, TF32 156 (312 sparse), BF16/FP16 312 (624 sparse);
    # 40GB 1555 GB/s; 80GB PCIe 1935 GB/s; 80GB SXM 2039 GB/s.
    _Entry("A100 80GB PCIe", r"A100.*PCIE", {"fp32": 19.5, "tf32": 156, "bf16": 312,
                                             "fp16": 312}, 1935,
           "NVIDIA A100 datasheet (80GB PCIe): 19.5 FP32, 156 TF32, 312 BF16 TFLOPS, 1935 GB/s",
           min_mem_gb=60),
    _Entry("A100 80GB SXM", r"A100", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
           2039,
           "NVIDIA A100 datasheet (80GB SXM): 19.5 FP32, 156 TF32, 312 BF16 TFLOPS, 2039 GB/s",
           min_mem_gb=60),
    _Entry("A100 40GB", r"A100", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 1555,
           "NVIDIA A100 datasheet (40GB): 19.5 FP32, 156 TF32, 312 BF16 TFLOPS, 1555 GB/s",
           max_mem_gb=60),
    # NVIDIA L4 datasheet: 30.3 FP32, TF32 120*, BF16/FP16 242*, FP8 485* (*sparse); 300 GB/s.
    _Entry("L4", r"\bL4\b", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5},
           300, "NVIDIA L4 datasheet: 30.3 FP32; TF32 120, BF16 242, FP8 485 sparse; 300 GB/s"),
    # NVIDIA L40S datasheet: 91.6 FP32, TF32 366*, BF16/FP16 733*, FP8 1466* (*sparse); 864 GB/s.
    _Entry("L40S", r"L40S", {"fp32": 91.6, "tf32": 183, "bf16": 366.5, "fp16": 366.5,
                             "fp8": 733}, 864,
           "NVIDIA L40S datasheet: 91.6 FP32; TF32 366, BF16 733, FP8 1466 sparse; 864 GB/s"),
    # NVIDIA H100 datasheet: SXM 67 FP32, TF32 989*, BF16 1979*, FP8 3958*, 3.35 TB/s; PCIe 51,
    # 756*, 1513*, 3026*, 2 TB/s; NVL 60, 835*, 1671*, 3341*, 3.9 TB/s (*sparse).
    _Entry("H100 NVL", r"H100.*NVL", {"fp32": 60, "tf32": 417.5, "bf16": 835.5,
                                      "fp16": 835.5, "fp8": 1670.5}, 3900,
           "NVIDIA H100 datasheet (NVL): 60 FP32; TF32 835, BF16 1671, FP8 3341 sparse; 3.9 TB/s"),
    _Entry("H100 PCIe", r"H100.*PCIE", {"fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5,
                                        "fp8": 1513}, 2000,
           "NVIDIA H100 datasheet (PCIe): 51 FP32; TF32 756, BF16 1513, FP8 3026 sparse; 2 TB/s"),
    _Entry("H100 SXM", r"H100", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                 "fp8": 1979}, 3350,
           "NVIDIA H100 datasheet (SXM): 67 FP32; TF32 989, BF16 1979, FP8 3958 sparse; "
           "3.35 TB/s"),
    # NVIDIA GH200 Grace Hopper datasheet (the GPU): 67 FP32, TF32 989*, BF16 1979*, FP8
    # 3958* (*sparse); 96 GB HBM3 at 4 TB/s, 144 GB HBM3e at 4.9 TB/s. Before H200, whose
    # pattern its name also matches.
    _Entry("GH200 96GB", r"GH200", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                    "fp8": 1979}, 4000,
           "NVIDIA GH200 datasheet (96 GB HBM3): 67 FP32; TF32 989, BF16 1979, FP8 3958 "
           "sparse; 4 TB/s", max_mem_gb=120),
    _Entry("GH200 144GB", r"GH200", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                     "fp8": 1979}, 4900,
           "NVIDIA GH200 datasheet (144 GB HBM3e): 67 FP32; TF32 989, BF16 1979, FP8 3958 "
           "sparse; 4.9 TB/s", min_mem_gb=120),
    # NVIDIA H200 datasheet: SXM as H100 SXM's compute, 4.8 TB/s; NVL 60 FP32, TF32 835*,
    # BF16 1671*, FP8 3341* (*sparse), 4.8 TB/s.
    _Entry("H200 NVL", r"H200.*NVL", {"fp32": 60, "tf32": 417.5, "bf16": 835.5,
                                      "fp16": 835.5, "fp8": 1670.5}, 4800,
           "NVIDIA H200 datasheet (NVL): 60 FP32; TF32 835, BF16 1671, FP8 3341 sparse; 4.8 TB/s"),
    _Entry("H200 SXM", r"H200", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
                                 "fp8": 1979}, 4800,
           "NVIDIA H200 datasheet (SXM): 67 FP32; TF32 989, BF16 1979, FP8 3958 sparse; 4.8 TB/s"),
    # NVIDIA HGX B200 datasheet (per GPU): 75 FP32, TF32 2.2 P*, BF16 4.5 P*, FP8 9 P* (*sparse);
    # 7.7 TB/s.
    _Entry("B200", r"B200", {"fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500},
           7700, "NVIDIA HGX B200 datasheet, per GPU: 75 FP32; TF32 2.2, BF16 4.5, FP8 9 "
           "PFLOPS sparse; 7.7 TB/s"),
    # NVIDIA Ampere GA102 whitepaper (RTX 3090): 35.6 FP32, TF32 35.6, FP16/BF16 tensor with
    # FP32 accumulate 71; 936 GB/s.
    _Entry("GeForce RTX 3090", r"RTX 3090(?! TI)", {"fp32": 35.6, "tf32": 35.6, "bf16": 71,
                                                   "fp16": 71}, 936,
           "NVIDIA GA102 whitepaper (RTX 3090): 35.6 FP32, 35.6 TF32, 71 FP16/BF16 with FP32 "
           "accumulate; 936 GB/s"),
    # NVIDIA Ada whitepaper (RTX 4090): 82.6 FP32, TF32 82.6, FP16/BF16 with FP32 accumulate
    # 165.2, FP8 with FP32 accumulate 330.3; 1008 GB/s.
    _Entry("GeForce RTX 4090", r"RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2,
                                            "fp16": 165.2, "fp8": 330.3}, 1008,
           "NVIDIA Ada whitepaper (RTX 4090): 82.6 FP32, 82.6 TF32, 165.2 FP16/BF16 and 330.3 FP8 "
           "with FP32 accumulate; 1008 GB/s"),
)

# AMD Instinct, per device as torch sees it: an MI250 or MI250X is two GCDs, each its own
# device (64 GB, 1.6 TB/s), so its figures are half the module's. "fp32" is the matrix
# cores' FP32 rate (the rate rocBLAS/hipBLASLt GEMMs get in fp32; the vector rate is half
# of it on CDNA 2). A HIP trace may name the device generically ("AMD Radeon Graphics"):
# the trace reader then adds its compute capability and compute units
# (reporter.ingest.traces), "(compute 9.0, 104 CUs)", which tell these parts apart (an
# MI250 GCD and an MI210 are both 104 CUs of gfx90a, with the same peaks). Sources: AMD's
# product datasheets (MI250, MI250X, MI210: "peak FP32 matrix", "peak FP16/BF16"; MI300X:
# dense figures) and the ROCm MI250 microarchitecture page (104 CUs and 1.6 TB/s per GCD).
AMD_TABLE: tuple[_Entry, ...] = (
    _Entry("MI300X", r"MI300X|COMPUTE 9\.4, 304 CUS",
           {"fp32": 163.4, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, 5300,
           "AMD Instinct MI300X datasheet: 163.4 FP32 matrix, 1307.4 FP16/BF16, 2614.9 FP8 "
           "TFLOPS dense; 5.3 TB/s"),
    _Entry("MI250X GCD", r"MI250X|COMPUTE 9\.0, 110 CUS",
           {"fp32": 47.85, "bf16": 191.5, "fp16": 191.5}, 1600,
           "AMD Instinct MI250X datasheet, halved for one of its two GCDs: 95.7 FP32 matrix, "
           "383 FP16/BF16 TFLOPS, 3.2 TB/s per module"),
    _Entry("MI250 GCD / MI210", r"MI250|MI210|COMPUTE 9\.0, 104 CUS",
           {"fp32": 45.25, "bf16": 181.0, "fp16": 181.0}, 1600,
           "AMD Instinct MI250 datasheet, halved for one of its two GCDs: 90.5 FP32 matrix, "
           "362.1 FP16/BF16 TFLOPS, 3.2 TB/s per module (MI210: 45.3, 181.0, 1.6 TB/s)"),
)


# The datasheet tables by vendor (Device.vendor, the rows of reporter.model.vendors).
DATASHEETS: dict[str, tuple[_Entry, ...]] = {"NVIDIA": TABLE, "AMD": AMD_TABLE}


def lookup(name: str | None, memory_b: int | None = None) -> Peaks | None:
    """The datasheet peaks of a device by its name (torch.cuda.get_device_name, or a
    trace's deviceProperties) and memory size, or None for a device not in the table of
    its vendor (NVIDIA's, AMD's), or whose name names no vendor."""
    if not name:
        return None
    upper = name.upper()
    vendor = vendors.by_device_name(name)
    table = DATASHEETS.get(vendor.name) if vendor is not None else None
    if table is None:
        return None
    if "MIG" in upper.split():
        return None  # a slice of the GPU ("... MIG 1g.10gb"): not the datasheet's, measured
    mem_gb = memory_b / 1e9 if memory_b else None
    for e in table:
        if not re.search(e.pattern, upper):
            continue
        if mem_gb is not None and not e.min_mem_gb <= mem_gb <= e.max_mem_gb:
            continue
        if mem_gb is None and e.min_mem_gb > 0:
            continue  # an A100 of unknown memory: the 40 GB entry (the lower bandwidth)
        return Peaks(source=DATASHEET, device=e.name,
                     flops={k: v * T for k, v in e.flops_t.items()},
                     bandwidth=e.bandwidth_g * G, reference=e.source)
    return None


# A calibration is taken when two undisturbed measurements agree this closely on every
# figure (on the quiet development machine repeats agree within 1-8%), after at most
# CALIBRATIONS measurements.
AGREE = 0.15
CALIBRATIONS = 4


def _agree(a: Peaks, b: Peaks, tolerance: float) -> bool:
    figures = [(a.bandwidth, b.bandwidth)] + [(a.flops.get(k, 0.0), b.flops.get(k, 0.0))
                                              for k in a.flops.keys() | b.flops.keys()]
    return all(x > 0 and y > 0 and abs(x - y) <= tolerance * max(x, y) for x, y in figures)


def _best_of(found: list[Peaks], disturbed: bool) -> Peaks:
    """The highest figure of each kind among ``found`` (the machine did that), with the
    time all of them took."""
    flops = {k: max(p.flops.get(k, 0.0) for p in found) for p in found for k in p.flops}
    return replace(found[-1], flops=flops, bandwidth=max(p.bandwidth for p in found),
                   seconds=sum(p.seconds or 0.0 for p in found), disturbed=disturbed)


def agreed(measure_once: Callable[[], tuple[Peaks, bool]], tries: int = CALIBRATIONS,
           tolerance: float = AGREE) -> Peaks:
    """Measure until two undisturbed measurements agree within ``tolerance``; their best
    figures. ``measure_once`` returns a measurement and whether other work on the machine
    disturbed it. Two disturbed in a row stop it: the machine stays busy, and more tries
    would cost as much for the same. When no two agree within ``tries``, the best figures
    of all, marked disturbed: the report then prints no figure that rests on them as fact."""
    found: list[Peaks] = []
    quiet: list[Peaks] = []
    last_disturbed = False
    for _ in range(max(tries, 2)):
        peaks, disturbed = measure_once()
        found.append(peaks)
        if disturbed and last_disturbed:
            break  # two disturbed in a row: the machine stays busy (model.contention)
        last_disturbed = disturbed
        if disturbed:
            continue
        match = next((q for q in quiet if _agree(q, peaks, tolerance)), None)
        if match is not None:
            return _best_of([match, peaks], False)
        quiet.append(peaks)
    return _best_of(found, True)


_CACHE: dict[tuple[str, bool, int | None], Peaks] = {}


def for_run(device: str, device_name: str | None, memory_b: int | None,
            tf32: bool, measure_once: Callable[[], tuple[Peaks, bool]],
            threads: int | None = None) -> Peaks:
    """The peaks a run's report uses: the datasheet's for a GPU the table knows, else
    measured here (once per process and device) until two measurements agree
    (``measure_once``: one measurement, reporter.collect.calibrate.measure, and whether
    it was disturbed); ``threads``: the CPU threads it runs on, which the figures depend
    on."""
    known = lookup(device_name, memory_b) if devices.is_gpu(device) else None
    if known is not None:
        return known
    key = (device, tf32, threads)
    if key not in _CACHE or _CACHE[key].disturbed:  # a busy moment's figures: try again
        _CACHE[key] = agreed(measure_once)
    return _CACHE[key]


# The host link of a GPU, per direction: its PCIe interface, x16 (PCI-SIG: 8, 16, 32 GT/s
# per lane for 3.0, 4.0, 5.0, 128b/130b encoding: 15.75, 31.5, 63 GB/s). A slower slot or
# host gives less; a GH200's NVLink-C2C is not PCIe and is left out (unknown).
PCIE_GBPS = (
    ("PCIe 5.0 x16", 63.0, r"H100|(?<!G)H200|B200|RTX 50\d0|RTX PRO|MI300|COMPUTE 9\.4,"),
    ("PCIe 4.0 x16", 31.5, r"A100|\bA10\b|\bA30\b|\bA40\b|RTX 30\d0|RTX 40\d0|\bL4\b|L40|"
                           r"RTX A\d000|MI2[15]0|MI100|COMPUTE 9\.0,"),
    ("PCIe 3.0 x16", 15.75, r"V100|\bT4\b|P100|TITAN V|RTX 20\d0|QUADRO RTX"),
)


def copy_peak(direction: str, name: str | None, memory_b: int | None = None
              ) -> tuple[str, float] | None:
    """The peak of a copy direction on a device, (what bounds it, GB/s), or None when not
    known: host to device and back, the GPU's PCIe link; device to device, half the
    memory bandwidth (a copy reads each byte and writes it)."""
    if not name:
        return None
    if direction == "d2d":
        p = lookup(name, memory_b)
        return ("device memory", p.bandwidth / 2 / G) if p is not None else None
    upper = name.upper()
    if "GH200" in upper:
        return None
    for link, gbps, pattern in PCIE_GBPS:
        if re.search(pattern, upper):
            return link, gbps
    return None
