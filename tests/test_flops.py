"""reporter.analyze.flops: each formula on the inputs torch.profiler really records, against
torch.utils.flop_counter.FlopCounterMode where it counts the op, by hand otherwise."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F
from torch.profiler import profile
from torch.utils.flop_counter import FlopCounterMode

from reporter.analyze.flops import MATRIX, OTHER, cost


def recorded(fn, tmp_path) -> dict[str, list[tuple]]:
    """name -> [(dims, types, concrete)] of each call torch.profiler records in fn()."""
    with profile(record_shapes=True) as prof:
        fn()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    calls: dict[str, list[tuple]] = {}
    for e in json.loads(path.read_text())["traceEvents"]:
        if e.get("cat") == "cpu_op":
            a = e.get("args", {})
            calls.setdefault(e["name"], []).append(
                (a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs")))
    return calls


def counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def one(calls, name, first_dims=None):
    """The cost of the first call of ``name`` (whose first input has ``first_dims``)."""
    assert name in calls, sorted(calls)
    for call in calls[name]:
        if first_dims is None or call[0][0] == list(first_dims):
            return cost(name, *call)
    raise AssertionError(f"no call of {name} on {first_dims}: {calls[name]}")


def every(calls, name):
    return [cost(name, *call) for call in calls[name]]


@pytest.mark.parametrize("name, make", [
    ("aten::mm", lambda: torch.mm(torch.randn(6, 5), torch.randn(5, 7))),
    ("aten::addmm", lambda: torch.addmm(torch.randn(7), torch.randn(6, 5), torch.randn(5, 7))),
    ("aten::bmm", lambda: torch.bmm(torch.randn(3, 6, 5), torch.randn(3, 5, 7))),
    ("aten::baddbmm", lambda: torch.baddbmm(torch.randn(3, 6, 7), torch.randn(3, 6, 5),
                                            torch.randn(3, 5, 7))),
])
def test_matrix_products_match_flop_counter(name, make, tmp_path):
    calls = recorded(make, tmp_path)
    c = one(calls, name)
    assert c is not None and c.family == MATRIX and c.dtype == "fp32"
    assert c.flops == counted(make)


def test_scaled_mm_by_hand():
    c = cost("aten::_scaled_mm", [[16, 32], [32, 8], [], []],
             ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"])
    assert c.flops == 2 * 16 * 32 * 8 and c.dtype == "fp8"
    assert c.bytes == 16 * 32 + 32 * 8 + 16 * 8 * 2


def test_matmul_and_linear_broadcast(tmp_path):
    a, b = torch.randn(2, 3, 6, 5), torch.randn(5, 7)
    x, w, bias = torch.randn(4, 3, 5), torch.randn(7, 5), torch.randn(7)
    calls = recorded(lambda: (torch.matmul(a, b), F.linear(x, w, bias)), tmp_path)
    assert one(calls, "aten::matmul").flops == counted(lambda: torch.matmul(a, b))
    lin = one(calls, "aten::linear")
    assert lin.flops == counted(lambda: F.linear(x, w, bias)) == 2 * 12 * 5 * 7
    assert lin.bytes == 4 * (x.numel() + w.numel() + bias.numel() + 12 * 7)
    # A 1-D operand, as torch.matmul treats it.
    assert cost("aten::matmul", [[5], [5, 7]], ["float", "float"]).flops == 2 * 5 * 7


@pytest.mark.parametrize("dim, transposed, groups, stride, padding, dilation", [
    (1, False, 1, 1, 0, 1), (2, False, 1, 2, 1, 1), (2, False, 4, 1, 2, 2),
    (3, False, 2, 2, 1, 1), (2, True, 1, 2, 1, 1), (1, True, 2, 3, 0, 1),
])
def test_convolutions_match_flop_counter(dim, transposed, groups, stride, padding, dilation,
                                         tmp_path):
    x = torch.randn(2, 8, *([9] * dim), requires_grad=True)
    shape = (8, 12 // groups) if transposed else (12, 8 // groups)
    w = torch.randn(*shape, *([3] * dim), requires_grad=True)
    conv = getattr(F, f"conv_transpose{dim}d" if transposed else f"conv{dim}d")
    kwargs = dict(stride=stride, padding=padding, groups=groups, dilation=dilation)

    def forward():
        return conv(x, w, None, **kwargs)
    calls = recorded(forward, tmp_path)
    c = one(calls, "aten::convolution")
    assert c is not None and c.family == MATRIX
    assert c.flops == counted(forward)
    out = forward()
    assert c.bytes == 4 * (x.numel() + w.numel() + out.numel())

    def backward():
        forward().sum().backward()
    total = counted(backward)
    calls = recorded(backward, tmp_path)
    backward_flops = sum(b.flops for b in every(calls, "aten::convolution_backward"))
    if groups == 1:  # the forward, then grad_input and grad_weight
        assert backward_flops + c.flops == total
    else:  # FlopCounterMode's backward ignores groups (it counts 5x the forward at groups=4);
        # each gradient takes the forward's multiply-adds, by hand:
        assert backward_flops == 2 * c.flops


def test_conv_nd_and_padding_same(tmp_path):
    x, w = torch.randn(1, 3, 10, 10), torch.randn(4, 3, 3, 3)
    calls = recorded(lambda: F.conv2d(x, w, stride=2, padding=1), tmp_path)
    assert one(calls, "aten::conv2d").flops == counted(lambda: F.conv2d(x, w, stride=2,
                                                                         padding=1))
    calls = recorded(lambda: F.conv2d(x, w, padding="same"), tmp_path)
    assert one(calls, "aten::_convolution").flops == counted(lambda: F.conv2d(x, w,
                                                                               padding="same"))


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_and_backward(causal, tmp_path):
    q = torch.randn(2, 3, 16, 8, requires_grad=True)
    k = torch.randn(2, 3, 16, 8, requires_grad=True)
    v = torch.randn(2, 3, 16, 8, requires_grad=True)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def backward():
        forward().sum().backward()
    calls = recorded(backward, tmp_path)
    fwd = one(calls, "aten::scaled_dot_product_attention")
    inner = [n for n in calls if n.startswith("aten::_scaled_dot_product")
             and not n.endswith("_backward")]
    bwd_names = [n for n in calls if n.startswith("aten::_scaled_dot_product")
                 and n.endswith("_backward")]
    # FlopCounterMode counts SDPA only on CUDA: count the two products it is made of.
    full = counted(lambda: torch.matmul(torch.matmul(q, k.transpose(-2, -1)).softmax(-1), v))
    kept = 16 * 17 / 2 / 256 if causal else 1.0
    assert fwd.flops == pytest.approx(full * kept) and fwd.family == MATRIX
    for name in inner:
        assert one(calls, name).flops == pytest.approx(full * kept)
    # The fused CPU kernel's backward (FlopCounterMode does not count it), by hand: four
    # products of the forward's size.
    assert bwd_names, sorted(calls)
    assert one(calls, bwd_names[0]).flops == pytest.approx(2 * full * kept)
    assert fwd.bytes == 4 * 4 * q.numel()  # q, k, v read; the output written


def test_elementwise_broadcast_and_inplace(tmp_path):
    a, b = torch.randn(4, 1, 6), torch.randn(5, 1)
    calls = recorded(lambda: (a + b, a / 2.0, a.mul_(2.0), torch.relu(a)), tmp_path)
    add = one(calls, "aten::add")
    assert add.flops == 4 * 5 * 6 and add.family == OTHER
    assert add.bytes == 4 * (a.numel() + b.numel() + 4 * 5 * 6)
    mul = one(calls, "aten::mul_")  # the Python scalar comes as a 0-dim double tensor
    assert mul.flops == a.numel() and mul.bytes == 2 * 4 * a.numel() + 8
    assert one(calls, "aten::relu").bytes == 2 * 4 * a.numel()
    # a fp32 output: the double scalar does not make it 8 bytes an element
    assert one(calls, "aten::div").bytes == 2 * 4 * a.numel() + 8


def test_reductions_softmax_norms_embedding_copies(tmp_path):
    x = torch.randn(4, 8, 16)
    emb, idx = torch.randn(50, 16), torch.randint(0, 50, (4, 8))
    calls = recorded(lambda: (x.sum(dim=-1), x.mean(), x.softmax(-1),
                              F.layer_norm(x, (16,)), F.embedding(idx, emb),
                              x.to(torch.bfloat16), x.clone()), tmp_path)
    s = one(calls, "aten::sum")
    assert s.flops == x.numel() and s.bytes == 4 * (x.numel() + 4 * 8)
    assert one(calls, "aten::mean").bytes == 4 * (x.numel() + 1)
    sm = one(calls, "aten::_softmax")
    assert sm.flops == 5 * x.numel() and sm.bytes == 2 * 4 * x.numel()
    ln = one(calls, "aten::native_layer_norm")
    assert ln.flops == 8 * x.numel() and ln.bytes == 2 * 4 * x.numel()
    e = one(calls, "aten::embedding")
    assert e.flops == 0 and e.bytes == 8 * idx.numel() + 2 * idx.numel() * 16 * 4
    cast = one(calls, "aten::_to_copy", x.shape)
    assert cast.bytes == x.numel() * (4 + 2)
    assert one(calls, "aten::clone").bytes == 2 * 4 * x.numel()


def test_backward_formulas_by_hand(tmp_path):
    x = torch.randn(4, 8, 16, requires_grad=True)
    emb = torch.randn(50, 16, requires_grad=True)
    idx = torch.randint(0, 50, (4, 8))
    calls = recorded(lambda: (x.softmax(-1).sum().backward(),
                              F.layer_norm(x, (16,)).sum().backward(),
                              F.embedding(idx, emb).sum().backward()), tmp_path)
    sb = one(calls, "aten::_softmax_backward_data")
    assert sb.flops == 4 * x.numel() and sb.bytes == 3 * 4 * x.numel()
    lb = one(calls, "aten::native_layer_norm_backward")
    assert lb.flops == 16 * x.numel() and lb.bytes >= 3 * 4 * x.numel()
    eb = one(calls, "aten::embedding_dense_backward")
    assert eb.bytes == 8 * idx.numel() + 2 * 4 * 32 * 16 + 4 * 50 * 16


def test_not_modelled_is_never_guessed():
    assert cost("aten::nonzero", [[4, 4]], ["float"], ["", ""]) is None  # no formula
    assert cost("aten::mm", [[], []], ["", ""], None) is None  # no shapes recorded
    assert cost("aten::mm", [[4, 5], [6, 7]], ["float", "float"]) is None  # mismatch
    assert cost("aten::mm", [[4, 5], [5, 7]], [], None) is None  # old trace: no dtypes
    assert cost("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []],
                ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                ["", "", "", "[1, 1]", "oops", "[1, 1]", "1"]) is None
    assert cost("aten::mm", "junk", None) is None
