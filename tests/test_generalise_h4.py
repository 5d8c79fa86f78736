"""PyTorch's Performance Tuning Guide as a checklist (issue #66, item 1): the convolution
rules (a bias BatchNorm cancels, cuDNN's auto-tuner off, layout conversions around NCHW
convolutions) and nn.DataParallel instead of DDP. The bias is timed live on a planted CNN
and its twin built with bias=False; the others read a GPU's profile, so they are tested on
constructed profiles and a recorded A100 trace (their what-ifs are to be verified on a
GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from reporter.analyze.analyzer import RULES, analyze
from reporter.analyze.savings import estimate
from reporter.model.finding import NOT_QUANTIFIABLE
from reporter.model.profile import Op, Profile

PLANTED = Path(__file__).parent / "models" / "planted_h4.py"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "traces"

CONV_IN = "[[8, 16, 32, 32], [32, 16, 3, 3], [32], [], [], [], []]"
CONV_NO_BIAS = "[[8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], []]"
BN_IN = "[[8, 32, 32, 32], [32], [32], [32], [32], [], [], [], []]"


def conv_bn_profile(conv_shapes: str = CONV_IN, bn_shapes: str = BN_IN, label: str = "train",
                    device: bool = False, add_us: float = 0.0) -> Profile:
    """A step whose convolution (4 calls, 40% of the time) feeds a BatchNorm: on the CPU,
    or on a GPU, where ATen adds the bias apart (``add_us`` of device time)."""
    t = "device_total_us" if device else "cpu_total_us"
    conv = Op("aten::conv2d", calls=4, self_cpu_us=100, cpu_total_us=4000,
              device_total_us=4000 if device else 0.0)
    ops = [conv, Op("aten::batch_norm", calls=4, self_cpu_us=1000, cpu_total_us=1000),
           Op("aten::mm", calls=4, self_cpu_us=4900, cpu_total_us=4900)]
    if label == "train":
        ops.append(Op("aten::convolution_backward", calls=4, self_cpu_us=4000,
                      cpu_total_us=4000))
    by_shape = [Op("aten::conv2d", calls=4, input_shapes=conv_shapes, **{t: 4000.0}),
                Op("aten::batch_norm", calls=4, input_shapes=bn_shapes, **{t: 1000.0})]
    if add_us:
        by_shape.append(Op("aten::add_", calls=4, input_shapes="[[8, 32, 32, 32], [1, 32, 1, 1]]",
                           **{t: add_us}))
        ops.append(Op("aten::add_", calls=4, self_cpu_us=40, device_total_us=add_us))
    p = Profile(label=label, device_type="cuda" if device else None, ops=ops,
                ops_by_shape=by_shape, steps=2, shapes_recorded=True)
    p.self_cpu_us = 10_000.0
    if device:
        ops.append(Op("void implicit_convolve_sgemm", calls=4, self_device_us=10_000,
                      kind="kernel"))
        p.self_device_us = 10_000.0
    return p


def gpu_conv_profile(benchmark: bool | None = False, calls: int = 4, layout_us: float = 0.0
                     ) -> Profile:
    """A GPU step: convolutions forward and backward (60% of the device time), the cuDNN
    auto-tuner as the runner observed it (None: not observed), the layout conversion
    kernels (``layout_us`` of the 10 ms of device time)."""
    ops = [Op("aten::conv2d", calls=calls, self_cpu_us=100, cpu_total_us=400,
              device_total_us=3000),
           Op("aten::convolution_backward", calls=calls, self_cpu_us=100, cpu_total_us=400,
              device_total_us=3000),
           Op("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
              "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float "
              "const*, float*)", calls=3 * calls, self_device_us=layout_us, kind="kernel"),
           Op("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", calls=calls,
              self_device_us=6000 - layout_us, kind="kernel"),
           Op("elementwise_kernel", calls=calls, self_device_us=4000, kind="kernel")]
    by_shape = [Op("aten::conv2d", calls=calls, device_total_us=3000, input_shapes=CONV_NO_BIAS)]
    p = Profile(label="train", device_type="cuda", ops=[o for o in ops if o.self_device_us
                                                         or o.kind != "kernel"],
                ops_by_shape=by_shape, steps=2, shapes_recorded=True,
                self_cpu_us=5000.0, self_device_us=10_000.0)
    if benchmark is not None:
        # Profile.process (the runner's observed process state), where it exists already
        p.process = {"cudnn_benchmark": benchmark}  # type: ignore[attr-defined]
    return p


def data_parallel_profile(dp_us: float = 3000.0) -> Profile:
    """Two steps of 5 ms with nn.DataParallel's functions taking ``dp_us`` of them."""
    share = dp_us / 4
    ops = [Op("ProfilerStep#1", calls=2, cpu_total_us=10_000, kind="annotation"),
           Op("Broadcast", calls=2, self_cpu_us=share, cpu_total_us=share),
           Op("Scatter", calls=4, self_cpu_us=share, cpu_total_us=share),
           Op("Gather", calls=4, self_cpu_us=share, cpu_total_us=share),
           Op("BroadcastBackward", calls=2, self_cpu_us=10, cpu_total_us=share + 10),
           Op("ReduceAddCoalesced", calls=2, self_cpu_us=share, cpu_total_us=share),
           Op("aten::mm", calls=8, self_cpu_us=10_000 - dp_us, cpu_total_us=10_000 - dp_us)]
    return Profile(label="train", ops=ops, steps=2, self_cpu_us=10_000.0)


# The inputs test_findings.py reads each rule's words from
SYNTHETIC_H4 = {"conv-bias-before-bn": conv_bn_profile(),
                "cudnn-benchmark-off": gpu_conv_profile(),
                "channels-last": gpu_conv_profile(True, layout_us=1000.0),
                "data-parallel": data_parallel_profile()}


def _found(p: Profile) -> dict:
    return {f.rule: f for f in analyze(p)}


# conv-bias-before-bn ------------------------------------------------------------

def test_a_biased_convolution_before_batchnorm_is_found_only_in_training():
    """From the recorded shapes: the bias operand [32] of a convolution with 32 output
    channels, and a BatchNorm of 32 channels of the same batch and rank, in a training
    step. Not in inference (BatchNorm's running statistics keep the bias), not without a
    bias, not when BatchNorm's channels are others, not under the threshold."""
    f = _found(conv_bn_profile())["conv-bias-before-bn"]
    e = f.evidence.as_dict()
    assert e["op"] == "aten::conv2d" and e["calls"] == 4 and e["shapes"] == 1
    assert e["share"] == pytest.approx(0.4) and e["bias_visible"] is False
    assert e["bias_time_us"] == 0 and f.ops == [] and f.severity == "low"
    assert "conv-bias-before-bn" not in _found(conv_bn_profile(label="inference"))
    assert "conv-bias-before-bn" not in _found(conv_bn_profile(CONV_NO_BIAS))
    other = BN_IN.replace("32", "64")
    assert "conv-bias-before-bn" not in _found(conv_bn_profile(bn_shapes=other))
    small = conv_bn_profile()
    small.self_cpu_us = 4000 / 0.04  # the convolutions 4% of the time
    assert "conv-bias-before-bn" not in _found(small)


def test_a_bias_added_apart_is_what_the_finding_accounts_for_and_saves():
    """On a GPU, ATen adds the bias after a cuDNN convolution in an aten::add_ of the
    output and the bias viewed as (1, C, 1, 1): its time is the saving (the finding
    accounts for the convolutions). Without it the profile cannot tell: not
    quantifiable."""
    p = conv_bn_profile(device=True, add_us=300.0)
    f = _found(p)["conv-bias-before-bn"]
    assert f.evidence.bias_visible and f.evidence.bias_share == pytest.approx(0.03)
    assert f.ops == ["aten::add_"]
    s = estimate(f, p)
    assert s.saving_us == pytest.approx(300.0 / 2)  # per step
    assert s.accounts_us == pytest.approx(0.4 * 10_000 / 2)  # the convolutions
    cpu = conv_bn_profile()
    assert estimate(_found(cpu)["conv-bias-before-bn"], cpu).note == NOT_QUANTIFIABLE


def test_the_pairs_are_read_off_the_model_and_the_bias_comes_back():
    """The what-if's pairs are the convolutions whose output tensor itself goes into a
    BatchNorm: not one with a ReLU between them (there the bias counts), not one without
    a bias. Inside conv_bias_off those have no bias; after it, even after an error, the
    same Parameter objects are back."""
    from reporter.collect.runner import _Stepper
    from reporter.collect.target import Target
    from reporter.collect.whatif import conv_bias_off, conv_bias_pairs

    torch.manual_seed(0)
    fed, relu_first, bare = (nn.Conv2d(3, 4, 3, bias=True), nn.Conv2d(4, 4, 1, bias=True),
                             nn.Conv2d(4, 4, 1, bias=False))
    model = nn.Sequential(fed, nn.BatchNorm2d(4), relu_first, nn.ReLU(), nn.BatchNorm2d(4),
                          bare, nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))
    batches = [(torch.randn(2, 3, 8, 8), torch.tensor([0, 1]))]
    model(batches[0][0])  # the lazy layer's shape
    target = Target(model=model, batches=batches, batch_size=2,
                    loss=lambda out, b: nn.functional.cross_entropy(out, b[1]),
                    optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    step = _Stepper(target, "train", "cpu")
    assert conv_bias_pairs(step) == [fed]
    bias = fed.bias
    with pytest.raises(RuntimeError, match="inside"):
        with conv_bias_off([fed]):
            assert fed.bias is None
            step()  # a training step without the bias runs
            raise RuntimeError("inside")
    assert fed.bias is bias and relu_first.bias is not None


def _timed_three(rounds: int = 30) -> tuple[float, float, float, bool]:
    """The planted CNN's step as it is, with the what-if's fix applied (conv_bias_off on
    the convolutions conv_bias_pairs finds, as conv_bias_step times it) and the twin
    built with bias=False, in turn, one call of each per round (whatif._in_turn, as the
    what-if times its two): the share of the step the fix saved (the rule's promise) and
    the share the twin saved, the noise of their difference (a standard error, of the
    step), and whether other work disturbed the machine meanwhile."""
    import contextlib
    import statistics
    import time

    from models.planted_h4 import conv_bias_bn, conv_no_bias_bn

    from reporter.collect import machine
    from reporter.collect.runner import _Stepper
    from reporter.collect.whatif import conv_bias_off, conv_bias_pairs

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        planted = _Stepper(conv_bias_bn(), "train", "cpu")
        twin = _Stepper(conv_no_bias_bn(), "train", "cpu")
        convs = conv_bias_pairs(planted)
        assert len(convs) == 7

        def fix():
            return conv_bias_off(convs)
        for _ in range(2):
            planted()
            with fix():
                planted()
            twin()
        watch = machine.Watch(1)
        # per round, each variant's step against the step as it is in the same round
        # (the order turned each round), the medians of those ratios: a slow stretch of
        # the shared machine moves all three alike
        variants = [(planted, contextlib.nullcontext), (planted, fix), (twin,
                                                                        contextlib.nullcontext)]
        ratios: list[list[float]] = [[], [], []]
        for r in range(rounds):
            took = [0.0, 0.0, 0.0]
            for i in (r % 3, (r + 1) % 3, (r + 2) % 3):
                one, within = variants[i]
                with within():
                    one()  # the step's lead (as whatif.STEP_LEAD)
                    start = time.perf_counter()
                    one()
                    took[i] = time.perf_counter() - start
            ratios[0].append(took[1] / took[0])
            ratios[1].append(took[2] / took[0])
            ratios[2].append((took[2] - took[1]) / took[0])
        # the noise of the two savings' difference: the paired differences' spread (the
        # median absolute deviation as a standard deviation) over the root of the rounds
        diffs = ratios[2]
        mid = statistics.median(diffs)
        noise = 1.4826 * statistics.median(abs(d - mid) for d in diffs) / len(diffs) ** 0.5
        return (1 - statistics.median(ratios[0]), 1 - statistics.median(ratios[1]), noise,
                watch.stop().disturbed)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_planted_cnns_bias_saving_is_what_its_twin_saves():
    """Live, one thread: the rule's promise (the planted step with the what-if's fix
    against it as it is) and the twin with bias=False against it, timed in the same
    rounds: the promise within 30% of the twin's saving plus twice the noise of their
    difference (the two are different models, and the timing has its own noise: the
    errors add). Both are small (3-4% of the step on a quiet machine, 2026-12-04), and on
    this shared 2-core machine one round's noise is of their order: the noise is measured
    in the same rounds. A promise of nothing, or of twice the twin's saving, fails on a
    quiet run. A second try where the first was disturbed or out of the bound: on this
    machine two tries in eight timed the fix 7-8% faster or slower than the step as it
    is, with the twin's saving near 0 and the machine's counters quiet (2026-12-05); a
    promise wrong by the model fails both tries. Skipped when both were disturbed."""
    tries = []
    for _ in range(2):
        promise, twin, noise, disturbed = _timed_three()
        tries.append((promise, twin, noise, disturbed))
        if not disturbed and abs(promise - twin) <= 0.3 * abs(twin) + 2 * noise:
            return
    if all(t[3] for t in tries):
        pytest.skip(f"the machine was busy in every try: {tries}")
    pytest.fail(f"the promise is not the twin's saving in any undisturbed try: {tries}")


@pytest.mark.slow
def test_live_the_planted_cnn_has_the_finding_and_its_twin_not(tmp_path):
    """Live, through the runner: the planted CNN's training section reads 7 convolutions
    with a bias before a BatchNorm (7 calls a step at 3 shapes; the bias is added
    inside oneDNN's kernel on the CPU, so no share of its own), the twin's none. Where
    the what-if was timed undisturbed, its saving is the share of the step it saved, and
    the words say it was timed without the bias."""
    from reporter.analyze.analyzer import analyze_section
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    found = {}
    sections = {}
    for name in ("conv_bias_bn", "conv_no_bias_bn"):
        spec, builder = resolve(f"{PLANTED}:{name}")
        run = profile_target(spec, builder, RunOptions(device="cpu", windows=3,
                                                       time_budget_s=0.3, warmup_steps=1,
                                                       threads=1), tmp_path / name)
        sections[name] = run.sections[0]
        found[name] = analyze_section(run.sections[0], 16)
    assert "conv-bias-before-bn" not in {f.rule for f in found["conv_no_bias_bn"].findings}
    f = next(f for f in found["conv_bias_bn"].findings if f.rule == "conv-bias-before-bn")
    e = f.evidence.as_dict()
    # 7 convolutions a step, over the steps the runner profiled (3 or 4: it sizes the
    # profiled window by the step's time)
    steps = sections["conv_bias_bn"].profile.steps
    assert (e["op"], e["calls"], e["shapes"], e["bias_visible"]) == ("aten::conv2d", 7 * steps,
                                                                    3, False)
    timed = sections["conv_bias_bn"].whatif.get("conv-bias-before-bn")
    if timed is None:
        return  # the timings were disturbed and dropped: the report keeps "not quantifiable"
    assert timed["whole_step"] and timed["convs"] == 7 and e["timed_no_bias"]
    s = next(s for g, s in found["conv_bias_bn"].main + found["conv_bias_bn"].minor
             if g.rule == "conv-bias-before-bn")
    assert s.measured is not None and s.measured["whole_step"]


# cudnn-benchmark-off ---------------------------------------------------------

def test_the_auto_tuner_off_is_a_finding_only_where_the_runner_saw_it_off():
    """On a GPU, convolutions 60% of the device time with the same shapes each step: a
    finding where the runner observed cudnn.benchmark off, none where on or unknown (an
    imported trace), none where a shape came back less than once a step, none on the
    CPU. To be verified on a GPU."""
    f = _found(gpu_conv_profile(False))["cudnn-benchmark-off"]
    assert f.evidence.share == pytest.approx(0.6) and f.evidence.shapes_known
    assert f.severity == "high"
    assert "cudnn-benchmark-off" not in _found(gpu_conv_profile(True))
    assert "cudnn-benchmark-off" not in _found(gpu_conv_profile(None))
    assert "cudnn-benchmark-off" not in _found(gpu_conv_profile(False, calls=1))
    cpu = conv_bn_profile()
    cpu.process = {"cudnn_benchmark": False}  # type: ignore[attr-defined]
    assert "cudnn-benchmark-off" not in _found(cpu)
    p = gpu_conv_profile(False)
    assert estimate(f, p).note == NOT_QUANTIFIABLE  # until timed on the model


def test_the_auto_tuner_what_if_needs_cuda_and_puts_the_flag_back():
    from reporter.collect.whatif import cudnn_benchmark_on, cudnn_benchmark_step

    was = torch.backends.cudnn.benchmark
    with pytest.raises(ValueError):
        with cudnn_benchmark_on():
            assert torch.backends.cudnn.benchmark is True
            raise ValueError
    assert torch.backends.cudnn.benchmark is was
    assert cudnn_benchmark_step("cpu", object()) is None


# channels-last ---------------------------------------------------------------

def test_layout_conversions_beside_convolutions_are_a_finding_above_3_percent():
    f = _found(gpu_conv_profile(True, layout_us=1000.0))["channels-last"]
    assert f.evidence.share == pytest.approx(0.1)
    assert f.ops[0].startswith("void cudnn::ops::nchwToNhwcKernel")
    p = gpu_conv_profile(True, layout_us=1000.0)
    assert estimate(f, p).saving_us == pytest.approx(1000.0 / 2)  # removed, per step
    assert "channels-last" not in _found(gpu_conv_profile(True, layout_us=200.0))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_a_recorded_a100_resnet_converts_layouts_around_its_convolutions():
    """The HTA sample's ResNet on A100s (DDP, fp32): cuDNN's nchwToNhwc and nhwcToNchw
    kernels take 9.2% of the device time beside the convolutions."""
    from reporter.ingest.traces import read_trace

    p = read_trace(CORPUS / "10_hta-nccl-a100.json.gz")
    f = _found(p)["channels-last"]
    assert f.evidence.share == pytest.approx(0.0915, abs=0.001)
    assert f.evidence.kernels == 2 and "nchwToNhwcKernel" in f.evidence.op


def test_a_written_trace_converting_layouts_around_its_convolutions(tmp_path):
    """A trace in kineto's format (tests/kineto.py's writer): each step three
    convolutions, each launching cuDNN's nchwToNhwc kernel, its implicit GEMM and the
    nhwcToNchw kernel back, then an element-wise kernel. The finding's share is the
    conversions' kernel time over the device's, from the events written."""
    from kineto import Writer, write
    from reporter.ingest.traces import read_trace

    to_nhwc = ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
               "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float "
               "const*, float*)")
    to_nchw = to_nhwc.replace("nchwToNhwc", "nhwcToNchw").replace("nchw2nhwc", "nhwc2nchw")
    gemm = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw"
    w = Writer(shapes=True)
    t = 0.0
    for step in range(1, 3):
        begin = t
        for _ in range(3):
            w.op("aten::conv2d", t, 30, dims=[[32, 64, 56, 56], [64, 64, 3, 3]],
                 types=["float", "float"])
            for kernel, us in ((to_nhwc, 15.0), (gemm, 120.0), (to_nchw, 12.0)):
                w.launch(t + 2, kernel, us)
                t += 7
            t += 20
        w.op("aten::add", t, 10)
        w.launch(t + 2, "elementwise_kernel", 40.0)
        t = max(t + 12, w.gpu) + 5
        w.x(f"ProfilerStep#{step}", begin, t - begin, "user_annotation")
        t += 5
    events = w.events
    p = read_trace(write(tmp_path / "conv.json", {"traceEvents": events}))
    f = _found(p)["channels-last"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    layout = sum(e["dur"] for e in kernels if "cudnn::ops::n" in e["name"])
    assert f.evidence.share == pytest.approx(layout / sum(e["dur"] for e in kernels))
    assert f.evidence.kernels == 2 and "nchwToNhwcKernel" in f.evidence.op


def test_channels_last_on_converts_the_model_and_the_batch_and_puts_them_back():
    from reporter.collect.runner import _Stepper
    from reporter.collect.target import Target
    from reporter.collect.whatif import channels_last_on

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 2))
    batches = [(torch.randn(2, 3, 8, 8), torch.tensor([0, 1]))]
    target = Target(model=model, batches=batches, batch_size=2,
                    loss=lambda out, b: nn.functional.cross_entropy(out, b[1]),
                    optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    step = _Stepper(target, "train", "cpu")
    weight, data = model[0].weight, model[0].weight.data
    last = torch.channels_last
    with channels_last_on(step):
        assert model[0].weight.is_contiguous(memory_format=last)
        assert step.cast is not None and step.cast(batches[0])[0].is_contiguous(
            memory_format=last)
        step()
    assert model[0].weight is weight and model[0].weight.data.data_ptr() == data.data_ptr()
    assert step.cast is None


# data-parallel ---------------------------------------------------------------

def test_data_parallel_functions_over_a_tenth_of_the_step_are_a_finding():
    """nn.DataParallel's autograd functions by the names the profiler records (their
    class names; the backward's nodes hold them under the same names and are not counted
    again): 30% of the step here, a finding; 5%, none."""
    f = _found(data_parallel_profile())["data-parallel"]
    assert f.evidence.share == pytest.approx(0.3)
    assert set(f.ops) == {"Broadcast", "Scatter", "Gather", "ReduceAddCoalesced"}
    assert "data-parallel" not in _found(data_parallel_profile(500.0))
    assert RULES["data-parallel"].saving is not None


def test_the_profiler_records_an_autograd_function_by_its_class_name():
    """What the rule reads: a Function named as DataParallel's records its class name,
    and its backward node the name with "Backward"."""
    from torch.autograd import Function

    class Broadcast(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.randn(4, requires_grad=True)
    with torch.profiler.profile() as prof:
        Broadcast.apply(x).sum().backward()
    names = {e.key for e in prof.key_averages()}
    assert {"Broadcast", "BroadcastBackward"} <= names
