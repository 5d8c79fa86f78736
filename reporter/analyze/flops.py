"""FLOPs and bytes of one operator call, from what the profiler recorded of its inputs.

``record_shapes=True`` writes, for each operator call, its inputs' shapes
(``Input Dims``), types (``Input type``: a dtype for a tensor, ``Scalar``,
``ScalarList``, ``TensorList`` or "" for the others) and the values of scalar
arguments (``Concrete Inputs``). From them alone, ``cost`` returns the FLOPs
the call performs and the bytes it must read and write at its dtypes, or None
when the operator has no formula here ("not modelled": never a guess).

Matrix products, convolutions and attention count 2 FLOPs per multiply-add,
as ``torch.utils.flop_counter.FlopCounterMode`` does (tests/test_flops.py
checks each against it); attention is causal-aware, which FlopCounterMode is
not. The other families count the arithmetic per element written below each
formula (an exp or a square root is one FLOP: they are memory-bound anyway).
Bytes are each tensor input read once and each output written once; what a
kernel re-reads from its caches is not counted. No torch import.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, NamedTuple, Optional

# Input type -> (dtype, bytes per element).
DTYPES = {
    "float": ("fp32", 4), "double": ("fp64", 8), "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2), "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "long int": ("int64", 8), "long": ("int64", 8),
    "int": ("int32", 4), "short int": ("int16", 2), "short": ("int16", 2),
    "signed char": ("int8", 1), "unsigned char": ("uint8", 1), "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16),
}
# c10::ScalarType codes, as aten::_to_copy's dtype argument shows them.
SCALAR_TYPES = {0: "unsigned char", 1: "signed char", 2: "short int", 3: "int", 4: "long int",
                5: "c10::Half", 6: "float", 7: "double", 9: "c10::complex<float>",
                10: "c10::complex<double>", 11: "bool", 15: "c10::BFloat16",
                23: "c10::Float8_e5m2", 24: "c10::Float8_e4m3fn"}

# Families whose work tensor cores (or a CPU's matrix units) do.
MATRIX = "matrix"
OTHER = "other"


class Cost(NamedTuple):
    flops: float
    bytes: float
    dtype: str  # of the operands that set the pace: "fp32", "bf16", ...
    family: str  # MATRIX or OTHER


class _Call:
    """One call's recorded inputs, with helpers that say None when a value is absent."""

    __slots__ = ("dims", "types", "concrete")

    def __init__(self, dims: list[Any], types: list[Any], concrete: list[Any] | None):
        self.dims, self.types, self.concrete = dims, types, concrete or []

    def shape(self, i: int) -> Optional[list[int]]:
        """The shape of input i when it is a tensor of a known dtype."""
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] not in DTYPES:
            return None
        d = self.dims[i]
        if not isinstance(d, list) or not all(type(x) is int and x >= 0 for x in d):
            return None
        return d

    def size(self, i: int) -> int:
        return DTYPES[self.types[i]][1]

    def dtype(self, i: int) -> str:
        return DTYPES[self.types[i]][0]

    def nbytes(self, i: int) -> int:
        shape = self.shape(i)
        return _numel(shape) * self.size(i) if shape is not None else 0

    def value(self, i: int) -> Any:
        """A scalar or list argument's value: int, float, bool, a list of them, or None."""
        if i >= len(self.concrete):
            return None
        return _parse(self.concrete[i])

    def ints(self, i: int, n: int, default: int) -> list[int]:
        v = self.value(i)
        if isinstance(v, list) and v and all(type(x) is int for x in v):
            return v * n if len(v) == 1 else v
        if type(v) is int:
            return [v] * n
        return [default] * n


def _numel(shape: list[int]) -> int:
    return math.prod(shape)


_NUMBER = re.compile(r"^-?\d+(\.\d*)?(e[-+]?\d+)?$")


def _parse(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return None
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    if text.startswith("[") and text.endswith("]"):
        items = [_parse(t) for t in text[1:-1].split(",") if t.strip()]
        return items if None not in items else None
    if _NUMBER.match(text):
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    return None


def _broadcast(shapes: list[list[int]]) -> Optional[list[int]]:
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(-ndim, 0):
        sizes = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


# -- matrix products ---------------------------------------------------------------------------

def _gemm(c: _Call, a: int, b: int, extra: tuple[int, ...] = ()) -> Optional[Cost]:
    """(..., m, k) @ (..., k, n), batch dims broadcast; 1-D operands as torch.matmul treats them."""
    x, w = c.shape(a), c.shape(b)
    if not x or not w:
        return None
    x2 = [1] + x if len(x) == 1 else x
    w2 = w + [1] if len(w) == 1 else w
    batch = _broadcast([x2[:-2], w2[:-2]]) if len(x2) > 2 or len(w2) > 2 else []
    if batch is None or x2[-1] != w2[-2]:
        return None
    m, k, n = x2[-2], x2[-1], w2[-1]
    out = _numel(batch) * m * n
    size = max(c.size(a), c.size(b))
    moved = c.nbytes(a) + c.nbytes(b) + out * size + sum(c.nbytes(i) for i in extra)
    return Cost(2.0 * _numel(batch) * m * k * n, moved, c.dtype(a), MATRIX)


def _linear(c: _Call) -> Optional[Cost]:
    """x (..., k) @ w (n, k).T + b."""
    x, w = c.shape(0), c.shape(1)
    if not x or not w or len(w) != 2 or x[-1] != w[1]:
        return None
    rows, (n, k) = _numel(x[:-1]), w
    moved = c.nbytes(0) + c.nbytes(1) + c.nbytes(2) + rows * n * c.size(0)
    return Cost(2.0 * rows * k * n, moved, c.dtype(0), MATRIX)


def _scaled_mm(c: _Call) -> Optional[Cost]:
    """fp8 a (m, k) @ b (k, n), output in a wider type: bf16 assumed (2 bytes)."""
    cost = _gemm(c, 0, 1)
    if cost is None:
        return None
    a, b = c.shape(0), c.shape(1)
    assert a is not None and b is not None  # _gemm read both
    m, n = a[0], b[1]
    return cost._replace(bytes=cost.bytes - m * n * c.size(0) + m * n * 2)


# -- convolutions ------------------------------------------------------------------------------

def _conv_out(size: list[int], kernel: list[int], stride: list[int], padding: list[int],
              dilation: list[int], transposed: bool, out_pad: list[int]) -> list[int]:
    if transposed:
        return [(i - 1) * s - 2 * p + d * (k - 1) + o + 1
                for i, k, s, p, d, o in zip(size, kernel, stride, padding, dilation, out_pad)]
    return [(i + 2 * p - d * (k - 1) - 1) // s + 1
            for i, k, s, p, d in zip(size, kernel, stride, padding, dilation)]


def _conv_flops(x: list[int], w: list[int], out: list[int], transposed: bool) -> float:
    """FlopCounterMode's conv_flop_count: 2 x batch x prod(weight) x the spatial size of the
    output ``out`` (N, C, *spatial) (of the input, for a transposed convolution)."""
    spatial = x[2:] if transposed else out[2:]
    return 2.0 * x[0] * _numel(w) * _numel(spatial)


class _ConvArgs(NamedTuple):
    x: list[int]
    w: list[int]
    out: list[int]  # output shape (N, C, *spatial)
    transposed: bool


def _conv_args(c: _Call, stride_i: int, pad_i: int, dil_i: int, transposed: bool | int,
               out_pad_i: int | None, groups_i: int, x_i: int = 0, w_i: int = 1
               ) -> Optional[_ConvArgs]:
    x, w = c.shape(x_i), c.shape(w_i)
    if not x or not w or len(x) != len(w) or len(x) < 3:
        return None
    n = len(x) - 2
    if isinstance(transposed, bool):
        is_transposed = transposed
    else:  # an argument index
        t = c.value(transposed)
        if not isinstance(t, bool):
            return None
        is_transposed = t
    pad = c.value(pad_i)
    if isinstance(pad, str) or (pad is None and pad_i < len(c.concrete) and c.concrete[pad_i]):
        return None  # padding="same"/"valid": not a number we can read
    stride, padding = c.ints(stride_i, n, 1), c.ints(pad_i, n, 0)
    dilation = c.ints(dil_i, n, 1)
    out_pad = c.ints(out_pad_i, n, 0) if out_pad_i is not None else [0] * n
    groups = c.value(groups_i)
    groups = groups if type(groups) is int and groups > 0 else 1
    spatial = _conv_out(x[2:], w[2:], stride, padding, dilation, is_transposed, out_pad)
    if any(s <= 0 for s in spatial):
        return None
    channels = w[1] * groups if is_transposed else w[0]
    return _ConvArgs(x, w, [x[0], channels] + spatial, is_transposed)


def _conv_cost(c: _Call, a: Optional[_ConvArgs]) -> Optional[Cost]:
    if a is None:
        return None
    size = c.size(0)
    moved = c.nbytes(0) + c.nbytes(1) + c.nbytes(2) + _numel(a.out) * size
    return Cost(_conv_flops(a.x, a.w, a.out, a.transposed), moved, c.dtype(0), MATRIX)


def _convolution(c: _Call) -> Optional[Cost]:
    """aten::convolution / _convolution (input, weight, bias, stride, padding, dilation,
    transposed, output_padding, groups, ...)."""
    return _conv_cost(c, _conv_args(c, 3, 4, 5, 6, 7, 8))


def _conv_nd(c: _Call) -> Optional[Cost]:
    """aten::conv1d/2d/3d (input, weight, bias, stride, padding, dilation, groups)."""
    return _conv_cost(c, _conv_args(c, 3, 4, 5, False, None, 6))


def _conv_transpose_nd(c: _Call) -> Optional[Cost]:
    """aten::conv_transpose1d/2d/3d (input, weight, bias, stride, padding, output_padding,
    groups, dilation)."""
    return _conv_cost(c, _conv_args(c, 3, 4, 7, True, 5, 6))


def _convolution_backward(c: _Call) -> Optional[Cost]:
    """(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): grad_input and grad_weight each cost as much as
    the forward (FlopCounterMode's conv_backward_flop)."""
    a = _conv_args(c, 4, 5, 6, 7, 8, 9, x_i=1, w_i=2)
    if a is None or c.shape(0) is None:
        return None
    mask = c.value(10)
    mask = mask if isinstance(mask, list) and len(mask) == 3 else [True, True, True]
    forward = _conv_flops(a.x, a.w, a.out, a.transposed)
    flops = forward * (int(bool(mask[0])) + int(bool(mask[1])))
    moved = (c.nbytes(0) + c.nbytes(1) + c.nbytes(2)  # read
             + (c.nbytes(1) if mask[0] else 0) + (c.nbytes(2) if mask[1] else 0)
             + (a.out[1] * c.size(0) if mask[2] else 0))  # written
    return Cost(flops, moved, c.dtype(0), MATRIX)


# -- attention ---------------------------------------------------------------------------------

def _attention(q_i: int, k_i: int, v_i: int, causal_i: int | None, backward: bool,
               out_i: int | None = None) -> Callable[[_Call], Optional[Cost]]:
    """q (B, H, Lq, E), k (B, H, Lk, E), v (B, H, Lk, Ev): the forward is two batched
    products (q k^T, then p v), the backward four (FlopCounterMode's sdpa counts); a
    causal mask computes only the unmasked part."""
    def cost(c: _Call) -> Optional[Cost]:
        q, k, v = c.shape(q_i), c.shape(k_i), c.shape(v_i)
        if not q or not k or not v or len(q) < 3 or len(k) != len(q) or len(v) != len(q):
            return None
        batch, lq, e = _numel(q[:-2]), q[-2], q[-1]
        lk, ev = k[-2], v[-1]
        flops = 2.0 * batch * lq * lk * (e + ev)
        if backward:
            flops *= 2
        if causal_i is not None and c.value(causal_i) is True:
            # The kept part of the lq x lk score matrix (the mask aligned top-left).
            # Row i keeps min(i + 1, lk) keys.
            kept = (lq * (lq + 1) / 2 if lq <= lk
                    else lk * (lk + 1) / 2 + (lq - lk) * lk)
            flops *= kept / (lq * lk)
        out = batch * lq * ev * c.size(q_i)
        moved = c.nbytes(q_i) + c.nbytes(k_i) + c.nbytes(v_i)
        if backward:  # reads grad_out and out as well; writes three gradients
            moved += 2 * out + c.nbytes(q_i) + c.nbytes(k_i) + c.nbytes(v_i)
        else:
            moved += out
        return Cost(flops, moved, c.dtype(q_i), MATRIX)
    return cost


# -- element-wise, reductions, normalisation ---------------------------------------------------

def _tensors(c: _Call) -> list[int]:
    return [i for i in range(len(c.dims)) if c.shape(i) is not None]


def _elementwise(flops_per: float = 1.0, inplace: bool = False
                 ) -> Callable[[_Call], Optional[Cost]]:
    """The inputs broadcast to the output; each input read, the output written (in place:
    the first input is the output)."""
    def cost(c: _Call) -> Optional[Cost]:
        idx = _tensors(c)
        if not idx:
            return None
        out = _broadcast([s for i in idx if (s := c.shape(i)) is not None])
        if out is None:
            return None
        # The output's element size: a 0-dim input (a Python scalar, recorded as a double)
        # does not widen a tensor with dimensions, as torch's type promotion has it.
        sized = [i for i in idx if c.shape(i)] or idx
        size = max(c.size(i) for i in sized)
        numel = _numel(out)
        moved = sum(c.nbytes(i) for i in idx) + numel * (c.size(idx[0]) if inplace else size)
        return Cost(flops_per * numel, moved, c.dtype(idx[0]), OTHER)
    return cost


def _fill(c: _Call) -> Optional[Cost]:
    """fill_/zero_: the tensor written, nothing read."""
    if c.shape(0) is None:
        return None
    return Cost(0.0, c.nbytes(0), c.dtype(0), OTHER)


def _reduction(c: _Call) -> Optional[Cost]:
    """sum/mean/amax/...(input, dim, keepdim, ...): one FLOP per input element; the output
    keeps the dimensions not reduced."""
    x = c.shape(0)
    if x is None:
        return None
    dims = c.value(1)
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = [dims]
    if isinstance(dims, list) and dims and x and all(type(d) is int for d in dims):
        kept = [s for i, s in enumerate(x) if i not in {d % len(x) for d in dims}]
        out = _numel(kept)
    else:
        out = 1
    return Cost(float(_numel(x)), c.nbytes(0) + out * c.size(0), c.dtype(0), OTHER)


def _per_element(flops_per: float, reads: int = 1, writes: int = 1, params: tuple[int, ...] = ()
                 ) -> Callable[[_Call], Optional[Cost]]:
    """An op over its first input's elements: ``reads`` and ``writes`` tensors of that
    size, plus the parameter inputs ``params`` (a norm's weight and bias)."""
    def cost(c: _Call) -> Optional[Cost]:
        x = c.shape(0)
        if x is None:
            return None
        numel = _numel(x)
        moved = numel * c.size(0) * (reads + writes) + sum(c.nbytes(i) for i in params)
        return Cost(flops_per * numel, moved, c.dtype(0), OTHER)
    return cost


def _embedding(c: _Call) -> Optional[Cost]:
    """(weight (V, D), indices): the indices read, one row read and written per index."""
    w, idx = c.shape(0), c.shape(1)
    if not w or idx is None or len(w) != 2:
        return None
    rows = _numel(idx) * w[1] * c.size(0)
    return Cost(0.0, c.nbytes(1) + 2 * rows, c.dtype(0), OTHER)


def _embedding_backward(c: _Call) -> Optional[Cost]:
    """embedding_dense_backward (grad_output (..., D), indices, num_weights, ...): the
    gradient rows read and added into a zeroed (V, D) weight gradient."""
    g, idx, v = c.shape(0), c.shape(1), c.value(2)
    if not g or idx is None or type(v) is not int:
        return None
    numel = _numel(g)
    return Cost(float(numel), c.nbytes(1) + 2 * numel * c.size(0) + v * g[-1] * c.size(0),
                c.dtype(0), OTHER)


def _copy(c: _Call) -> Optional[Cost]:
    """copy_(dst, src): src read, dst written, at their own dtypes."""
    dst, src = c.shape(0), c.shape(1)
    if dst is None or src is None:
        return None
    return Cost(0.0, c.nbytes(1) + _numel(dst) * c.size(0), c.dtype(0), OTHER)


def _to_copy(c: _Call) -> Optional[Cost]:
    """_to_copy(self, dtype, ...): read at its dtype, written at the new one."""
    x = c.shape(0)
    if x is None:
        return None
    code = c.value(1)
    to = SCALAR_TYPES.get(code) if type(code) is int else None
    out = DTYPES[to][1] if to else c.size(0)
    return Cost(0.0, c.nbytes(0) + _numel(x) * out, c.dtype(0), OTHER)


def _clone(c: _Call) -> Optional[Cost]:
    x = c.shape(0)
    return Cost(0.0, 2 * c.nbytes(0), c.dtype(0), OTHER) if x is not None else None


_UNARY = ("relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "neg",
          "abs", "reciprocal", "sin", "cos", "erf", "hardtanh", "leaky_relu", "elu",
          "hardswish", "hardsigmoid", "softplus", "mish", "clamp", "clamp_min", "clamp_max",
          "pow", "square", "sign", "floor", "ceil", "round", "log1p", "expm1", "logical_not",
          "bitwise_not", "nan_to_num", "threshold")
_BINARY = ("add", "sub", "mul", "div", "rsub", "maximum", "minimum", "eq", "ne", "lt", "le",
           "gt", "ge", "where", "masked_fill", "addcmul", "addcdiv", "lerp", "remainder",
           "fmod", "bitwise_and", "bitwise_or", "logical_and", "logical_or", "atan2",
           "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
           "tanh_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward",
           "hardswish_backward", "mish_backward", "softplus_backward")
_REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm",
               "var", "std", "argmax", "argmin", "logsumexp", "any", "all")

FORMULAS: dict[str, Callable[[_Call], Optional[Cost]]] = {
    "aten::mm": lambda c: _gemm(c, 0, 1),
    "aten::addmm": lambda c: _gemm(c, 1, 2, extra=(0,)),
    "aten::bmm": lambda c: _gemm(c, 0, 1),
    "aten::baddbmm": lambda c: _gemm(c, 1, 2, extra=(0,)),
    "aten::matmul": lambda c: _gemm(c, 0, 1),
    "aten::mv": lambda c: _gemm(c, 0, 1),
    "aten::addmv": lambda c: _gemm(c, 1, 2, extra=(0,)),
    "aten::linear": _linear,
    "aten::_scaled_mm": _scaled_mm,
    "aten::convolution": _convolution,
    "aten::_convolution": _convolution,
    "aten::conv1d": _conv_nd, "aten::conv2d": _conv_nd, "aten::conv3d": _conv_nd,
    "aten::conv_transpose1d": _conv_transpose_nd, "aten::conv_transpose2d": _conv_transpose_nd,
    "aten::conv_transpose3d": _conv_transpose_nd,
    "aten::convolution_backward": _convolution_backward,
    # scaled_dot_product_attention and its kernels: (q, k, v, ..., is_causal at the index).
    "aten::scaled_dot_product_attention": _attention(0, 1, 2, 5, False),
    "aten::_scaled_dot_product_flash_attention": _attention(0, 1, 2, 4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _attention(0, 1, 2, 4, False),
    "aten::_scaled_dot_product_efficient_attention": _attention(0, 1, 2, 6, False),
    "aten::_scaled_dot_product_cudnn_attention": _attention(0, 1, 2, 6, False),
    # (Their _flash_attention_* and _efficient_attention_* kernels take (B, L, H, E): the
    # operators above, which call them, carry the cost.) Backward: (grad_out, q, k, v, ...).
    "aten::_scaled_dot_product_flash_attention_backward": _attention(1, 2, 3, 11, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _attention(1, 2, 3, 7, True),
    "aten::_scaled_dot_product_efficient_attention_backward": _attention(1, 2, 3, 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _attention(1, 2, 3, 14, True),
    # Softmax: max, subtract, exp, sum, divide per element; backward: a product, a sum,
    # a subtract and a product (reads grad and output).
    "aten::_softmax": _per_element(5), "aten::softmax": _per_element(5),
    "aten::_log_softmax": _per_element(5), "aten::log_softmax": _per_element(5),
    "aten::_softmax_backward_data": _per_element(4, reads=2),
    "aten::_log_softmax_backward_data": _per_element(4, reads=2),
    # Norms: mean, variance, normalise, scale and shift (about 8 per element; RMS about 4);
    # backward about twice that, reading grad and input.
    "aten::native_layer_norm": _per_element(8, params=(2, 3)),
    "aten::layer_norm": _per_element(8, params=(2, 3)),
    "aten::native_layer_norm_backward": _per_element(16, reads=2, params=(5,)),
    "aten::rms_norm": _per_element(4, params=(2,)),
    "aten::_fused_rms_norm": _per_element(4, params=(2,)),
    "aten::native_batch_norm": _per_element(8, params=(1, 2, 3, 4)),
    "aten::_native_batch_norm_legit": _per_element(8, params=(1, 2, 3, 4)),
    "aten::_native_batch_norm_legit_no_training": _per_element(4, params=(1, 2, 3, 4)),
    "aten::cudnn_batch_norm": _per_element(8, params=(1, 2, 3, 4)),
    "aten::native_batch_norm_backward": _per_element(16, reads=2, params=(2,)),
    "aten::cudnn_batch_norm_backward": _per_element(16, reads=2, params=(2,)),
    "aten::group_norm": _per_element(8, params=(2, 3)),
    "aten::native_group_norm": _per_element(8, params=(1, 2)),
    "aten::embedding": _embedding,
    "aten::embedding_dense_backward": _embedding_backward,
    "aten::copy_": _copy,
    "aten::_to_copy": _to_copy,
    "aten::clone": _clone,
    "aten::fill_": _fill, "aten::zero_": _fill,
    "aten::native_dropout": _per_element(2, writes=2),  # the output and the mask
    "aten::dropout": _per_element(2, writes=2),
}
for _name in _UNARY + _BINARY:
    FORMULAS.setdefault(f"aten::{_name}", _elementwise())
    FORMULAS.setdefault(f"aten::{_name}_", _elementwise(inplace=True))
for _name in _REDUCTIONS:
    FORMULAS.setdefault(f"aten::{_name}", _reduction)
del _name


def modelled(name: str) -> bool:
    return name in FORMULAS


def cost(name: str, dims: Any, types: Any, concrete: Any = None) -> Optional[Cost]:
    """FLOPs and bytes of one call of ``name``, or None when not modelled or the recorded
    inputs do not say enough (no shapes, no dtypes)."""
    formula = FORMULAS.get(name)
    if formula is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    try:
        result = formula(_Call(dims, types, concrete if isinstance(concrete, list) else None))
    except (TypeError, ValueError, IndexError, KeyError, AttributeError):
        return None  # inputs of an unexpected shape: a version we do not know
    if result is None or not (math.isfinite(result.flops) and math.isfinite(result.bytes)):
        return None
    return result
