"""Runs recorded on an NVIDIA H200 on 2026-12-04 (issue #66, docs/gpu.md): the compiled
transformer's Triton kernels, and the planted NCHW convnet with cuDNN's auto-tuner off,
whose channels-last finding was timed there on the model."""

from __future__ import annotations

from collections import Counter

from conftest import FIXTURES
from reporter.analyze.analyzer import analyze_run
from reporter.model.finding import NOT_FASTER
from reporter.model.profile import KIND_KERNEL, KIND_OP, classify
from reporter.store import load


def test_a_triton_kernels_host_launcher_is_an_operator_not_a_second_kernel():
    assert classify("triton_poi_fused_gelu_view_6", device_side=True) == KIND_KERNEL
    assert classify("triton_poi_fused_gelu_view_6") == KIND_KERNEL  # a table without CPU time
    assert classify("triton_poi_fused_gelu_view_6", host_side=True) == KIND_OP
    assert classify("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", host_side=True) == KIND_KERNEL


def test_the_compiled_runs_kernels_are_each_listed_once_and_not_counted_twice():
    run = load(FIXTURES / "runs" / "cuda-h200-transformer-compiled")
    for section in run.sections:
        p = section.profile
        kernels = [o for o in p.ops if o.kind == KIND_KERNEL]
        twice = [n for n, c in Counter(o.name for o in kernels).items() if c > 1]
        assert twice == [], twice
        triton = [o for o in kernels if o.name.startswith("triton_")]
        assert triton, "the compiled regions' Triton kernels"
        launchers = [o for o in p.ops if o.kind == KIND_OP and o.name.startswith("triton_")]
        assert {o.name for o in launchers} <= {o.name for o in triton}
        # the device time of the kernels is the Self CUDA total's, at most
        assert sum(o.self_device_us for o in kernels) <= p.self_device_us * 1.001


def test_the_convnet_gets_channels_last_timed_and_no_auto_tuner_saving():
    run = load(FIXTURES / "runs" / "cuda-h200-convnet-nchw")
    (analysis,) = analyze_run(run)
    worth = {f.rule: s for f, s in analysis.main + analysis.minor}
    layout = worth["channels-last"]
    assert layout.measured is not None and layout.measured.get("whole_step")
    # timed twice on the H200: 1.60 ms and 2.74 ms saved of a 9.59 ms step; the twin in
    # channels_last (with the auto-tuner on) ran 19.4% faster (6,675 -> 8,285 samples/s)
    assert layout.low_us <= 0.194 * layout.step_us <= layout.high_us
    tuner = worth["cudnn-benchmark-off"]
    assert tuner.note == NOT_FASTER and not tuner.saving_us
