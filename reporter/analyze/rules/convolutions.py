"""Rules about convolutions, from PyTorch's Performance Tuning Guide: a bias that BatchNorm
cancels, cuDNN's auto-tuner left off, and the layout conversions cuDNN makes around
convolutions run in NCHW."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...model import vendors
from ...model.choice import OVER_STEPS, either, of, when
from ...model.finding import Evidence, Finding, Saving, opt
from ...model.profile import Op, Profile
from .. import savings
from ..findings import WhatIf, Worth, basis, operators, rule
from ..shapes import dims
from ._common import severity

# A convolution's rows, outermost first: conv1d/2d/3d call aten::convolution, which calls
# aten::_convolution, which calls the backend's (cudnn_convolution, mkldnn_convolution...).
# Each call is counted once, at the outermost level the profile recorded.
_CONV_LEVELS = (("aten::conv1d", "aten::conv2d", "aten::conv3d"), ("aten::convolution",),
                ("aten::_convolution",))
# BatchNorm's rows, outermost first (aten::batch_norm calls _batch_norm_impl_index, which
# calls the backend's).
_BN_LEVELS = (("aten::batch_norm",), ("aten::native_batch_norm", *vendors.names("batch_norm_ops"),
                                      "aten::_native_batch_norm_legit"))
# Operators of a training step's backward that say BatchNorm used the batch's statistics.
_BACKWARD = ("aten::native_batch_norm_backward", *vendors.names("batch_norm_backward_ops"),
             "aten::convolution_backward")


def _outermost(rows: list[Op], levels: tuple[tuple[str, ...], ...]) -> list[Op]:
    """The rows of the outermost level of ``levels`` that the profile recorded."""
    for names in levels:
        found = [o for o in rows if o.name in names]
        if found:
            return found
    return []


def conv_rows(profile: Profile, shapes: bool = False) -> list[Op]:
    """The convolutions' rows, each call once (the outermost level recorded); by input
    shape with ``shapes``."""
    return _outermost(profile.ops_by_shape if shapes else operators(profile), _CONV_LEVELS)


def _biased_conv(o: Op) -> tuple[int, int, int] | None:
    """(batch, output channels, rank) of a convolution called with a bias: its recorded
    operands are the input (N, C, ...), the weight (C_out, C/groups, ...) and the bias
    (C_out) (``[]`` without one); None for one without a bias or without shapes."""
    d = dims(o)
    if len(d) < 3 or len(d[0]) < 3 or len(d[1]) != len(d[0]):
        return None
    bias = d[2]
    if len(bias) != 1 or bias[0] != d[1][0]:
        return None
    return d[0][0], d[1][0], len(d[0])


def _bn_input(o: Op) -> tuple[int, int, int] | None:
    """(batch, channels, rank) of BatchNorm's input."""
    d = dims(o)
    return (d[0][0], d[0][1], len(d[0])) if d and len(d[0]) >= 3 else None


def _bias_adds(profile: Profile, keys: set[tuple[int, int, int]]) -> list[Op]:
    """The separate bias additions of the convolutions ``keys`` (batch, channels, rank):
    ``aten::add_`` of the output (N, C, ...) and the bias viewed as (1, C, 1, ...), which
    ATen makes after a cuDNN convolution (on the CPU oneDNN adds it inside its kernel)."""
    out = []
    for o in profile.ops_by_shape:
        d = dims(o) if o.name == "aten::add_" else []
        if len(d) >= 2 and len(d[0]) >= 3 and (d[0][0], d[0][1], len(d[0])) in keys \
                and d[1] == [1, d[0][1]] + [1] * (len(d[0]) - 2):
            out.append(o)
    return out


def _conv_bias_timed(f: Finding, timed: dict[str, Any]) -> None:
    """Whether the saving was timed with those convolutions' bias taken away
    (whatif.conv_bias_step)."""
    if isinstance(f.evidence, ConvBiasBeforeBn):
        f.evidence.timed_no_bias = timed.get("fix") == "conv-bias-off"


def _bias_saving(w: Worth) -> Saving:
    """What dropping the bias saves where the profile shows it: the bias additions' own
    time, per step (after a cuDNN convolution); where the kernel adds it (oneDNN), the
    profile cannot tell, and the saving is timed on the model or not quantified. The
    finding accounts for the convolutions that carry the bias."""
    e = w.finding.evidence
    add_us = float(e.bias_time_us or 0.0) if isinstance(e, ConvBiasBeforeBn) else 0.0
    if add_us <= 0:
        return w.unquantified()
    per_step = add_us / max(w.steps, 1)
    return Saving(w.accounts_us, per_step, per_step, per_step, w.step_us,
                  host_saving=e.basis != "device")


_SAYS_CONV_BIAS = {
    "steps": OVER_STEPS,
    "bias": either("bias_added_apart", "bias_in_the_kernel",
                   lambda v: of(ConvBiasBeforeBn)(v).bias_visible),
    "timed": when("timed_without_the_bias", lambda v: of(ConvBiasBeforeBn)(v).timed_no_bias),
}


@dataclass(kw_only=True)
class ConvBiasBeforeBn(Evidence):
    basis: str
    share: float  # the biased convolutions' share of the basis
    threshold: float
    op: str  # the first of them
    conv_time_us: float
    calls: int
    shapes: int  # their input shapes
    bias_visible: bool  # ATen adds the bias apart (after a cuDNN convolution)
    bias_time_us: float  # those additions
    bias_share: float
    timed_no_bias: bool | None = opt()  # timed without the bias (_conv_bias_timed)


@rule("conv-bias-before-bn", says=_SAYS_CONV_BIAS, evidence=ConvBiasBeforeBn,
      saving=_bias_saving,
      whatif=WhatIf("conv-bias-off", notes=_conv_bias_timed), share=0.05)
def conv_bias_before_bn(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """Convolutions with a bias whose output goes into BatchNorm, in a training step, take
    over ``share`` of the time: BatchNorm subtracts the batch's mean from each channel,
    and the bias with it, so the bias is added (and its gradient reduced) for nothing.
    From the recorded input shapes: a convolution called with a 1-D bias of its output
    channels, and a BatchNorm called on as many channels of the same batch and rank. The
    finding accounts for those convolutions; its saving is the bias additions' own time,
    where ATen makes them apart (after a cuDNN convolution), else (oneDNN adds the bias
    inside its kernel on the CPU) timed on the model (whatif.conv_bias_step) or not
    quantified (``_bias_saving``)."""
    if profile.label != "train" and not any(o.name in _BACKWARD for o in profile.ops):
        return None  # in inference BatchNorm uses its running statistics: the bias counts
    b = basis(profile)
    inclusive = "device_total_us" if b.name == "device" else "cpu_total_us"
    bns = {k for o in _outermost(profile.ops_by_shape, _BN_LEVELS) for k in [_bn_input(o)] if k}
    rows = [o for o in conv_rows(profile, shapes=True)
            if (key := _biased_conv(o)) is not None and key in bns]
    if not rows or b.total_us <= 0:
        return None
    conv_us = sum(getattr(o, inclusive) for o in rows)
    conv_share = min(conv_us / b.total_us, 1.0)
    if conv_share <= limits["share"]:
        return None
    adds = _bias_adds(profile, {k for o in rows for k in [_biased_conv(o)] if k})
    add_us = sum(getattr(o, inclusive) for o in adds)
    return Finding("conv-bias-before-bn", "low",
                   ConvBiasBeforeBn(basis=b.name, share=conv_share, threshold=limits["share"],
                                    op=rows[0].name, conv_time_us=conv_us,
                                    calls=sum(o.calls for o in rows), shapes=len(rows),
                                    bias_visible=add_us > 0, bias_time_us=add_us,
                                    bias_share=add_us / b.total_us),
                   # not the convolutions: their time stays (a dominant convolution is
                   # another finding's)
                   ops=["aten::add_"] if add_us > 0 else [])


# Convolutions' own rows on a GPU: the ATen operators whose device time is the
# convolutions' kernels (forward at the outermost level, and the backward).
_CONV_BACKWARD = ("aten::convolution_backward", *vendors.names("convolution_backward_ops"))


def _conv_device_us(profile: Profile) -> tuple[list[Op], float]:
    """The convolutions' operator rows on a GPU (forward and backward) and their device
    time, inclusive."""
    rows = conv_rows(profile) + [o for o in operators(profile) if o.name in _CONV_BACKWARD]
    return rows, sum(o.device_total_us for o in rows)


def _recurring_shapes(profile: Profile) -> bool | None:
    """Whether each convolution's input shape recurs in every profiled step (called at
    least once a step): what the auto-tuner's cache needs. None without shapes."""
    rows = conv_rows(profile, shapes=True)
    if not rows:
        return None
    b = profile.breakdown
    steps = len(b.steps_us) if b is not None and b.steps_us else max(profile.steps, 1)
    return all(o.calls >= steps for o in rows)


def _benchmark_timed(f: Finding, timed: dict[str, Any]) -> None:
    if isinstance(f.evidence, CudnnBenchmarkOff):
        f.evidence.timed_benchmark = timed.get("fix") == "cudnn-benchmark"


@dataclass(kw_only=True)
class CudnnBenchmarkOff(Evidence):
    basis: str  # "device"
    share: float  # the convolutions' share of the device time
    threshold: float
    op: str  # the longest convolution row
    conv_time_us: float
    calls: int
    shapes_known: bool  # the input shapes were recorded (and recur each step)
    timed_benchmark: bool | None = opt()  # timed with the auto-tuner on (_benchmark_timed)


_SAYS_CUDNN_BENCHMARK = {
    "steps": OVER_STEPS,
    "shapes": either("same_shapes_each_step", "shapes_not_recorded",
                     lambda v: of(CudnnBenchmarkOff)(v).shapes_known),
    "timed": when("timed_with_benchmark", lambda v: of(CudnnBenchmarkOff)(v).timed_benchmark),
}


@rule("cudnn-benchmark-off", says=_SAYS_CUDNN_BENCHMARK, evidence=CudnnBenchmarkOff,
      saving=savings.unquantified,
      whatif=WhatIf("cudnn-benchmark", notes=_benchmark_timed), share=0.20, high=0.50)
def cudnn_benchmark_off(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """On a GPU, convolutions take over ``share`` of the device time with
    ``torch.backends.cudnn.benchmark`` off (as the runner observed it:
    ``Profile.process["cudnn_benchmark"]``; unknown for an imported trace, where the
    rule does not fire), and their input shapes recur each step (where recorded: with
    shapes that change, the auto-tuner would run again for each new one). cuDNN then
    picks each convolution's algorithm by heuristics instead of timing them once. Worth:
    timed on the model with the auto-tuner on (whatif.cudnn_benchmark_step)."""
    if not profile.has_device or getattr(profile, "process", {}).get("cudnn_benchmark") \
            is not False:
        return None
    recurring = _recurring_shapes(profile)
    if recurring is False:
        return None
    rows, conv_us = _conv_device_us(profile)
    s = min(conv_us / profile.self_device_us, 1.0)
    if not rows or s <= limits["share"]:
        return None
    top = max(rows, key=lambda o: o.device_total_us)
    return Finding("cudnn-benchmark-off", severity(s, limits["high"]),
                   CudnnBenchmarkOff(basis="device", share=s, threshold=limits["share"],
                                     op=top.name, conv_time_us=conv_us,
                                     calls=sum(o.calls for o in conv_rows(profile)),
                                     shapes_known=recurring is not None),
                   ops=[o.name for o in rows])


# cuDNN's layout conversions around a convolution run in NCHW on tensor cores: "void
# cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>
# (cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", "void nhwcToNchwKernel<...>
# (int, int, int, int, float const*, float*, float, float)" (corpus traces 06, 08, 10:
# A100s, 2022-2023).
LAYOUT_KERNEL = vendors.pattern("layout_kernels", re.IGNORECASE)


def _layout_timed(f: Finding, timed: dict[str, Any]) -> None:
    if isinstance(f.evidence, ChannelsLast):
        f.evidence.timed_channels_last = timed.get("fix") == "nhwc-layout"


@dataclass(kw_only=True)
class ChannelsLast(Evidence):
    basis: str  # "device"
    share: float  # the layout conversions' share of the device time
    threshold: float
    op: str  # the longest conversion kernel
    op_time_us: float
    calls: int
    kernels: int
    timed_channels_last: bool | None = opt()  # timed in channels_last (_layout_timed)


_SAYS_CHANNELS_LAST = {
    "steps": OVER_STEPS,
    "timed": when("timed_in_channels_last",
                  lambda v: of(ChannelsLast)(v).timed_channels_last),
}


@rule("channels-last", says=_SAYS_CHANNELS_LAST, evidence=ChannelsLast, saving=savings.removed,
      whatif=WhatIf("nhwc-layout", notes=_layout_timed), share=0.03, high=0.15)
def channels_last(profile: Profile, limits: dict[str, float]) -> Finding | None:
    """On a GPU, cuDNN's layout conversion kernels (NCHW to NHWC and back) take over
    ``share`` of the device time beside convolutions: the model runs its convolutions
    in NCHW (``torch.contiguous_format``) and cuDNN's tensor-core kernels want NHWC, so
    each call converts its input and output. With the model and its inputs in
    ``torch.channels_last`` the conversions go (their time is the saving). On the CPU
    oneDNN reorders inside its convolution's own call: no sign in the profile."""
    if not profile.has_device or not conv_rows(profile):
        return None
    kernels = sorted((o for o in profile.ops if o.kind == "kernel"
                      and LAYOUT_KERNEL.search(o.name)),
                     key=lambda o: o.self_device_us, reverse=True)
    us = sum(o.self_device_us for o in kernels)
    s = min(us / profile.self_device_us, 1.0)
    if not kernels or s <= limits["share"]:
        return None
    return Finding("channels-last", severity(s, limits["high"]),
                   ChannelsLast(basis="device", share=s, threshold=limits["share"],
                                op=kernels[0].name, op_time_us=us,
                                calls=sum(o.calls for o in kernels), kernels=len(kernels)),
                   ops=[o.name for o in kernels])
