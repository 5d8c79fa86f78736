"""What reporter knows of each GPU vendor, in one table: a row per vendor (NVIDIA, AMD,
Intel), keyed by ``Device.vendor`` (reporter.model.device), with the names its runtime,
libraries and kernels go by. The rules, the profile model and the timeline analyses read
these rows instead of holding kernel names themselves (``tests/test_vendors.py`` fails on
a vendor's kernel or library name written anywhere else in them). Adding a vendor is one
row here, and its datasheet rows in reporter.analyze.peaks (``DATASHEETS``, keyed by the
same name).

Kernel names are matched against every vendor's row, not only the device's: a table
printed by a HIP build of torch names its GPU columns "CUDA", and a trace may not name
its device, but a kernel's name says whose library made it (no two vendors share one).
A field a vendor has nothing for (not known yet, or no such thing) is empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Vendor:
    name: str  # Device.vendor: "NVIDIA", "AMD", "Intel"
    # Words (upper case) of a device's name that say it is this vendor's ("NVIDIA H100 ...",
    # "Tesla V100-SXM2-16GB", "AMD Instinct MI250X", "AMD Radeon Graphics")
    device_names: tuple[str, ...]
    # Prefixes of its runtime's API calls, as a trace records them ("cudaLaunchKernel",
    # "cuLaunchKernel", "hipExtModuleLaunchKernel", "hsa_...", "zeCommandListAppend...")
    runtime_calls: tuple[str, ...]
    # The library torch's profiler records the device's work through (kineto's backend)
    tracer: str
    # Its math and collective libraries, as their makers spell them (the docs name them)
    libraries: tuple[str, ...]
    # Substrings that mark a row's name as one of its kernels (profile.classify)
    kernel_hints: tuple[str, ...]
    # Its collective library's name, as a substring of its kernels' names (any case)
    collectives: tuple[str, ...]
    # The collective library's kernels by how their names start (regex, any case)
    collective_kernels: str
    # ATen operators that call its libraries: BatchNorm's forward and backward, the
    # convolution's backward (beside ATen's own, which the rules name)
    batch_norm_ops: tuple[str, ...]
    batch_norm_backward_ops: tuple[str, ...]
    convolution_backward_ops: tuple[str, ...]
    # Substrings of fused attention's operators and kernels (beside torch's SDPA names)
    fused_attention: tuple[str, ...]
    # fp32 matrix-product kernels that leave the matrix engines (tensor cores, matrix
    # cores) idle: GEMMs, GEMVs, the convolutions' implicit GEMMs, fp32 fused attention
    fp32_gemm: str
    # Of those, the ones that compute convolutions (regex, any case) ...
    convolution_kernels: str
    # ... and fused attention's
    attention_kernels: str
    # Layout conversions its convolution library makes around an NCHW convolution (any case)
    layout_kernels: str
    # Kernel-name prefixes of the architectures with matrix engines, and of those without
    matrix_archs: str
    no_matrix_archs: str
    # Architectures whose matrix engines take fp16 only (no bf16, no TF32): by a GEMM
    # kernel's prefix, a kernel's suffix, the device's name (any case)
    fp16_only_archs: tuple[str, ...]
    fp16_only_kernels: str
    fp16_only_devices: str


NVIDIA = Vendor(
    name="NVIDIA",
    device_names=("NVIDIA", "TESLA", "GEFORCE"),
    runtime_calls=("cuda", "cu"),
    tracer="CUPTI",
    libraries=("cuBLAS", "cuBLASLt", "cuDNN", "CUTLASS", "NCCL"),
    # cuBLAS's GEMMs by architecture ("volta_sgemm_128x64_nn", "sm90_xmma_gemm_..."),
    # CUTLASS's, cuBLASLt's "nvjet_..." (Hopper and later)
    kernel_hints=("volta_", "ampere_", "sm80_", "sm90_", "turing_", "cutlass", "nvjet"),
    collectives=("nccl",),
    collective_kernels=r"^nccl\w*Kernel|^ncclDevKernel",
    batch_norm_ops=("aten::cudnn_batch_norm",),
    batch_norm_backward_ops=("aten::cudnn_batch_norm_backward",),
    convolution_backward_ops=("aten::cudnn_convolution_backward",),
    # torch's cuDNN attention, fused MHA (the memory-efficient kernels), FlashAttention's
    fused_attention=("cudnn_attention", "fmha", "flash_fwd", "flash_bwd"),
    # cuBLAS sgemm/gemv (a GEMV is fp32 when its third template argument, the matrix's
    # element type, is float: "gemv2T_kernel_val<int, int, float, ...>"), cuDNN's fp32
    # convolutions by their other names ("volta_scudnn_128x64_relu_interior_nn_v1",
    # "cudnn::detail::dgrad_engine<float, ...>", "winograd3x3Kernel<float, ...>",
    # "fft2d_r2c_32x32<float, ...>", "ampere_gcgemm_64x64_nt"; "scudnn_fp16" is fp16 data),
    # and PyTorch's memory-efficient attention in fp32 ("fmha_cutlassF_f32_aligned_64x64_
    # rf_sm80(...)", "attention_kernel_batched<AttentionKernel<float, ...>>" before 2.1)
    fp32_gemm=(r"sgemm|gemv2?[NT]?_kernel\w*<[^,<>]*, ?[^,<>]*, ?float\b|"
               r"gemvx::kernel<[^,<>]*, ?[^,<>]*, ?float\b|gemmSN_\w*kernel<float|"
               r"gemm(_indexed)?_f32f32_f32|"
               r"_scudnn_(?!fp16)|cudnn::detail::\w*(dgrad|wgrad)\w*<float\b|"
               r"winograd\w*<float\b|fft2d_[rc]2[rc]_\w*<float\b|_gcgemm_|"
               r"fmha_cutlass[FB]_f32_|AttentionKernel<float\b|"
               r"AttentionBackwardKernel<cutlass::arch::Sm\d+, ?float\b"),
    # cuDNN's implicit GEMMs ("sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_...";
    # "..._tf32f32_..." with TF32 on), implicit_convolve_sgemm, its older kernels
    convolution_kernels=r"fprop|dgrad|wgrad|convolve|scudnn|winograd|fft2d_|gcgemm",
    attention_kernels=r"fmha_cutlass|AttentionKernel<|AttentionBackwardKernel<",
    # "void cudnn::ops::nchwToNhwcKernel<float, ...>", "void nhwcToNchwKernel<...>"
    layout_kernels=r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw",
    # tensor cores from Volta on; cuBLAS names its GEMMs by architecture
    matrix_archs=r"^(volta|turing|ampere|sm[789]\d|hopper|ada|blackwell|sm1\d\d)_",
    no_matrix_archs=r"^(maxwell|kepler|pascal)_",
    # Volta (V100) and Turing (T4): fp16 tensor cores only; kernels built for sm70/sm75
    fp16_only_archs=("volta_", "turing_"),
    fp16_only_kernels=r"_sm7[05]\b",
    fp16_only_devices=r"V100|Titan V|\bT4\b|RTX 20\d0|Quadro RTX|GTX 16\d0",
)

AMD = Vendor(
    name="AMD",
    device_names=("AMD", "INSTINCT", "RADEON"),
    runtime_calls=("hip", "hsa"),
    tracer="roctracer",
    libraries=("rocBLAS", "hipBLASLt", "Tensile", "MIOpen", "RCCL"),
    # rocBLAS's and hipBLASLt's GEMMs are Tensile's: "Cijk_Alik_Bljk_SB_MT64x16x32_..."
    kernel_hints=("Cijk_",),
    collectives=("rccl",),  # RCCL keeps NCCL's kernel names too: NVIDIA's row has them
    collective_kernels=r"^rccl",
    batch_norm_ops=("aten::miopen_batch_norm",),
    batch_norm_backward_ops=("aten::miopen_batch_norm_backward",),
    convolution_backward_ops=("aten::miopen_convolution_backward",),
    fused_attention=(),
    # Tensile's fp32 GEMMs (S: single precision), with either operand transposed
    fp32_gemm=r"Cijk_Ailk_Bljk_S|Cijk_Alik_Bljk_S",
    convolution_kernels="",
    attention_kernels="",
    layout_kernels="",
    matrix_archs="",  # matrix cores on CDNA: Tensile's names carry no architecture prefix
    no_matrix_archs="",
    fp16_only_archs=(),
    fp16_only_kernels="",
    fp16_only_devices="",
)

INTEL = Vendor(
    name="Intel",
    device_names=("INTEL",),
    runtime_calls=("ze", "ur", "xpu"),  # Level Zero, the Unified Runtime
    tracer="PTI",
    libraries=("oneDNN", "oneMKL", "oneCCL"),
    kernel_hints=(),
    collectives=(),
    collective_kernels="",
    batch_norm_ops=(),
    batch_norm_backward_ops=(),
    convolution_backward_ops=(),
    fused_attention=(),
    fp32_gemm="",
    convolution_kernels="",
    attention_kernels="",
    layout_kernels="",
    matrix_archs="",  # XMX engines: no kernel names known yet
    no_matrix_archs="",
    fp16_only_archs=(),
    fp16_only_kernels="",
    fp16_only_devices="",
)

VENDORS: dict[str, Vendor] = {v.name: v for v in (NVIDIA, AMD, INTEL)}

# Runtime calls of accelerators without a row (Meta's MTIA): still runtime calls.
OTHER_RUNTIME_CALLS = ("mtia",)


def of(vendor: str) -> Vendor | None:
    """The row of a vendor by ``Device.vendor`` ("NVIDIA", "AMD", "Intel"); None for the
    CPU ("") and a vendor without a row."""
    return VENDORS.get(vendor)


def by_device_name(name: str | None) -> Vendor | None:
    """The vendor a device's name names ("NVIDIA A100-SXM4-80GB", "AMD Instinct MI250X"),
    or None when it names none ("A100-PG509-200")."""
    upper = (name or "").upper()
    return next((v for v in VENDORS.values() if any(w in upper for w in v.device_names)),
                None)


def names(field: str) -> tuple[str, ...]:
    """A tuple field of every vendor's row, joined (``names("kernel_hints")``)."""
    return tuple(n for v in VENDORS.values() for n in getattr(v, field))


def pattern(field: str, flags: int = 0) -> re.Pattern[str]:
    """A regex field of every vendor's row as one pattern (``pattern("fp32_gemm")``); one
    that matches nothing where no row has any."""
    parts = [getattr(v, field) for v in VENDORS.values() if getattr(v, field)]
    return re.compile("|".join(parts) if parts else r"(?!)", flags)
