"""Rules about precision: fp32 matrix work where tensor cores could do it; work in float64."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...model import vendors
from ...model.choice import OVER_STEPS, Values, always, either, first, of, when
from ...model.finding import Evidence, Finding, nullable, opt
from ...model.profile import Profile
from .. import savings
from ..findings import MATMUL_OPS, WhatIf, basis, rule
from ._common import severity


def _runs_products(gemms: Finding, dominant: Finding) -> bool:
    """The fp32 GEMM kernels run inside a dominant matrix operator."""
    return bool(dominant.ops) and dominant.ops[0] in MATMUL_OPS


# Kernel names of fp32 matrix products without tensor cores (cuBLAS sgemm/gemv, cuDNN's
# fp32 implicit GEMMs). A GEMV is fp32 when its third template argument, the matrix's
# element type, is float: "gemv2T_kernel_val<int, int, float, ...>",
# "internal::gemvx::kernel<int, int, float, ...>" (not "<int, int, __nv_bfloat16, ...>").
_FP32_GEMM = vendors.pattern("fp32_gemm")


# Architectures whose GEMM kernels name themselves and that have tensor cores.
_TC_ARCH = vendors.pattern("matrix_archs")


_NO_TC_ARCH = vendors.pattern("no_matrix_archs")


# fp32 GEMM kernels that compute convolutions: cuDNN's implicit GEMMs (fprop, dgrad, wgrad:
# "sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_..."; with TF32 on they read
# "..._f32f32_tf32f32_f32_..." and are not fp32 GEMMs) and implicit_convolve_sgemm.
# cuDNN's older fp32 convolution kernels (a V100's, an A100's when cuDNN picks them) say
# "scudnn" (single precision; "volta_scudnn_128x64_relu_interior_nn_v1",
# "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1"; "s884cudnn" is the tensor cores',
# "scudnn_fp16" fp16 data), or are engines templated on float ("cudnn::detail::
# dgrad_engine<float, ...>", "wgrad_alg0_engine<float, ...>", "winograd3x3Kernel<float,
# ...>"), or the FFT convolution's transforms and complex GEMM ("fft2d_r2c_32x32<float, ...>",
# "ampere_gcgemm_64x64_nt"). Under autocast all of them give way to tensor-core implicit GEMMs.
_CONV_KERNEL = vendors.pattern("convolution_kernels", re.IGNORECASE)


# fp32 attention: PyTorch's memory-efficient kernels in fp32 ("fmha_cutlassF_f32_aligned_
# 64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, ...>
# ::Params)", the backward "fmha_cutlassB_f32_..."; before torch 2.1 "attention_kernel_batched
# <AttentionKernel<float, ...>>"), what scaled_dot_product_attention runs on fp32 inputs. The
# flash and cuDNN kernels have no fp32 variant: fp32 attention is these or sgemm matmuls.
# On sm80 and later the fp32 kernel emulates fp32 on the tensor cores (3xTF32), still
# several times slower than the same kernel in bf16.
# Kernels built for Volta or Turing by their suffix (fmha_cutlassF_f32_aligned_64x64_rf_sm70),
# and those GPUs by name: tensor cores in fp16 only.
_FP16_ONLY_SM = vendors.pattern("fp16_only_kernels")


_FP16_ONLY_GPU = vendors.pattern("fp16_only_devices", re.IGNORECASE)


_ATTENTION_KERNEL = vendors.pattern("attention_kernels")


def _fp16_only(profile: Profile, arch: str | None, kernel: str = "") -> bool:
    """Whether the GPU's tensor cores do fp16 only (Volta, Turing). Told by the device
    where the datasheet table knows it: cuBLAS runs its "volta_sgemm" kernels on an A100
    or H100 too, so the kernel's prefix says that only where the device is unknown; so do
    a fused attention kernel built for sm70/sm75 and a device named like one of those."""
    from ..peaks import lookup

    known = lookup(profile.device_name, profile.device_mem_capacity_b)
    if known is not None:
        return "bf16" not in known.flops and "tf32" not in known.flops
    return (arch in vendors.names("fp16_only_archs") or bool(_FP16_ONLY_SM.search(kernel))
            or bool(_FP16_ONLY_GPU.search(profile.device_name or "")))


def fp32_convolution_share(profile: Profile) -> float:
    """The share of the fp32 GEMM kernels' device time that computes convolutions."""
    gemms = [o for o in profile.ops if o.kind == "kernel" and _FP32_GEMM.search(o.name)]
    total = sum(o.self_device_us for o in gemms)
    conv = sum(o.self_device_us for o in gemms if _CONV_KERNEL.search(o.name))
    return conv / total if total > 0 else 0.0


def _gemm(v: Values) -> Fp32Gemm:
    return of(Fp32Gemm)(v)


_SAYS_FP32_GEMM = {
    "attention": first(
        (
            "fused_attention_too",
            lambda v: _gemm(v).attention and (_gemm(v).convolutions or _gemm(v).products),
        ),
        ("memory_efficient_attention", lambda v: _gemm(v).attention),
    ),
    "runs": first(
        ("convolutions_and_products_run", lambda v: _gemm(v).convolutions and _gemm(v).products),
        ("convolutions_run", lambda v: _gemm(v).convolutions),
        ("products_run", lambda v: _gemm(v).products),
        ("attention_runs", always),
    ),
    "arch": when("on_tensor_core_gpu", lambda v: _gemm(v).arch),
    "fp16_attention": when("attention_in_fp16", lambda v: _gemm(v).attention),
    "convolutions_tf32": when("convolutions_in_tf32", lambda v: _gemm(v).convolutions),
    "bf16_attention": when("attention_in_bf16", lambda v: _gemm(v).attention),
    "advice": either("autocast_fp16", "autocast_bf16", lambda v: _gemm(v).fp16_only),
}


@dataclass(kw_only=True)
class Fp32Gemm(Evidence):
    basis: str  # "device"
    share: float  # the fp32 GEMM kernels' share of the device time
    threshold: float
    op: str  # the longest kernel
    op_share: float
    op_time_us: float
    calls: int  # the kernels' calls
    kernels: int  # kernels
    arch: str | None = nullable()  # the architecture a kernel's name gives ("ampere_")
    convolutions: bool  # what they compute: convolutions, fused attention, products
    attention: bool
    products: bool
    fp16_only: bool  # tensor cores in fp16 only (Volta, Turing)


@rule("fp32-gemm", says=_SAYS_FP32_GEMM, evidence=Fp32Gemm, about_products=True,
      saving=savings.faster_dtype, explains=_runs_products,
      whatif=WhatIf("gemm-precision", of_recorded=True), share=0.50, high=0.70)
def fp32_gemm(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """fp32 matrix work without tensor cores holds most of the device time: matrix
    products, convolutions (cuDNN's fp32 kernels) and fused attention in fp32."""
    if not profile.has_device:
        return None
    kernels = [o for o in profile.ops if o.kind == "kernel"]
    gemms = sorted((o for o in kernels if _FP32_GEMM.search(o.name)),
                   key=lambda o: o.self_device_us, reverse=True)
    if not gemms or any(_NO_TC_ARCH.match(o.name) for o in gemms):
        return None
    s = sum(o.self_device_us for o in gemms) / profile.self_device_us
    if s <= limits["share"]:
        return None
    top = gemms[0]
    arch = (_TC_ARCH.match(top.name) or [None])[0]
    return Finding("fp32-gemm", severity(s, limits["high"]),
                   Fp32Gemm(basis="device", share=s, threshold=limits["share"],
                            op=top.name, op_share=top.self_device_us / profile.self_device_us,
                            op_time_us=top.self_device_us, calls=sum(o.calls for o in gemms),
                            kernels=len(gemms), arch=arch,
                            # what the kernels compute: convolutions, matrix products, or both
                            convolutions=any(_CONV_KERNEL.search(o.name) for o in gemms),
                            attention=any(_ATTENTION_KERNEL.search(o.name) for o in gemms),
                            products=any(not _CONV_KERNEL.search(o.name)
                                         and not _ATTENTION_KERNEL.search(o.name)
                                         for o in gemms),
                            # Volta (V100) and Turing (T4) tensor cores do fp16 only: no
                            # bf16, no TF32
                            fp16_only=_fp16_only(profile, arch, top.name)),
                   ops=[o.name for o in gemms])


def _fp64_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether the saving was timed with the model in float32 (whatif.single_step)."""
    if isinstance(f.evidence, Fp64Compute):
        f.evidence.timed_fp32 = timed.get("fix") == "float32"


@dataclass(kw_only=True)
class Fp64Compute(Evidence):
    basis: str
    share: float  # the float64 operators' share of the basis
    threshold: float
    op: str  # the one taking longest
    op_time_us: float  # all of them
    calls: int
    operators: int  # how many operators compute in float64
    timed_fp32: bool | None = opt()  # timed with the model in float32 (_fp64_timed)


_SAYS_FP64_COMPUTE = {
    "steps": OVER_STEPS,
    "why": either("fp64_on_gpu", "fp64_on_cpu", lambda v: of(Fp64Compute)(v).basis == "device"),
    "timed": when("timed_in_fp32", lambda v: of(Fp64Compute)(v).timed_fp32),
}


@rule("fp64-compute", says=_SAYS_FP64_COMPUTE, evidence=Fp64Compute,
      saving=savings.unquantified,
      whatif=WhatIf("single-precision", notes=_fp64_timed), share=0.10, high=0.30)
def fp64_compute(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Operators computing in float64 take a share of the time: a model or its inputs
    left in double precision (NumPy's default, ``torch.set_default_dtype(torch.float64)``,
    ``.double()``). From the recorded input types (the FLOP model's rows); what float32
    would save is timed on the model (no datasheet ratio: an H200 runs float64 matrix
    products on tensor cores as fast as float32 without them)."""
    b = basis(profile)
    rows = [c for c in profile.costs if c.get("dtype") == "fp64"]
    if not rows or b.total_us <= 0:
        return None
    time_us = sum(float(c["time_us"]) for c in rows)
    s = min(time_us / b.total_us, 1.0)
    if s <= limits["share"]:
        return None
    by_op: dict[str, float] = {}
    for c in rows:
        by_op[c["name"]] = by_op.get(c["name"], 0.0) + float(c["time_us"])
    top = max(by_op, key=lambda n: by_op[n])
    return Finding("fp64-compute", severity(s, limits["high"]),
                   Fp64Compute(basis=b.name, share=s, threshold=limits["share"],
                               op=top, op_time_us=time_us,
                               calls=sum(int(c["calls"]) for c in rows), operators=len(by_op)),
                   ops=sorted(by_op, key=lambda n: -by_op[n]))
