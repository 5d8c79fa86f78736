"""The what-ifs read the sequence of calls the runner's trace recorded (issue #27 item 2,
cuda review N5, N6, N16): the blow-up only where a broadcast multiply's output is what the
next call, a sum, reduces; attention as the model computed it (its dtype, its mask);
matrix products already in bf16 left alone; autocast entered inside ``forward``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.profiler import profile

from reporter.analyze.shapes import attention_pattern, blowup_chains, recorded_autocast
from reporter.collect import whatif
from reporter.collect.targets.bloat import bloated_mixing
from reporter.ingest.traces import host_calls, read_trace


def traced(fn, folder: Path, name: str = "trace.json", steps: int = 2):
    """``fn`` run ``steps`` times under the profiler as the runner records it (shapes, a
    Chrome trace): the Profile the runner reads back and the trace's calls."""
    with profile(record_shapes=True) as prof:
        for _ in range(steps):
            fn()
    path = folder / name
    prof.export_chrome_trace(str(path))
    return read_trace(path, shapes=True), host_calls(path), path


def _bloat(b=4, t=64, d=64, extra=None):
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, t, d, requires_grad=True) for _ in range(3))

    def step():
        out = bloated_mixing(q, k, v)
        if extra is not None:
            out = out + extra(q)
        out.sum().backward()
    return step


def test_the_blowup_chains_are_the_recorded_mul_then_sum(tmp_path):
    """transformer-bloat's two pairwise products: (q expanded) x (k repeated) then sum, and
    (weights unsqueezed) x (v repeated, permuted, made contiguous) then sum; each with the
    copies that materialised its operands and the matrix product that computes it."""
    prof, calls, _ = traced(_bloat(), tmp_path)
    chains = blowup_chains(calls)
    assert len(chains) == 4  # two per step
    got = {(tuple(c.out), c.key, tuple(calls[i].name for i in c.copies)) for c in chains}
    assert got == {((4, 64, 64, 64), (4, 64, 64, 64), ("aten::repeat",)),
                   ((4, 64, 64, 64), (4, 64, 64, 64), ("aten::repeat", "aten::contiguous"))}
    first = min(chains, key=lambda c: c.mul)
    assert 0 in first.a[1]  # q.unsqueeze(2).expand(...): a broadcast view, stride 0
    assert calls[first.sum].name == "aten::sum" and first.sum > first.mul


def test_the_blowup_what_if_times_the_recorded_chain(tmp_path, monkeypatch):
    """The "before" is the recorded time of the chains' own mul and sum calls and of the
    copies that made their operands; the mul is timed on operands laid out as recorded (the
    expanded one broadcasts, stride 0: N6), not on two materialised tensors."""
    prof, calls, _ = traced(_bloat(), tmp_path)
    seen = []
    real = whatif._pairwise

    def pairwise(a, b, train=False):
        seen.append((a.stride(), b.stride()))
        return real(a, b, train)
    monkeypatch.setattr(whatif.products, "_pairwise", pairwise)  # where blowup_matmul reads it
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a loaded machine wait on each other's barrier
    try:
        timed = whatif.blowup_matmul(prof, "cpu", 2, calls)
        trained = whatif.blowup_matmul(prof, "cpu", 2, calls, train=True)
    finally:
        torch.set_num_threads(threads)
    assert timed is not None and 0 < timed["after_ms"] < timed["before_ms"]
    assert any(0 in a or 0 in b for a, b in seen)  # the broadcast operand stayed a view
    chains = blowup_chains(calls)
    ids = [i for c in chains for i in (c.mul, c.sum)] + sorted(
        {i for c in chains for i in c.copies})
    expect = sum(calls[i].end - calls[i].start for i in ids)  # the CPU: each call's time
    assert timed["before_ms"] == pytest.approx(expect / 2 / 1e3)
    # in training the chains' backward goes too (MulBackward0, SumBackward1, and the
    # RepeatBackward0 and ExpandBackward0 sums that made the operands' gradients)
    from reporter.analyze.shapes import backward_nodes

    nodes = backward_nodes(calls, [i for c in chains for i in (c.mul, c.sum, *c.producers)])
    names = {calls[i].name.split(": ")[1] for i in nodes}
    assert {"MulBackward0", "SumBackward1", "RepeatBackward0", "ExpandBackward0"} <= names
    assert trained["before_ms"] == pytest.approx(
        (expect + sum(calls[i].end - calls[i].start for i in nodes)) / 2 / 1e3)
    assert trained["after_ms"] > 0  # its speed-up: timed, and a busy machine's to judge
    # without the recorded calls nothing is claimed (the aggregated shapes alone matched any
    # mul and any sum)
    assert whatif.blowup_matmul(prof, "cpu", 2, None) is None


def test_a_repeat_of_something_else_is_not_the_blowups(tmp_path):
    """cuda review N6: a GQA model's repeat_interleave of its key heads is not promised to
    the blow-up's fix."""
    def gqa(q):
        return q.unsqueeze(2).repeat_interleave(2, dim=2).mean(2)
    plain, plain_calls, _ = traced(_bloat(), tmp_path, "a.json")
    prof, calls, _ = traced(_bloat(extra=gqa), tmp_path, "b.json")
    assert any(c.name == "aten::repeat_interleave" for c in calls)
    for chain in blowup_chains(calls):
        assert all(calls[i].name != "aten::repeat_interleave" for i in chain.copies)


def _scan(b=2, length=64, d=64, n=16):
    """A Mamba-like selective scan written with broadcasts: the discretised B times u is a
    broadcast multiply [b, l, d, 1] x [b, l, 1, n]; the output reads the states through
    (h * C).sum(-1), where h holds the whole [b, l, d, n] already."""
    torch.manual_seed(0)
    delta = torch.rand(b, length, d, requires_grad=True)
    bmat = torch.randn(b, length, n, requires_grad=True)
    cmat = torch.randn(b, length, n, requires_grad=True)
    u = torch.randn(b, length, d, requires_grad=True)
    a = -torch.rand(d, n)

    def step():
        da = torch.exp(delta.unsqueeze(-1) * a)                       # [b, l, d, n]
        dbu = delta.unsqueeze(-1) * bmat.unsqueeze(2) * u.unsqueeze(-1)  # [b, l, d, n]
        h = torch.zeros(b, d, n)
        states = []
        for i in range(length):
            h = da[:, i] * h + dbu[:, i]
            states.append(h)
        hs = torch.stack(states, 1)                                   # [b, l, d, n]
        y = (hs * cmat.unsqueeze(2)).sum(-1)                          # [b, l, d]
        y.sum().backward()
    return step


def test_a_scan_is_not_a_blowup(tmp_path):
    """#27: on a Mamba-like scan the shapes alone matched (a broadcast multiply makes a
    [b, l, d, n] tensor, and a sum reduces one), and the what-if "measured" a saving from a
    rewrite that was slower. The chain is not there: the broadcast multiply's output is not
    what the sum reads, and the multiply the sum reads has an operand that holds the whole
    output (a matrix product would not compute less)."""
    from reporter.analyze.shapes import blowup_shapes

    prof, calls, _ = traced(_scan(), tmp_path)
    assert blowup_shapes(prof)  # what the what-if used to accept
    assert blowup_chains(calls) == []
    assert whatif.blowup_matmul(prof, "cpu", 2, calls) is None


def _attention_model(causal: bool, dtype=torch.float32, b=2, h=4, t=64, e=16):
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, t, e, dtype=dtype) for _ in range(3))
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)

    def step():
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(e)
        if causal:
            s = s.masked_fill(mask, float("-inf"))
        torch.matmul(torch.softmax(s, -1), v)
    return step


def test_attention_is_timed_as_recorded_causal_and_in_its_dtype(tmp_path, monkeypatch):
    """cuda review N5: the "before" is the model's pattern (its mask, in the recorded dtype),
    the "after" SDPA with is_causal where that mask is causal, both timed alike."""
    from torch.nn import functional as F

    prof, calls, _ = traced(_attention_model(True, torch.bfloat16), tmp_path)
    pattern = attention_pattern(calls, [2, 4, 64, 64])
    assert pattern == {"dtype": "bf16", "mask": [1, 1, 64, 64], "boolean": True,
                       "causal": True}
    asked, filled = [], []
    real_sdpa, real_fill = F.scaled_dot_product_attention, torch.Tensor.masked_fill

    def sdpa(q, k, v, **kw):
        asked.append((q.dtype, kw.get("is_causal"), kw.get("attn_mask")))
        return real_sdpa(q, k, v, **kw)

    def fill(self, *a, **kw):
        filled.append(self.dtype)
        return real_fill(self, *a, **kw)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(torch.Tensor, "masked_fill", fill)
    got = whatif.attention(prof, "cpu", False, 2, None, calls)
    assert got is not None and got["mask"] == "causal" and got["dtype"] == "bf16"
    assert asked and all(a == (torch.bfloat16, True, None) for a in asked)
    assert filled and set(filled) == {torch.bfloat16}
    # without a mask: none in either
    asked.clear()
    filled.clear()
    prof, calls, _ = traced(_attention_model(False), tmp_path, "plain.json")
    got = whatif.attention(prof, "cpu", False, 2, None, calls)
    assert got["mask"] is None and got["dtype"] == "fp32" and not filled
    assert all(a == (torch.float32, False, None) for a in asked)


def test_the_attention_cap_is_the_devices_free_memory(tmp_path):
    """cuda review N5: on a GPU the operands' cap was half the host's free memory; it is the
    device's, through the seam."""
    from fake_cuda import fake_cuda

    prof, calls, _ = traced(_attention_model(False), tmp_path)
    with fake_cuda(free_memory=1 << 30) as gpu:
        assert whatif.attention(prof, "cuda", False, 2, None, calls) is not None
        assert "free_memory" in gpu.log
    with fake_cuda(free_memory=64 << 10):
        with pytest.raises(whatif.Skipped, match="over the cap of 32,768"):
            whatif.attention(prof, "cuda", False, 2, None, calls)


def test_products_already_in_bf16_are_not_converted(tmp_path):
    """cuda review N5: the fp32->bf16 ratio applied to every product, those that ran in bf16
    already included. One Linear runs in fp32, another under autocast: only the first is
    timed, and the second's time is the same before and after."""
    torch.manual_seed(0)
    fp32, low = torch.nn.Linear(64, 64), torch.nn.Linear(96, 96)
    x, y = torch.randn(32, 64), torch.randn(48, 96)

    def step():
        fp32(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low(y)
    prof, calls, _ = traced(step, tmp_path)
    reduced = whatif.reduced_rows(prof, calls)
    assert {name for name, _ in reduced} == {"aten::addmm"} and len(reduced) == 1
    shapes, total = whatif.gemm_shapes(prof, reduced)
    assert len(shapes) == 1 and shapes[0][1] == [32, 64]  # the fp32 product alone
    kept = sum(whatif._gemm_time_us(o) for o in prof.ops_by_shape
               if (o.name, o.input_shapes) in reduced) / 2 / 1e3
    got = whatif.gemm_precision(prof, "cpu", 2, calls)
    assert got["shapes"] == 1
    assert got["before_ms"] == pytest.approx(total / 2 / 1e3 + kept)
    assert got["after_ms"] > kept and got["tf32_ms"] > kept


class _SelfCast(torch.nn.Module):
    """A model that enters autocast itself, inside forward."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.b(torch.relu(self.a(x))).float()


def test_autocast_entered_inside_forward_is_seen(tmp_path):
    """cuda review N16: a target that autocasts inside forward was reported "autocast off",
    and its replacements were timed in fp32."""
    model, x = _SelfCast(), torch.randn(8, 16)
    prof, calls, _ = traced(lambda: model(x), tmp_path)
    assert recorded_autocast(calls) == "bf16"
    plain = torch.nn.Linear(16, 4)
    assert recorded_autocast(traced(lambda: plain(x), tmp_path, "p.json")[1]) is None
    ctx = whatif._autocast(whatif_device(), None, calls)
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16


def whatif_device():
    from reporter.collect import device as devices

    return devices.get("cpu")


def test_a_gpu_run_records_the_autocast_its_model_entered(tmp_path):
    """N16 through the seam: profile_target with device=cuda records the autocast the
    model entered in its forward (the target declares none)."""
    from fake_cuda import fake_cuda

    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import Target

    def build(device="cpu", preset="tiny"):
        model = _SelfCast()
        return Target(model=model, batches=[(torch.randn(8, 16), torch.randn(8, 4))],
                      batch_size=8,
                      loss=lambda out, b: torch.nn.functional.mse_loss(out, b[1]),
                      optimizer=torch.optim.SGD(model.parameters(), lr=0.01))
    opts = RunOptions(device="cuda", preset="tiny", windows=2, window_s=0.005,
                      time_budget_s=0.05, profile_steps=1, max_profile_steps=1,
                      warmup_steps=1)
    with fake_cuda():
        run = profile_target("selfcast", build, opts, tmp_path)
    assert [s.precision["autocast"] for s in run.sections] == ["bf16"] * len(run.sections)


def test_a_long_step_is_timed_in_windows_of_one_step():
    """cuda review N15: windows of at least three steps whatever the budget: a step of
    seconds (the large cnn) took 5 x 3 steps per mode."""
    import time

    from reporter.collect.runner import LONG_STEP_BUDGETS, RunOptions, window_steps

    opts = RunOptions()
    slow = lambda: time.sleep(0.03)  # noqa: E731
    assert window_steps(slow, "cpu", opts, budget_s=0.03 * LONG_STEP_BUDGETS / 2) == 1
    assert window_steps(slow, "cpu", opts, budget_s=10.0) >= 3
    assert window_steps(slow, "cpu", opts) >= 3  # no budget given: as before


def test_the_runner_gives_the_what_ifs_the_sections_trace(tmp_path, monkeypatch):
    """The calls come from the Chrome trace the runner wrote for the section: it is handed
    to measure (as a ``Recorded``, read once for both timings) while it is still in the
    scratch folder."""
    import reporter.collect.whatif
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    seen = []

    def measure(section, rules, device, optimizer=None, skipped=None, trace=None, *more,
                **kw):
        trace = getattr(trace, "trace", trace)  # a Recorded's path
        seen.append((section.trace, trace, trace is not None and trace.is_file()))
        return {}
    monkeypatch.setattr(reporter.collect.whatif, "measure", measure)
    monkeypatch.setattr(reporter.collect.whatif, "timeable", lambda f: ["elementwise-blowup"])
    spec, builder = resolve("transformer-bloat")
    profile_target(spec, builder, RunOptions(device="cpu", preset="tiny", windows=2,
                                             time_budget_s=0.1, warmup_steps=1), tmp_path)
    assert seen and all(t is not None and t.name == name and exists
                        for name, t, exists in seen)


def test_a_sections_trace_is_read_once_for_both_timings(tmp_path, monkeypatch):
    """Each replacement is timed twice (runner._whatif_again); the section's trace, which
    can be large, is read for the first timing and kept for the second."""
    import reporter.collect.whatif
    import reporter.ingest.traces
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    read = []
    real = reporter.ingest.traces.host_calls

    def host_calls(path, *args, **kwargs):
        read.append(Path(path).name)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(reporter.ingest.traces, "host_calls", host_calls)
    monkeypatch.setattr(reporter.collect.whatif, "timeable", lambda f: ["elementwise-blowup"])
    spec, builder = resolve("transformer-bloat")
    run = profile_target(spec, builder, RunOptions(device="cpu", preset="tiny", windows=2,
                                                   time_budget_s=0.1, warmup_steps=1),
                         tmp_path)
    assert read and len(read) == len(set(read)), read
    assert run.sections


def test_the_blowup_on_a_gpu_takes_device_time_and_the_devices_memory(tmp_path):
    """Through the seam: on a GPU profile each chain call's time is its (name, shapes) row's
    device time over its calls, a backward node's that of the operators inside it; the
    timing runs between the device's events; the operands are capped by its free memory."""
    from fake_cuda import fake_cuda

    from reporter.analyze.shapes import backward_nodes
    from reporter.analyze.timeline import shape_key

    prof, calls, _ = traced(_bloat(), tmp_path)
    prof.device_type, prof.self_device_us = "cuda", 1.0
    for i, row in enumerate(prof.ops_by_shape):
        row.device_total_us = 10.0 * (i + 1)  # made-up kernel times, distinct per row
    rows = {(o.name, o.input_shapes): o for o in prof.ops_by_shape}

    def device_us(i):
        return rows[(calls[i].name, shape_key(calls[i].dims))].device_total_us / rows[
            (calls[i].name, shape_key(calls[i].dims))].calls
    chains = blowup_chains(calls)
    forward = [i for c in chains for i in (c.mul, c.sum)]
    nodes = backward_nodes(calls, forward)
    inside = [j for j, c in enumerate(calls) if c.parent in set(nodes) and c.op]
    assert inside
    assert whatif._recorded_us(prof, calls, forward + nodes) == pytest.approx(
        sum(device_us(i) for i in forward + inside))
    with fake_cuda() as gpu:
        got = whatif.blowup_matmul(prof, "cuda", 2, calls, train=True)
    assert got is not None and "event.record" in gpu.log and "free_memory" in gpu.log
    with fake_cuda(free_memory=1 << 20):  # 0.5 MiB for 2 x 4 MiB blown-up tensors
        assert whatif.blowup_matmul(prof, "cuda", 2, calls) is None


def test_an_operand_keeps_its_recorded_layout():
    """A permuted operand (strides that are neither dense nor a broadcast) is a strided view
    with the recorded strides; an expanded one a broadcast of a smaller tensor."""
    gen = torch.Generator().manual_seed(0)
    permuted = whatif._operand_like([2, 3, 4], [12, 1, 3], torch.float32, gen, "cpu", True)
    assert permuted.shape == (2, 3, 4) and permuted.stride() == (12, 1, 3)
    expanded = whatif._operand_like([2, 3, 4], [4, 0, 1], torch.float32, gen, "cpu")
    assert expanded.stride() == (4, 0, 1)
    dense = whatif._operand_like([2, 3, 4], None, torch.bfloat16, gen, "cpu")
    assert dense.is_contiguous() and dense.dtype == torch.bfloat16


def test_an_added_mask_is_timed_added_in_both(tmp_path, monkeypatch):
    """An additive (float) mask on the scores is added in the "before" and given to SDPA as
    its attn_mask in the "after"."""
    from torch.nn import functional as F

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
    bias = torch.zeros(2, 1, 1, 32)

    def step():
        s = torch.matmul(q, k.transpose(-2, -1)) / 4.0 + bias
        torch.matmul(torch.softmax(s, -1), v)
    prof, calls, _ = traced(step, tmp_path)
    assert attention_pattern(calls, [2, 4, 32, 32])["mask"] == [2, 1, 1, 32]
    asked = []
    real = F.scaled_dot_product_attention

    def sdpa(q, k, v, **kw):
        asked.append(kw.get("attn_mask"))
        return real(q, k, v, **kw)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    got = whatif.attention(prof, "cpu", False, 2, None, calls)
    assert got["mask"] == "added"
    assert asked and all(m is not None and m.shape == (2, 1, 1, 32) for m in asked)


def test_the_blowups_two_variants_are_timed_in_turn(tmp_path, monkeypatch):
    """The pairwise chain and its matrix product are timed in turn (whatif._medians_s),
    not one after the other: a burst of other work while the product alone was timed once
    made it slower than the chain, and transformer-bloat's blow-up "not faster" (2026-11-29,
    the test suite beside a benchmark). The product's share of the chain's time is what
    scales the recorded chain."""
    prof, calls, _ = traced(_bloat(), tmp_path)
    given: list[int] = []
    product_s = [1e-3]

    def in_turn(fns, dev, budget_s):
        given.append(len(fns))
        for fn in fns:
            fn()
        return [2e-3, product_s[0]]
    monkeypatch.setattr(whatif.products, "_medians_s", in_turn)
    monkeypatch.setattr(whatif.products, "_median_s", lambda *a, **k: pytest.fail("timed alone"))
    half = whatif.blowup_matmul(prof, "cpu", 2, calls)
    product_s[0] = 5e-4
    quarter = whatif.blowup_matmul(prof, "cpu", 2, calls)
    assert given and set(given) == {2}
    assert half is not None and quarter is not None
    assert quarter["after_ms"] == pytest.approx(half["after_ms"] / 2)
