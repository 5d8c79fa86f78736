"""The built-in rules. Each is a pure function of a Profile and its limits, registered
with its whole story (reporter.analyze.findings.Rule): its saving model, what it explains,
when it is only a symptom, and the replacement the runner can time for it."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Callable

from ..model.finding import IN_OTHERS, Finding, Saving
from ..model.profile import KIND_ANNOTATION, KIND_KERNEL, Op, Profile
from . import savings
from .breakdown import MODULE_MARK
from .compiled import GRAPH_LAUNCHES
from .findings import (
    MATMUL_OPS,
    RULES,
    Basis,
    WhatIf,
    Worth,
    basis,
    dataloader_rows,
    op_evidence,
    operators,
    rule,
    share,
    step_share,
    step_wall_us,
)
from .shapes import MATRIX_CALLS, blowup_shapes, dense_copies

# Element-wise and reduction operators that make a new tensor. In-place updates (mul_,
# add_, addcdiv_, ...) are left out: they materialise nothing, and most of them are an
# optimizer's per-parameter step, which single-tensor-optimizer reports (counting them
# here made a healthy twin's AdamW read as a blow-up on a loaded machine).
ELEMENTWISE = {
    "aten::mul", "aten::add", "aten::sub", "aten::div", "aten::sum", "aten::mean",
    "aten::pow", "aten::exp", "aten::neg", "aten::sqrt", "aten::rsqrt", "aten::where",
    "aten::maximum", "aten::minimum", "aten::prod", "aten::mul_out",
}
COPIES = savings.COPY_OPS
# Operators that materialise a larger tensor than their input (blow-up).
BLOWUP = ("aten::repeat", "aten::repeat_interleave", "aten::tile", "aten::expand_copy")
# Operators behind layout copies.
LAYOUT = ("aten::repeat", "aten::permute", "aten::contiguous", "aten::clone",
          "aten::repeat_interleave", "aten::tile", "aten::transpose")


def _severity(value: float, high: float) -> str:
    return "high" if value >= high else "medium"


def _largest_in_step(profile: Profile, rows: list[Op], limit: float
                     ) -> tuple[Op, float, float] | None:
    """The row with the most inclusive CPU time, its share of the profiled steps' wall
    time and that wall time, when the share is above ``limit``; else None."""
    if not rows:
        return None
    top = max(rows, key=lambda o: o.cpu_total_us)
    s, wall = step_share(profile, top.cpu_total_us)
    return (top, s, wall) if s > limit else None


def _ranked(profile: Profile, names: set[str]) -> tuple[Basis, list[Op], float]:
    """The named operators, largest first on the profile's basis, and their joint share."""
    b = basis(profile)
    ops = sorted((o for o in operators(profile) if o.name in names),
                 key=lambda o: getattr(o, b.attr), reverse=True)
    return b, ops, share(ops, b)


# What particular rules are worth, and what they explain -----------------------

def _copies_saving(w: Worth) -> Saving:
    """Copies go away, less those that materialise a blow-up another finding reports
    (its ``materialised_share`` of the same basis): they are the blow-up's, and go with
    its fix."""
    b = basis(w.profile)
    less = sum(float(o.evidence.get("materialised_share") or 0.0) for o in w.others
               if o is not w.finding and o.evidence.get("basis") == b.name) * b.total_us
    return savings.work_removed(w, less_us=less / max(w.steps, 1))


def _fused_attention_saving(w: Worth) -> Saving:
    """The softmax, masks and copies go away; the products stay, at their roofline, in
    the fused kernel."""
    return savings.work_removed(w, keep_us=savings.matrix_roof(w.finding.ops, w.eff))


def _optimizer_saving(w: Worth) -> Saving:
    """The optimizer phase, less what its element-wise updates need at their roofline
    (the mean roofline share of the profile's element-wise operators stands in)."""
    b = w.profile.breakdown
    accounted = w.accounts_us
    if b is not None and b.host_us.get("optimizer"):
        accounted = b.mean(b.host_us["optimizer"])
    names = ([o.name for o in w.eff.ops if not o.matrix]
             if w.eff is not None and not isinstance(w.eff, str) else [])
    beyond = savings.beyond_roof(names, accounted or 0.0, w.eff)
    if not accounted or beyond is None:
        return w.unquantified()
    return Saving(accounted, beyond, beyond / 2, beyond, w.step_us, host_saving=True)


def _idle_sync_part(of_copies: bool) -> Callable[[Profile], float]:
    """The part of the device's idle time in synchronisations that copies (or, with
    ``of_copies`` false, synchronisations proper) own: the host's time in their calls over
    its time in both."""
    def owned(profile: Profile) -> float:
        copies = sum(o.self_cpu_us for o in profile.ops if o.name in COPY_CALLS)
        syncs = sum(o.self_cpu_us for o in _sync_calls(profile)[0])
        if copies + syncs <= 0:
            return 1.0
        return (copies if of_copies else syncs) / (copies + syncs)
    return owned


def _waits_longer(waiting: Finding, dominant: Finding) -> bool:
    """The input pipeline is waited on for longer than the operator runs: work done
    inside ``enumerate(DataLoader)``, such as a per-sample transform, shows up as
    ordinary operators."""
    return bool(waiting.evidence.get("op_time_us", 0) >= dominant.evidence.get("op_time_us", 0))


def _runs_products(gemms: Finding, dominant: Finding) -> bool:
    """The fp32 GEMM kernels run inside a dominant matrix operator."""
    return bool(dominant.ops) and dominant.ops[0] in MATMUL_OPS


@rule("elementwise-blowup", saving=savings.removed, frees=True,
      whatif=WhatIf("blowup-matmul", replaces_all=True, of_recorded=True), share=0.30,
      high=0.50)
def elementwise_blowup(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Element-wise and reduction operators hold a large share of the time."""
    b, ops, total = _ranked(profile, ELEMENTWISE)
    present = [name for name in BLOWUP if any(o.name == name and o.calls for o in profile.ops)]
    # The blow-up's own copies: the inclusive time of the operators that materialise it,
    # and of the copies that make its expanded operands dense (expand(...).contiguous(),
    # where the recorded shapes show the pairwise product they feed).
    inclusive = "device_total_us" if b.name == "device" else "cpu_total_us"
    made_us = sum(getattr(o, inclusive) for o in profile.ops if o.name in present)
    dense_us, dense = (dense_copies(profile, blowup_shapes(profile), inclusive) if ops
                       else (0.0, []))
    present += dense
    made = (made_us + dense_us) / b.total_us if b.total_us > 0 else 0.0
    if not ops or total + made <= limits["share"]:
        return None
    return Finding("elementwise-blowup", _severity(total + made, limits["high"]),
                   {"basis": b.name, "share": total + made, "threshold": limits["share"],
                    **op_evidence(ops[0], b), "materialisers": present,
                    "materialised_share": made, "others": [o.name for o in ops[1:4]]},
                   ops=[o.name for o in ops[:3]])


@rule("copy-heavy", saving=_copies_saving, share=0.20, high=0.40)
def copy_heavy(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Copies hold a large share: say whether transfers, layout copies or CopySlices."""
    b, ops, total = _ranked(profile, COPIES)
    if not ops or total <= limits["share"]:
        return None
    names = {o.name: o for o in profile.ops}
    kinds = []
    memcpy = [o for o in profile.ops if o.name.startswith("Memcpy") and ("HtoD" in o.name
                                                                          or "DtoH" in o.name)]
    to_total = max((o.cpu_total_us for o in profile.ops if o.name == "aten::to"), default=0.0)
    copy_total = max((o.cpu_total_us for o in ops if o.name == "aten::copy_"), default=0.0)
    if memcpy or (copy_total > 0 and to_total >= 0.5 * copy_total):
        kinds.append("transfer")
    if any("CopySlices" in o.name for o in profile.ops):
        kinds.append("copyslices")
    if any(n in names for n in LAYOUT):
        kinds.append("layout")
    pageable = any("Pageable" in o.name for o in memcpy)
    return Finding("copy-heavy", _severity(total, limits["high"]),
                   {"basis": b.name, "share": total, "threshold": limits["share"],
                    **op_evidence(ops[0], b), "kinds": kinds or ["layout"],
                    "pageable": pageable},
                   ops=[o.name for o in ops[:2]])


@rule("dataloader-bound", saving=savings.waited("idle_data", host_key="data"),
      explains=_waits_longer, share=0.10, high=0.30)
def dataloader_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The step waits for its input: enumerate(DataLoader) takes a share of the step."""
    rows = dataloader_rows(profile)
    waited = sum(o.cpu_total_us for o in rows)
    frac, wall = step_share(profile, waited)
    if frac <= limits["share"]:
        return None
    top = max(rows, key=lambda o: o.cpu_total_us)
    return Finding("dataloader-bound", _severity(frac, limits["high"]),
                   {"basis": "step", "share": frac, "threshold": limits["share"],
                    "op": top.name, "op_time_us": waited, "step_us": wall,
                    "calls": sum(o.calls for o in rows),
                    "multiprocess": "MultiProcessing" in top.name},
                   ops=[o.name for o in rows])


@rule("dominant-operator", saving=savings.beyond_roofline, catch_all=True, share=0.50)
def dominant_operator(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One operator holds most of the self time."""
    b = basis(profile)
    ops = operators(profile)
    if not ops or b.total_us <= 0:
        return None
    top = max(ops, key=lambda o: getattr(o, b.attr))
    s = share([top], b)
    if s <= limits["share"]:
        return None
    # a matrix product or a convolution (mkldnn's and cudnn's included): on a CPU, lower
    # precision is advice to time both ways (BART's step took 15 times as long in bf16)
    matrix = top.name in MATMUL_OPS or top.name in MATRIX_CALLS or "convolution" in top.name
    return Finding("dominant-operator", "medium",
                   {"basis": b.name, "share": s, "threshold": limits["share"],
                    **op_evidence(top, b), "matrix_op": matrix}, ops=[top.name])


SYNC_OPS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "hipStreamSynchronize", "hipDeviceSynchronize", "aten::item",
            "aten::_local_scalar_dense")


def _host_calls(profile: Profile, names: tuple[str, ...]) -> tuple[list[Op], float]:
    """The rows of these calls with self CPU time, longest first, and their share of the
    CPU time (the host blocked in them)."""
    rows = sorted((o for o in profile.ops if o.name in names and o.self_cpu_us > 0),
                  key=lambda o: o.self_cpu_us, reverse=True)
    return rows, sum(o.self_cpu_us for o in rows) / profile.self_cpu_us


# The runner's own wait at the end of a profiled window (breakdown.DRAIN_MARK) is one of
# these calls: cudaDeviceSynchronize (cudaEventSynchronize in runs before the drain waited
# for every stream).
_DRAIN_CALLS = ("cudaDeviceSynchronize", "cudaEventSynchronize")


def _sync_calls(profile: Profile) -> tuple[list[Op], float]:
    """_host_calls of SYNC_OPS less the runner's own drain: the host's time in the
    ``drain`` phase of the step breakdown comes off the drain's call, so that a
    synchronisation the model never made is not read as one."""
    rows, _ = _host_calls(profile, SYNC_OPS)
    b = profile.breakdown
    left = sum(b.host_us.get("drain") or []) if b is not None and b.host_us else 0.0
    out = []
    for o in rows:
        if left > 0 and o.name in _DRAIN_CALLS:
            cut = min(left, o.self_cpu_us)
            left -= cut
            o = replace(o, self_cpu_us=o.self_cpu_us - cut, calls=max(o.calls - 1, 0))
        if o.self_cpu_us > 0 and o.calls > 0:
            out.append(o)
    out.sort(key=lambda o: o.self_cpu_us, reverse=True)
    cpu = profile.self_cpu_us
    return out, (sum(o.self_cpu_us for o in out) / cpu if cpu > 0 else 0.0)


@rule("sync-stall", saving=savings.waited("idle_sync", owned=_idle_sync_part(of_copies=False)),
      symptom=savings.device_kept_busy, share=0.10, high=0.30)
def sync_stall(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The host waits for the device: synchronisations hold a share of CPU time."""
    if profile.self_cpu_us <= 0:
        return None
    rows, total = _sync_calls(profile)
    if not rows or total <= limits["share"]:
        return None
    top = rows[0]
    item_calls = sum(o.calls for o in profile.ops
                     if o.name in ("aten::item", "aten::_local_scalar_dense"))
    return Finding("sync-stall", _severity(total, limits["high"]),
                   {"basis": "cpu", "share": total, "threshold": limits["share"],
                    "op": top.name, "op_share": top.self_cpu_us / profile.self_cpu_us,
                    "op_time_us": top.self_cpu_us, "calls": top.calls,
                    "item_calls": item_calls}, ops=[o.name for o in rows])


# Kernel names of fp32 matrix products without tensor cores (cuBLAS sgemm/gemv, cuDNN's
# fp32 implicit GEMMs). A GEMV is fp32 when its third template argument, the matrix's
# element type, is float: "gemv2T_kernel_val<int, int, float, ...>",
# "internal::gemvx::kernel<int, int, float, ...>" (not "<int, int, __nv_bfloat16, ...>").
_FP32_GEMM = re.compile(r"sgemm|gemv2?[NT]?_kernel\w*<[^,<>]*, ?[^,<>]*, ?float\b|"
                        r"gemvx::kernel<[^,<>]*, ?[^,<>]*, ?float\b|gemmSN_\w*kernel<float|"
                        r"gemm(_indexed)?_f32f32_f32|Cijk_Ailk_Bljk_S|Cijk_Alik_Bljk_S|"
                        # cuDNN's fp32 convolutions by their other names (below)
                        r"_scudnn_(?!fp16)|cudnn::detail::\w*(dgrad|wgrad)\w*<float\b|"
                        r"winograd\w*<float\b|fft2d_[rc]2[rc]_\w*<float\b|_gcgemm_|"
                        # fp32 attention (below)
                        r"fmha_cutlass[FB]_f32_|AttentionKernel<float\b|"
                        r"AttentionBackwardKernel<cutlass::arch::Sm\d+, ?float\b")
# Architectures whose GEMM kernels name themselves and that have tensor cores.
_TC_ARCH = re.compile(r"^(volta|turing|ampere|sm[789]\d|hopper|ada|blackwell|sm1\d\d)_")
_NO_TC_ARCH = re.compile(r"^(maxwell|kepler|pascal)_")
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
_CONV_KERNEL = re.compile(r"fprop|dgrad|wgrad|convolve|scudnn|winograd|fft2d_|gcgemm",
                          re.IGNORECASE)
# fp32 attention: PyTorch's memory-efficient kernels in fp32 ("fmha_cutlassF_f32_aligned_
# 64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, ...>
# ::Params)", the backward "fmha_cutlassB_f32_..."; before torch 2.1 "attention_kernel_batched
# <AttentionKernel<float, ...>>"), what scaled_dot_product_attention runs on fp32 inputs. The
# flash and cuDNN kernels have no fp32 variant: fp32 attention is these or sgemm matmuls.
# On sm80 and later the fp32 kernel emulates fp32 on the tensor cores (3xTF32), still
# several times slower than the same kernel in bf16.
# Kernels built for Volta or Turing by their suffix (fmha_cutlassF_f32_aligned_64x64_rf_sm70),
# and those GPUs by name: tensor cores in fp16 only.
_FP16_ONLY_SM = re.compile(r"_sm7[05]\b")
_FP16_ONLY_GPU = re.compile(r"V100|Titan V|\bT4\b|RTX 20\d0|Quadro RTX|GTX 16\d0", re.IGNORECASE)
_ATTENTION_KERNEL = re.compile(r"fmha_cutlass|AttentionKernel<|AttentionBackwardKernel<")


def _fp16_only(profile: Profile, arch: str | None, kernel: str = "") -> bool:
    """Whether the GPU's tensor cores do fp16 only (Volta, Turing). Told by the device
    where the datasheet table knows it: cuBLAS runs its "volta_sgemm" kernels on an A100
    or H100 too, so the kernel's prefix says that only where the device is unknown; so do
    a fused attention kernel built for sm70/sm75 and a device named like one of those."""
    from .peaks import lookup

    known = lookup(profile.device_name, profile.device_mem_capacity_b)
    if known is not None:
        return "bf16" not in known.flops and "tf32" not in known.flops
    return (arch in ("volta_", "turing_") or bool(_FP16_ONLY_SM.search(kernel))
            or bool(_FP16_ONLY_GPU.search(profile.device_name or "")))


def fp32_convolution_share(profile: Profile) -> float:
    """The share of the fp32 GEMM kernels' device time that computes convolutions."""
    gemms = [o for o in profile.ops if o.kind == "kernel" and _FP32_GEMM.search(o.name)]
    total = sum(o.self_device_us for o in gemms)
    conv = sum(o.self_device_us for o in gemms if _CONV_KERNEL.search(o.name))
    return conv / total if total > 0 else 0.0


# Runtime calls in which the host waits for a copy: from pageable memory, or behind the
# queue (a synchronous cudaMemcpy; an Async one from pageable memory is synchronous too).
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync", "cudaMemcpy2D",
              "hipMemcpyAsync", "hipMemcpy", "hipMemcpyWithStream")


@rule("host-copy-blocked",
      saving=savings.waited("idle_sync", owned=_idle_sync_part(of_copies=True)),
      share=0.10, high=0.30)
def host_copy_blocked(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The host is blocked in copy calls a share of CPU time (pageable memory, implicit
    synchronisation)."""
    if not profile.has_device or profile.self_cpu_us <= 0:
        return None
    rows, total = _host_calls(profile, COPY_CALLS)
    if not rows or total <= limits["share"]:
        return None
    top = rows[0]
    return Finding("host-copy-blocked", _severity(total, limits["high"]),
                   {"basis": "cpu", "share": total, "threshold": limits["share"],
                    "op": top.name, "op_time_us": top.self_cpu_us, "calls": top.calls,
                    "mean_call_us": top.self_cpu_us / top.calls if top.calls else 0.0},
                   ops=[o.name for o in rows])


@rule("fp32-gemm", saving=savings.faster_dtype, explains=_runs_products,
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
    return Finding("fp32-gemm", _severity(s, limits["high"]),
                   {"basis": "device", "share": s, "threshold": limits["share"],
                    "op": top.name, "op_share": top.self_device_us / profile.self_device_us,
                    "op_time_us": top.self_device_us, "calls": sum(o.calls for o in gemms),
                    "kernels": len(gemms), "arch": arch,
                    # what the kernels compute: convolutions, matrix products, or both
                    "convolutions": any(_CONV_KERNEL.search(o.name) for o in gemms),
                    "attention": any(_ATTENTION_KERNEL.search(o.name) for o in gemms),
                    "products": any(not _CONV_KERNEL.search(o.name)
                                    and not _ATTENTION_KERNEL.search(o.name) for o in gemms),
                    # Volta (V100) and Turing (T4) tensor cores do fp16 only: no bf16, no TF32
                    "fp16_only": _fp16_only(profile, arch, top.name)},
                   ops=[o.name for o in gemms])


_ATTENTION_PARTS = ("aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::softmax",
                    "aten::_softmax_backward_data", "aten::masked_fill", "aten::masked_fill_")
_SOFTMAX_OPS = ("aten::_softmax", "aten::softmax")
_FUSED_ATTENTION = ("scaled_dot_product", "flash_attention", "efficient_attention",
                    "cudnn_attention", "fmha", "flash_fwd", "flash_bwd")


def _attention_timed(f: Finding, timed: dict[str, Any]) -> None:
    """What the saving was timed with where the model's own attention was switched to
    SDPA (whatif.attention_step): a transformers model's attn_implementation, an
    nn.MultiheadAttention's need_weights. The advice names the switch."""
    switched = (timed.get("switched") or []) if timed.get("fix") == "attention-sdpa" else []
    f.evidence["sdpa_transformers"] = "transformers" in switched
    f.evidence["sdpa_need_weights"] = "need_weights" in switched


@rule("unfused-attention", saving=_fused_attention_saving,
      whatif=WhatIf("attention", notes=_attention_timed), frees=True, share=0.10)
def unfused_attention(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Attention as separate bmm/matmul and softmax kernels instead of one fused kernel."""
    names = {o.name for o in profile.ops}
    if any(f in n for n in names for f in _FUSED_ATTENTION):
        return None
    has_softmax = any(n in names for n in ("aten::_softmax", "aten::softmax"))
    has_bmm = any(n in names for n in ("aten::bmm", "aten::baddbmm"))
    if not (has_softmax and has_bmm):
        return None
    b = basis(profile)
    parts = sorted((o for o in operators(profile) if o.name in _ATTENTION_PARTS),
                   key=lambda o: getattr(o, b.attr), reverse=True)
    s = share(parts, b)
    if s <= limits["share"]:
        return None
    softmax_calls = sum(o.calls for o in parts if "softmax" in o.name
                        and "backward" not in o.name)
    scale_b = _scale_bytes(profile)
    return Finding("unfused-attention", "medium",
                   {"basis": b.name, "share": s, "threshold": limits["share"],
                    **op_evidence(parts[0], b), "softmax_calls": softmax_calls,
                    **({"scale_b": scale_b} if scale_b > 0 else {})},
                   ops=[o.name for o in parts])


def _scale_bytes(profile: Profile) -> float:
    """The bytes the scaling of an attention's scores allocates (a division or a
    multiplication of a tensor of a softmax's input shape by a scalar, and its backward,
    by the recorded shapes and memory): a fused kernel does away with those tensors and
    the page faults they take (savings.fault_share)."""
    from .shapes import dims

    scores = {tuple(d[0]) for o in profile.ops_by_shape if o.name in _SOFTMAX_OPS
              for d in [dims(o)] if d and len(d[0]) >= 3}
    return float(sum(max(0, o.self_cpu_mem_b) for o in profile.ops_by_shape
                     if o.name in ("aten::div", "aten::mul")
                     for d in [dims(o)] if d and tuple(d[0]) in scores and not any(d[1:])))


# A CUDA graph's launch is one launch, whatever number of kernels it replays.
_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
             "hipLaunchKernel", "hipExtModuleLaunchKernel", *GRAPH_LAUNCHES)


def _host_idle_share(profile: Profile) -> float | None:
    """The share of the steps the device sat idle because the host had not launched its
    next work (the step breakdown's idle_host), or None without a device breakdown."""
    b = profile.breakdown
    if b is None or not b.steps_us or "idle_host" not in (b.device_us or {}):
        return None
    wall = sum(b.steps_us)
    return sum(b.device_us["idle_host"]) / wall if wall > 0 else None


# Kernels shorter than this on average are launch latency: the sizes are too small for
# the device (the report says so too: reporter.analyze.reading.short_kernels_us).
SHORT_KERNEL_US = 10.0


def mean_kernel_us(profile: Profile) -> float | None:
    """The kernels' mean device time, per kernel; None without kernel rows. The one mean
    the summary's short-kernel line and launch-overhead give (T5 on an H200 read 2.95 us
    in one and 3.08 us, copies and memsets included, in the other)."""
    kernels = [o for o in profile.ops if o.kind == KIND_KERNEL and o.calls]
    calls = sum(o.calls for o in kernels)
    return sum(o.self_device_us for o in kernels) / calls if calls else None


@rule("launch-overhead", saving=savings.unquantified, ratio=0.5,
      short_kernel_us=SHORT_KERNEL_US,
      min_launches=100, host_idle=0.10)
def launch_overhead(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Many short kernels: launching them costs about as much as running them. Short
    kernels alone are not enough where the step breakdown shows the queue kept the
    device busy (the host was ahead: its launches cost nothing the device waited for)."""
    if not profile.has_device:
        return None
    launches = [o for o in profile.ops if o.name in _LAUNCHES]
    calls = sum(o.calls for o in launches)
    if calls < limits["min_launches"]:
        return None
    launch_us = sum(o.self_cpu_us for o in launches)
    ratio = launch_us / profile.self_device_us
    graphs = sum(o.calls for o in launches if o.name in GRAPH_LAUNCHES)
    # CUDA graphs among the launches: each one launch for all its kernels, so the mean is
    # the device time per launch, not per kernel
    per_kernel = None if graphs else mean_kernel_us(profile)
    mean_us = per_kernel if per_kernel is not None else profile.self_device_us / calls
    if ratio < limits["ratio"]:
        if mean_us >= limits["short_kernel_us"]:
            return None
        waited = _host_idle_share(profile)
        if waited is not None and waited < limits["host_idle"]:
            return None
    # A trace says how the launches kept up (analyze.breakdown.launch_statistics): when
    # the queue never ran dry in a step, the host stayed ahead of the device and the
    # launches cost it no time, however many there were.
    stats = profile.breakdown.launch if profile.breakdown is not None else {}
    if stats and not stats.get("dry_steps"):
        return None
    return Finding("launch-overhead", "high" if ratio >= 1 else "medium",
                   {"basis": "device", "share": ratio, "threshold": limits["ratio"],
                    "op": launches[0].name, "op_time_us": launch_us, "calls": calls,
                    "device_us": profile.self_device_us, "mean_kernel_us": mean_us,
                    "short_kernel_us": limits["short_kernel_us"],
                    **({"graphs": graphs} if graphs else {}),
                    **({"launches_per_step": stats["launches_per_step"],
                        "delay_median_us": stats["delay_median_us"],
                        "dry_steps": stats["dry_steps"], "steps": stats["steps"]}
                       if stats else {})},
                   ops=[o.name for o in launches])


IDLE_BUSY = 0.50  # low-device-utilization's threshold, of the profiled step and the timed one


# Host work whose own finding the device's idle time goes with (savings.idle_left); not
# the DataLoader's, whose idle time the breakdown keeps apart (idle_data).
HOST_CAUSES = ("per-sample-loop", "dispatch-bound", "cpu-side-padding", "launch-overhead")


@rule("low-device-utilization", saving=savings.idle_left(HOST_CAUSES),
      symptom=savings.idle_of_profiler(IDLE_BUSY), busy=IDLE_BUSY)
def low_device_utilization(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The device is busy for less than half of the profiled steps: the union of its
    work inside the steps (the step breakdown's time less its idle time), or, without a
    breakdown (a table), its kernels' time over the steps' wall time. Left out where the
    step timed without the profiler leaves the device busy half of it or more (its idle
    time was the profiler's: savings.idle_of_profiler)."""
    if not profile.has_device:
        return None
    b = profile.breakdown
    if b is not None and b.steps_us and b.device_us:
        wall = float(sum(b.steps_us))
        idle = float(sum(sum(v) for k, v in b.device_us.items() if k.startswith("idle")))
        busy_us = max(0.0, wall - idle)
        busy = busy_us / wall if wall > 0 else 0.0
    else:
        busy_us = profile.self_device_us
        busy, wall = step_share(profile, busy_us)
    if wall <= 0 or busy >= limits["busy"]:
        return None
    return Finding("low-device-utilization", "high" if busy < limits["busy"] / 2 else "medium",
                   {"basis": "step", "share": busy, "threshold": limits["busy"],
                    "op_time_us": busy_us, "step_us": wall, "calls": 0})


@rule("memory-pressure", saving=savings.unquantified, peak=0.90, per_call=0.25,
      per_call_fill=0.50)
def memory_pressure(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Peak device memory near capacity, or one operator allocating a large share of a
    peak that fills half of it or more (BERT on an H200, 2026-11-29: "GPU memory is 1.3%
    full", a main problem for a 512 MB multiply in a 1.76 GB peak of 140 GB)."""
    peak, capacity = profile.peak_device_mem_b, profile.device_mem_capacity_b
    if not peak or not capacity:
        return None
    fill = peak / capacity
    top = max((o for o in operators(profile) if o.calls and o.self_device_mem_b > 0),
              key=lambda o: o.self_device_mem_b / o.calls, default=None)
    per_call = top.self_device_mem_b / top.calls if top else 0
    if fill <= limits["peak"] and (per_call <= limits["per_call"] * peak
                                   or fill < limits["per_call_fill"]):
        return None
    return Finding("memory-pressure", "high" if fill > limits["peak"] else "medium",
                   {"basis": "memory", "share": fill, "threshold": limits["peak"],
                    "op": top.name if top else None, "calls": top.calls if top else 0,
                    "peak_b": peak, "capacity_b": capacity, "mem_per_call_b": int(per_call),
                    "per_call_share": per_call / peak},
                   ops=[top.name] if top else [])


_PADDING = ("aten::pad_sequence", "aten::_pad_packed_sequence", "aten::pad",
            "aten::constant_pad_nd")


@rule("cpu-side-padding", saving=savings.removed, share=0.10)
def cpu_side_padding(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Padding or collation on the CPU takes a large share of the step."""
    rows = [o for o in profile.ops if o.name in _PADDING or "collate" in o.name.lower()]
    largest = _largest_in_step(profile, rows, limits["share"])
    if largest is None:
        return None
    top, s, wall = largest
    return Finding("cpu-side-padding", "medium",
                   {"basis": "step", "share": s, "threshold": limits["share"], "op": top.name,
                    "op_time_us": top.cpu_total_us, "step_us": wall, "calls": top.calls},
                   ops=[top.name])


_PER_TENSOR_UPDATES = ("aten::add_", "aten::mul_", "aten::addcdiv_", "aten::addcmul_",
                       "aten::lerp_", "aten::sqrt", "aten::div_")


# torch.optim classes with foreach=True, and those with fused=True too (torch >= 2.4).
_FOREACH_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad", "Adamax", "NAdam", "RAdam",
                       "RMSprop", "Rprop", "ASGD", "Adadelta")
_FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")


def _optimizer_call(name: str) -> tuple[str, bool]:
    """The call the advice gives for the optimizer class ``name`` (AdamW's for a class
    torch.optim does not have), and whether it is the fused implementation."""
    if name not in _FOREACH_OPTIMIZERS:
        name = "AdamW"
    fused = name in _FUSED_OPTIMIZERS
    return f"torch.optim.{name}(params, lr=..., {'fused' if fused else 'foreach'}=True)", fused


def _foreach_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether ``foreach=True`` timed no faster than one parameter at a time
    (``foreach_slower``): on a CPU it often is not (T5's Adam: 16.5 ms a step one parameter
    at a time, 14-22 ms with foreach, 6.0 ms fused), and the advice then gives fused
    alone."""
    before, foreach = timed.get("before_ms"), timed.get("foreach_ms")
    if isinstance(before, (int, float)) and isinstance(foreach, (int, float)) \
            and not isinstance(before, bool) and not isinstance(foreach, bool):
        f.evidence["foreach_slower"] = bool(foreach >= before)


@rule("single-tensor-optimizer", saving=_optimizer_saving,
      whatif=WhatIf("optimizer", notes=_foreach_timed), share=0.05, per_step=4)
def single_tensor_optimizer(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The optimizer updates one parameter at a time instead of foreach or fused kernels
    (on the CPU too: whether they help there, a live run times on the device)."""
    names = " ".join(o.name for o in profile.ops)
    if "_foreach_" in names or "_fused_" in names:
        return None
    steps = [o for o in profile.ops if o.name.startswith("Optimizer.step#")]
    if not steps:
        return None
    step_calls = sum(o.calls for o in steps) or 1
    updates = sum(o.calls for o in profile.ops if o.name in _PER_TENSOR_UPDATES)
    s, _ = step_share(profile, max(o.cpu_total_us for o in steps))
    if updates < limits["per_step"] * step_calls or s <= limits["share"]:
        return None
    call, fused = _optimizer_call(steps[0].name.partition("#")[2].partition(".")[0])
    return Finding("single-tensor-optimizer", "medium",
                   {"basis": "step", "share": s, "threshold": limits["share"],
                    "op": steps[0].name, "op_time_us": steps[0].cpu_total_us,
                    "calls": step_calls, "updates_per_step": updates / step_calls,
                    # the advice: the user's own torch.optim class (Optimizer.step#
                    # <Class>.step) with the argument it has
                    "call": call, "fused": fused},
                   ops=[o.name for o in steps])


@rule("straggler-rank", saving=savings.stated, share=0.05, high=0.20)
def straggler_rank(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One rank's step is longer than the others' by more than ``share``: in every
    collective the others wait for it (analyze.stragglers)."""
    s = profile.stragglers
    if not s or s["extra_share"] <= limits["share"]:
        return None
    by = s["extra_by_cause_us"]
    return Finding("straggler-rank", _severity(s["extra_share"], limits["high"]),
                   {"basis": "step", "share": s["extra_share"], "threshold": limits["share"],
                    "rank": str(s["slowest"]).replace("rank ", ""), "ranks": len(s["ranks"]),
                    "cause": s["cause"], "device": bool(s.get("device", True)),
                    "op_time_us": s["extra_us"],
                    "saving_us": s["extra_us"], "slowest_step_us": s["slowest_step_us"],
                    "reference_step_us": s["reference_step_us"],
                    **{f"{cause}_us": by[cause] for cause in by}, "calls": 0})


def _copy_link_saving(w: Worth) -> Saving:
    """The copies at their link's peak: their time less bytes over the peak (at most);
    at least that part of the time the copies of this direction left the device idle
    otherwise (the breakdown's copy time not hidden behind other device work)."""
    ev = w.finding.evidence
    accounted = ev.get("op_time_us")  # per step, from the breakdown's copies
    if not accounted or not ev.get("peak_share"):
        return w.unquantified()
    slower = 1 - min(1.0, float(ev["peak_share"]))
    b = w.profile.breakdown
    exposed = (b.mean(b.device_us.get("copy_" + str(ev["direction"]), []))
               if b is not None else 0.0)
    high = accounted * slower
    low = min(accounted, exposed) * slower
    return Saving(accounted, high, low, high, w.step_us)


# A copy between host and device far below its link: pinned copies reach 75-85% of the
# PCIe link's peak on an idle link, pageable ones (staged by the driver through a pinned
# buffer) about half; under ``ratio`` of it, something else holds the copies back (pageable
# memory, many small copies, a shared or narrower link).
@rule("slow-copies", saving=_copy_link_saving, ratio=0.50, share=0.05, small_b=1 << 20)
def slow_copies(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Copies between host and device run far below their link's peak and take a share
    of the step (analyze.breakdown.copy_statistics)."""
    b = profile.breakdown
    if b is None or not b.copies or not b.steps_us:
        return None
    n, step = len(b.steps_us), b.mean(b.steps_us)
    slow = [r for r in b.copies if r["direction"] in ("h2d", "d2h") and r.get("peak_share")
            is not None and r["peak_share"] < limits["ratio"]
            and step > 0 and r["time_us"] / n / step > limits["share"]]
    if not slow:
        return None
    top = max(slow, key=lambda r: r["time_us"])
    per_step = top["time_us"] / n
    mean_b = top["bytes"] / top["copies"] if top["copies"] else 0.0
    return Finding("slow-copies", "high" if per_step / step >= 2 * limits["share"] else "medium",
                   {"basis": "step", "share": per_step / step, "threshold": limits["share"],
                    "op": top["name"], "op_time_us": per_step, "calls": int(top["copies"]),
                    "direction": top["direction"], "kind": top["kind"],
                    "pageable": top["kind"] == "pageable",
                    "small": mean_b < limits["small_b"], "mean_copy_b": mean_b,
                    "achieved_gbps": float(top["gbps"]), "peak_gbps": float(top["peak_gbps"]),
                    "peak_share": float(top["peak_share"]), "below_share": limits["ratio"],
                    "link": top["link"]}, ops=[top["name"]])


@rule("communication-bound", saving=savings.waited("communication"), share=0.10,
      high=0.30)
def communication_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Collectives (all-reduce, all-gather, ...) take a large share of the step."""
    if not profile.comm_us:
        return None
    s, wall = step_share(profile, profile.comm_us)
    if s <= limits["share"]:
        return None
    overlap = (profile.comm_overlap_us or 0.0) / profile.comm_us
    return Finding("communication-bound", _severity(s, limits["high"]),
                   {"basis": "step", "share": s, "threshold": limits["share"],
                    "op_time_us": profile.comm_us, "step_us": wall, "overlap_share": overlap,
                    "exposed_us": profile.comm_us - (profile.comm_overlap_us or 0.0),
                    "calls": 0})


# Dropout's operators: the top-level calls (their inclusive time holds the mask's
# bernoulli_, its scaling and the multiply) and the fused kernel's backward.
_DROPOUT = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
            "aten::feature_alpha_dropout", "aten::native_dropout",
            "aten::native_dropout_backward")
_DROPOUT_PARTS = ("aten::bernoulli_", "aten::bernoulli", "aten::native_dropout",
                  "aten::native_dropout_backward")


def _dropout_rows(profile: Profile) -> tuple[dict[str, Op], list[Op]]:
    """Dropout's operator rows by name, and those of its top-level calls (aten::native_dropout
    runs inside aten::dropout when both are recorded)."""
    rows = {o.name: o for o in operators(profile) if o.name in _DROPOUT}
    top = [o for n, o in rows.items() if n != "aten::native_dropout" or
           "aten::dropout" not in rows]
    return rows, top


def dropout_calls(profile: Profile) -> int:
    """The dropout calls the profile recorded, over its steps (the top-level ones; their
    backward left out)."""
    return sum(o.calls for o in _dropout_rows(profile)[1] if not o.name.endswith("_backward"))


def _dropout_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether the saving was timed with dropout off altogether (whatif.dropout_step): the
    report says so beside the advice's gentler options."""
    f.evidence["timed_off"] = timed.get("fix") == "dropout-off"


@rule("dropout-cost", saving=savings.removed, frees=True,
      whatif=WhatIf("dropout-off", notes=_dropout_timed),
      share=0.05, high=0.25)
def dropout_cost(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Dropout's random masks take a share of the time (a bernoulli_ per element on the
    CPU; a fused kernel on a GPU, still a random number per element)."""
    b = basis(profile)
    inclusive = "device_total_us" if b.name == "device" else "cpu_total_us"
    rows, top = _dropout_rows(profile)
    if not rows or b.total_us <= 0:
        return None
    calls = dropout_calls(profile)
    backward_us = 0.0 if "aten::native_dropout_backward" in rows else \
        _mask_backward_us(profile, calls, b.attr)
    time_us = sum(getattr(o, inclusive) for o in top) + backward_us
    s = time_us / b.total_us
    if s <= limits["share"]:
        return None
    first = max(top, key=lambda o: getattr(o, inclusive))
    return Finding("dropout-cost", _severity(s, limits["high"]),
                   {"basis": b.name, "share": s, "threshold": limits["share"],
                    "op": first.name, "op_time_us": time_us, "calls": calls,
                    "backward_us": backward_us, "mask_backward": backward_us > 0,
                    "fused": "aten::native_dropout" in rows,
                    "inference": profile.label == "inference"},
                   ops=sorted({*rows, *(o.name for o in operators(profile)
                                        if o.name in _DROPOUT_PARTS)}))


def _faults_saving(w: Worth) -> Saving:
    """The faults' time goes away: their count times the measured cost of one, a share
    of the step timed without the profiler (the evidence's ``share``, which ``estimate``
    keeps on that step); at least at the cost of a fault spread over the threads. Less
    the faults inside another finding's operators, which go with its fix: a fault lands
    in the operator that first writes the fresh page (``savings.fault_share``: by the
    bytes each allocates, the allocators' by the writers' time), and those another
    finding names are its (seq2seq's copy finding owned most of them: counted twice, the
    two predicted 94% of the step against 68% measured)."""
    if not w.accounts_us:
        return w.unquantified()
    # a catch-all (one dominant operator) keeps its operators' work: not its faults' fix
    others = [o for o in w.others if o is not w.finding
              and not (o.rule in RULES and RULES[o.rule].catch_all)]
    inside = savings.owned_fault_share(w.profile, others)
    e = w.finding.evidence
    saving = w.accounts_us * max(0.0, 1.0 - inside)
    low = saving * min(1.0, float(e.get("fault_low_us") or e["fault_us"])
                       / float(e["fault_us"]))
    # all of them in other findings' operators: a bare "0" read as a fix worth nothing
    return Saving(w.accounts_us, saving, low, saving, w.step_us,
                  IN_OTHERS if saving <= 0 else None, host_saving=True)


@rule("page-faults", saving=_faults_saving, keeps_work=True, share=0.05, high=0.25)
def page_faults(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """The host's minor and major page faults in a step timed without the profiler, at
    the cost of one measured in the same process (runner.measured_fault_us), take over
    ``share`` of that step: freed memory goes back to the OS (glibc's malloc maps blocks
    of 32 MiB and more afresh each time and trims its heap) and the next step has the
    kernel map and zero it again (Profile.host_faults). On the CPU only: on a GPU the
    host runs ahead of the device, and its faults lengthen the step only where the host
    bounds it, which this count cannot tell."""
    h = profile.host_faults
    if not h or profile.has_device:
        return None
    faults, fault_us, step_us = h["faults"], h["fault_us"], h["step_us"]
    cost = faults * fault_us
    if step_us <= 0 or cost < limits["share"] * step_us:
        return None
    share = min(1.0, cost / step_us)
    return Finding("page-faults", _severity(share, limits["high"]),
                   {"basis": "step", "share": share, "threshold": limits["share"],
                    "faults": round(faults), "fault_us": fault_us,
                    "fault_low_us": h.get("fault_low_us", fault_us), "fault_time_us": cost,
                    "unprofiled_step_us": step_us, "unprofiled": True, "calls": 0})


def _mask_backward_us(profile: Profile, calls: int, attr: str) -> float:
    """The backward of an unfused dropout (``aten::dropout``: a mask, then a multiply,
    whose backward is one more multiply by the mask, an anonymous ``MulBackward0``): the
    multiplies of two tensors of a dropout's input shape beyond the forward's own (one
    per dropout call), at most one per dropout call, at the mean time of such a multiply
    (from the recorded shapes; 0 without them, or in inference)."""
    from .shapes import dims

    inputs = {tuple(d[0]) for o in profile.ops_by_shape if o.name == "aten::dropout"
              for d in [dims(o)] if d}
    muls = [o for o in profile.ops_by_shape if o.name == "aten::mul" and o.calls
            for d in [dims(o)] if len(d) == 2 and tuple(d[0]) == tuple(d[1]) and
            tuple(d[0]) in inputs]
    n = sum(o.calls for o in muls)
    extra = min(max(0, n - calls), calls)
    return extra * sum(getattr(o, attr) for o in muls) / n if n else 0.0


def _batched_saving(w: Worth) -> Saving:
    """Calling the module once on the stacked batch instead of N times: at most its time
    less one call's (each call is overhead-bound: the same framework work per call,
    whatever its size); at least that less the operators' own time in the step, which a
    batched call may still take in full."""
    n = float(w.finding.evidence.get("calls_per_step") or 0)
    if not w.accounts_us or n < 2:
        return w.unquantified()
    high = w.accounts_us * (1 - 1 / n)
    ops_us = sum(o.self_cpu_us for o in operators(w.profile)) / max(w.steps, 1)
    return Saving(w.accounts_us, high, max(0.0, high - ops_us), high, w.step_us,
                  host_saving=True)


def _framework_call_us(ops: list[Op]) -> float | None:
    """The framework's fixed cost of one operator call in this profile: the mean time of
    the view operators, which compute nothing (None without any). It stretches with the
    profiler and with a busy machine as every other call does, so limits in its units
    hold under both."""
    views = [o for o in ops if o.name in _VIEW_OPS and o.calls]
    n = sum(o.calls for o in views)
    return sum(o.self_cpu_us for o in views) / n if n else None


@rule("per-sample-loop", saving=_batched_saving, calls_per_step=16, share=0.15,
      call_ratio=25.0, call_us=500.0)
def per_sample_loop(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """One module called many times per step, each call short: a Python loop over the
    samples (or time steps) of a batch, paying the framework's per-call cost each time
    (the runner's module marks say how often each module ran), its calls and their
    backward (the step breakdown's, by module) over ``share`` of the step less the page
    faults the profiler added to it (``savings.first_touch_us``). Short is relative to the
    profile's own cost of a call (``_framework_call_us``): a call of the module takes at
    most ``call_ratio`` times that per operator call it makes (the step's operator calls
    over the module's calls), so that a machine or profiler that slows every call does not
    hide the loop; ``call_us`` per call of the module, where no view operator gives that
    yardstick."""
    steps = max(profile.steps, 1)
    ops = operators(profile)
    op_calls = sum(o.calls for o in ops)
    framework_us = _framework_call_us(ops)

    def short(o: Op) -> bool:
        mean = o.cpu_total_us / o.calls
        if framework_us is None or not op_calls:
            return mean <= limits["call_us"]
        per_op = mean / max(1.0, op_calls / o.calls)
        return per_op <= limits["call_ratio"] * framework_us

    marks = [o for o in profile.ops if o.kind == KIND_ANNOTATION and
             o.name.startswith(MODULE_MARK) and o.calls / steps >= limits["calls_per_step"]
             and short(o)]
    backward = profile.breakdown.module_backward_us if profile.breakdown else {}

    def both(o: Op) -> float:  # its forward calls, and their backward (a mean per step)
        return o.cpu_total_us + backward.get(o.name[len(MODULE_MARK):], 0.0) * steps

    if not marks:
        return None
    top = max(marks, key=both)
    # Of the step less the first touch of fresh memory the profiler added to the writers
    # (savings.first_touch_us): seq2seq's loop took 5% of a profiled step that page faults
    # under the profiler stretched fivefold, 19% of the rest
    wall = step_wall_us(profile)
    touched = savings.first_touch_us(profile) * steps
    of = wall - touched if 0 <= touched < wall else wall
    s = both(top) / of if of > 0 else 0.0
    if s <= limits["share"]:
        return None
    return Finding("per-sample-loop", _severity(s, 0.6),
                   {"basis": "step", "share": s, "threshold": limits["share"],
                    "op": top.name[len(MODULE_MARK):], "op_time_us": both(top),
                    "step_us": of, "calls": top.calls,
                    **({"faults_added_us": touched, "profiled_step_us": wall}
                       if of != wall else {}),
                    "calls_per_step": round(top.calls / steps),
                    "mean_call_us": both(top) / top.calls,
                    "op_calls_per_step": round(op_calls / steps),
                    "mean_op_us": sum(o.self_cpu_us for o in ops) / op_calls if op_calls else 0.0},
                   ops=[top.name])


# Operators that only make a view of a tensor: their time is the framework's per-call
# cost alone (Python, dispatch, the profiler's record), no compute.
_VIEW_OPS = {"aten::view", "aten::as_strided", "aten::t", "aten::transpose", "aten::expand",
             "aten::resolve_conj", "aten::resolve_neg", "aten::select", "aten::slice",
             "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::reshape",
             "aten::_unsafe_view", "aten::alias", "aten::detach", "aten::narrow",
             "aten::unbind", "aten::split", "aten::chunk"}
# Taking a tensor's rows one by one: `for row in x` (unbind, a select per row), `x[i]`.
_ROW_OPS = ("aten::select",)


def _row_loop(profile: Profile, steps: int, least: float) -> tuple[int, int] | None:
    """A tensor of at least ``least`` rows whose rows were taken one by one, as a Python
    loop over a batch takes them: (its rows, the row selections per step), the largest
    such tensor; None without one. With the recorded shapes (a run's profile), the
    selected tensor's first dimension; without them (``reporter analyze`` reads a trace's
    operators only), the selections per ``unbind`` (``for row in x``), or per step
    (``x[i]``)."""
    from .shapes import dims

    found: dict[int, int] = {}
    for o in profile.ops_by_shape:
        if o.name in _ROW_OPS:
            d = dims(o)
            if d and d[0] and d[0][0] >= least:
                found[d[0][0]] = found.get(d[0][0], 0) + o.calls
    if not profile.ops_by_shape:
        selected = sum(o.calls for o in operators(profile) if o.name in _ROW_OPS) / steps
        unbinds = sum(o.calls for o in operators(profile) if o.name == "aten::unbind") / steps
        rows = round(selected / unbinds) if unbinds >= 1 else round(selected)
        if rows >= least:
            found[rows] = round(selected * steps)
    loops = [(rows, round(calls / steps)) for rows, calls in found.items()
             if calls / steps >= rows]
    return max(loops) if loops else None


def _overhead_saving(w: Worth) -> Saving:
    """One call on the stacked batch instead of one per row: the step's framework time
    (all of it but what the operators compute: Python between the calls, dispatch, each
    call's fixed cost) falls by the loop's rows, at most; at least the operator calls' own
    fixed cost does (each call at the view operators' mean time: they compute nothing),
    the Python between them kept."""
    e = w.finding.evidence
    rows, per_call = float(e.get("rows") or 0), float(e.get("overhead_us") or 0)
    if rows < 2 or not w.accounts_us:
        return w.unquantified()
    fewer = 1 - 1 / rows
    high = w.accounts_us * fewer
    low = min(high, float(e["op_calls_per_step"]) * per_call * fewer)
    return Saving(w.accounts_us, high, low, high, w.step_us, host_saving=True)


@rule("dispatch-bound", saving=_overhead_saving, rows=16, calls_per_row=4, op_us=50.0,
      share=0.30)
def dispatch_bound(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Many small operators whose framework cost outweighs their work, in a loop over the
    rows of a batch: read from the operators alone (a user's trace), where the runner's
    module marks, which per-sample-loop counts, are absent. A tensor of ``rows`` or more
    rows taken row by row each step, ``calls_per_row`` operator calls per row or more, a
    mean operator call of at most ``op_us``, and the step's framework time (the step less
    what the operators compute, each call's fixed cost measured by the view operators; on
    a GPU, where the host waits for the device, the calls' fixed cost alone) over
    ``share`` of the step."""
    if any(o.kind == KIND_ANNOTATION and o.name.startswith(MODULE_MARK) for o in profile.ops):
        return None  # the runner's marks: per-sample-loop counts the module's calls
    steps = max(profile.steps, 1)
    ops = operators(profile)
    calls = sum(o.calls for o in ops)
    own = sum(o.self_cpu_us for o in ops)
    views = [o for o in ops if o.name in _VIEW_OPS and o.calls]
    loop = _row_loop(profile, steps, limits["rows"])
    if not calls or not views or loop is None or own <= 0:
        return None
    rows, selected = loop
    per_step, mean = calls / steps, own / calls
    overhead = sum(o.self_cpu_us for o in views) / sum(o.calls for o in views)
    compute = max(0.0, own - calls * overhead)  # what the operators do beyond their calls
    s, wall = step_share(profile, 0.0)
    # On a GPU the host's time outside the operators is mostly waiting for the device:
    # there, only the operator calls' fixed cost counts
    framework = calls * overhead if profile.has_device else max(0.0, wall - compute)
    s = framework / wall if wall > 0 else 0.0
    if per_step < limits["calls_per_row"] * rows or mean > limits["op_us"] or \
            s <= limits["share"]:
        return None
    top = max(ops, key=lambda o: o.calls)
    return Finding("dispatch-bound", _severity(s, 0.6),
                   {"basis": "step", "share": s, "threshold": limits["share"],
                    "op": top.name, "calls": top.calls, "op_time_us": framework,
                    "step_us": wall, "rows": rows, "selected_per_step": selected,
                    "op_calls_per_step": round(per_step),
                    "calls_per_row": round(per_step / rows), "mean_op_us": mean,
                    "overhead_us": overhead, "op_us_limit_us": limits["op_us"]},
                   ops=sorted({o.name for o in ops if o.calls / steps >= rows}))
