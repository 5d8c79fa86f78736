"""Efficiency against the hardware: peaks, per-operator roofline, MFU and speed of light."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from reporter.analyze.efficiency import (
    NO_PEAKS,
    NO_SHAPES,
    NOT_RECORDED,
    assess,
    of_section,
    peaks_for,
    to_json,
)
from reporter.analyze.peaks import DATASHEET, MEASURED, TABLE, Peaks, lookup
from reporter.model.profile import Breakdown, Profile

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "traces"
T = 1e12


@pytest.mark.parametrize("name, memory_gb, expected", [
    ("NVIDIA A100-SXM4-80GB", 85, "A100 80GB SXM"),
    ("NVIDIA A100-SXM4-40GB", 42, "A100 40GB"),
    ("NVIDIA A100-PG509-200", 42, "A100 40GB"),
    ("NVIDIA A100 80GB PCIe", 85, "A100 80GB PCIe"),
    ("NVIDIA H100 80GB HBM3", 85, "H100 SXM"),
    ("NVIDIA H100 PCIe", 85, "H100 PCIe"),
    ("NVIDIA H100 NVL", 100, "H100 NVL"),
    ("NVIDIA H200", 150, "H200 SXM"),
    ("Tesla V100-SXM2-16GB", 16, "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", 34, "V100 PCIe"),
    ("Tesla T4", 16, "T4"),
    ("NVIDIA A10", 24, "A10"),
    ("NVIDIA L4", 24, "L4"),
    ("NVIDIA L40S", 48, "L40S"),
    ("NVIDIA GeForce RTX 3090", 24, "GeForce RTX 3090"),
    ("NVIDIA GeForce RTX 4090", 24, "GeForce RTX 4090"),
    ("NVIDIA B200", 180, "B200"),
    ("NVIDIA A10G", 24, None),  # not the A10: measured instead
    # cuda review N11: a MIG slice has a fraction of the GPU's compute and bandwidth
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10, None),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 5, None),
    ("NVIDIA GH200 480GB", 102, "GH200 96GB"),  # 4 TB/s, not H200's 4.8
    ("NVIDIA GH200 144G HBM3e", 150, "GH200 144GB"),
    ("NVIDIA GeForce RTX 2070", 8, None),
    ("AMD Instinct MI250X", 64, "MI250X GCD"),  # AMD's table (issue 67)
    ("AMD Radeon Graphics", 64, None),  # which part: unknown without its CUs
    (None, None, None),
])
def test_datasheet_lookup(name, memory_gb, expected):
    peaks = lookup(name, int(memory_gb * 1e9) if memory_gb else None)
    assert (peaks.device if peaks else None) == expected
    if peaks:
        assert peaks.source == DATASHEET and peaks.reference


def test_datasheet_figures_are_dense_and_sourced():
    """Dense figures: a tensor-core rate never below the plain fp32 one, fp8 twice bf16
    where both exist (the sparse figures are twice the dense: a slip would break it)."""
    for e in TABLE:
        f = e.flops_t
        assert "fp32" in f and e.bandwidth_g > 0 and "datasheet" in e.source.lower() \
            or "whitepaper" in e.source.lower()
        for key in ("tf32", "bf16", "fp16", "fp8"):
            assert f.get(key, f["fp32"]) >= f["fp32"], e.name
        if "fp8" in f and "bf16" in f and "RTX" not in e.name:
            assert f["fp8"] == pytest.approx(2 * f["bf16"], rel=0.01), e.name
        if "tf32" in f and "bf16" in f and "RTX" not in e.name:
            # (B200's datasheet rounds TF32 to 2.2 PFLOPS sparse)
            assert f["tf32"] == pytest.approx(f["bf16"] / 2, rel=0.03), e.name


def _peaks(source=DATASHEET, **flops) -> Peaks:
    return Peaks(source=source, device="test", flops={k: v * T for k, v in flops.items()},
                 bandwidth=1e12)


def _profile(costs, steps=2, step_us=1000.0, basis="device") -> Profile:
    return Profile(device_type="cuda" if basis == "device" else None, self_device_us=2000.0,
                   self_cpu_us=2000.0, steps=steps, costs=costs, cost_basis=basis,
                   shapes_recorded=True,
                   breakdown=Breakdown(steps_us=[step_us] * steps, host_us={}))


def _cost(name, flops, nbytes, time_us, dtype="bf16", family="matrix", phase="unmarked",
          calls=2):
    return {"name": name, "dtype": dtype, "family": family, "phase": phase, "calls": calls,
            "flops": flops, "bytes": nbytes, "time_us": time_us}


def test_roofline_per_operator():
    # A GEMM: 2e12 FLOPs over 2 steps at a 100 TFLOP/s peak needs 20 ms; it took 40 ms.
    # An add: 1e9 bytes at 1 TB/s needs 1 ms; it took 4 ms.
    p = _profile([_cost("aten::mm", 2e12, 1e9, 40_000),
                  _cost("aten::add", 1e8, 1e9, 4000, family="other")], step_us=30_000)
    e = assess(p, _peaks(fp32=10, bf16=100))
    mm, add = e.ops
    assert mm.name == "aten::mm" and mm.bound == "compute"
    assert mm.roofline_share == pytest.approx(0.5)
    assert mm.achieved_flops == pytest.approx(50 * T)
    assert mm.intensity == pytest.approx(2000)
    assert add.bound == "memory" and add.roofline_share == pytest.approx(0.25)
    # Per step: 1e12 + 5e7 FLOPs; no backward: MFU counts the forward once.
    assert e.flops_per_step == pytest.approx(1e12 + 5e7)
    assert e.mfu == pytest.approx((1e12 + 5e7) / 0.030 / (100 * T))
    # Speed of light: the profiled step minus what each op took beyond its roofline.
    assert e.speed_of_light_us == pytest.approx(30_000 - (20_000 - 10_000) - (2000 - 500))


def test_training_counts_the_forward_three_times():
    p = _profile([_cost("aten::mm", 2e12, 1e9, 40_000, phase="forward"),
                  _cost("aten::mm", 4e12, 2e9, 80_000, phase="backward"),
                  _cost("aten::mm", 1e12, 1e9, 10_000, phase="data")], step_us=100_000)
    e = assess(p, _peaks(fp32=10, bf16=100), step_us=200_000)
    assert e.training and e.model_flops_per_step == pytest.approx(3e12)
    assert e.flops_per_step == pytest.approx(3.5e12)
    assert e.step_timed and e.mfu == pytest.approx(3e12 / 0.2 / (100 * T))


def test_tf32_only_when_on_or_proven():
    fast = [_cost("aten::mm", 2e12, 1e6, 20_000, dtype="fp32")]  # 100 TFLOP/s per call
    peaks = _peaks(fp32=20, tf32=150, bf16=300)
    off = assess(_profile(fast), peaks, tf32=False)
    assert off.peak_dtype == "fp32" and off.ops[0].roofline_share > 1  # impossible: says so
    on = assess(_profile(fast), peaks, tf32=True)
    assert on.peak_dtype == "tf32" and on.ops[0].roofline_share <= 1
    unknown = assess(_profile(fast), peaks, tf32=None)
    assert unknown.tf32_inferred and unknown.ops[0].roofline_share <= 1
    slow = [_cost("aten::mm", 2e12, 1e6, 400_000, dtype="fp32")]  # 5 TFLOP/s: fp32 can
    assert not assess(_profile(slow), peaks, tf32=None).tf32_inferred


def test_fp32_convolutions_are_held_to_tf32_when_cudnn_had_it_on():
    """cuda review N3: cuDNN's TF32 is on by default where cuBLAS's is off (the H100 run
    recorded matmul False, conv True); a convolution is held to its own flag, fused fp32
    attention to the tensor cores' rate, a product to cuBLAS's flag."""
    costs = [_cost("aten::convolution", 2e12, 1e6, 20_000, dtype="fp32"),
             _cost("aten::mm", 2e11, 1e6, 20_000, dtype="fp32"),
             _cost("aten::_scaled_dot_product_efficient_attention", 2e12, 1e6, 20_000,
                   dtype="fp32")]
    peaks = _peaks(fp32=20, tf32=150, bf16=300)
    e = assess(_profile(costs), peaks, tf32=False, conv_tf32=True)
    by = {o.name: o for o in e.ops}
    assert by["aten::convolution"].roofline_share <= 1  # 100 TFLOP/s: under TF32's 150
    assert by["aten::_scaled_dot_product_efficient_attention"].roofline_share <= 1
    assert by["aten::mm"].roofline_share == pytest.approx(0.5)  # 10 of fp32's 20
    off = assess(_profile(costs), peaks, tf32=False, conv_tf32=False)
    assert {o.name: o for o in off.ops}["aten::convolution"].roofline_share > 1


def test_measured_peaks_beaten_by_the_run_are_raised():
    """A calibration in a busy moment under-measures: the run's own GEMM, faster than it,
    shows what the machine does. Datasheet peaks stay as printed."""
    costs = [_cost("aten::mm", 2e12, 1e6, 20_000, dtype="fp32")]  # 100 TFLOP/s
    e = assess(_profile(costs, step_us=12_000), _peaks(source=MEASURED, fp32=50))
    assert e.peaks_raised == ["fp32"] and e.peaks.flops["fp32"] == pytest.approx(100 * T)
    assert e.ops[0].roofline_share == pytest.approx(1.0) and e.mfu <= 1
    kept = assess(_profile(costs), _peaks(fp32=50))
    assert not kept.peaks_raised and kept.ops[0].roofline_share == pytest.approx(2.0)


def test_missing_inputs_say_why():
    assert assess(Profile(), _peaks(fp32=1)) == NO_SHAPES
    p = _profile([_cost("aten::mm", 1e9, 1e6, 10)])
    assert assess(p, None) == NO_PEAKS
    e = assess(_profile([_cost("aten::mm", 1e9, 1e6, 10, dtype="fp16"),
                         _cost("aten::add", 1e6, 1e6, 10, family="other")]),
               _peaks(fp32=1, bf16=2))
    assert e.no_peak == ["fp16"] and [o.name for o in e.ops] == ["aten::add"]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_corpus_traces():
    """The A100 trace with shapes is judged against the A100 80GB SXM datasheet, the MI250
    trace against AMD's (its device named by compute capability and compute units,
    tests/test_device_record.py); traces without shapes say why not."""
    from reporter.ingest.traces import read_trace

    p = read_trace(CORPUS / "07_hta-a100-80gb-rank0.json.gz")
    e = assess(p, peaks_for(p))
    assert e.peaks.device == "A100 80GB SXM" and e.peaks.source == DATASHEET
    assert e.basis == "device" and e.ops
    for o in e.ops:
        assert o.time_us > 0 and o.bytes > 0
        assert o.achieved_flops <= e.peaks.flops["fp32"]  # element-wise: far from the roof
        # Above 100% of the DRAM roof only where the operands fit in the 40 MB L2.
        assert o.roofline_share < 1 or o.bytes / o.calls * e.steps < 40e6
    assert 0 < e.coverage <= 1
    amd = read_trace(CORPUS / "04_hta-amd-mi250-rocm62.json.gz")
    amd_e = assess(amd, peaks_for(amd))
    assert amd.costs and amd_e.peaks.device == "MI250 GCD / MI210"
    for name in ("01_kineto-tbplugin-resnet50-2021feb.pt.trace.json.gz",
                 "06_hta-alexnet-a100.json.gz"):
        p = read_trace(CORPUS / name)
        assert assess(p, peaks_for(p)) == NO_SHAPES


def test_a_written_a100_trace_is_judged_against_its_datasheet(tmp_path):
    """tests/kineto.py's trace: an A100 80GB named in deviceProperties, fp32 products of
    [64, 512] by [512, 512] with their input dims and types, each kernel kernel_us long.
    The datasheet's peaks; each product's FLOPs and bytes from its shapes, over its
    kernels' time; without the shapes, why not; the project's H200 trace, the H200's."""
    from kineto import H200_TRAIN, training_trace, write
    from reporter.ingest.traces import read_trace

    kernel_us, m, k, n = 75.0, 64, 512, 512
    p = read_trace(write(tmp_path / "t.json", training_trace(kernel_us=kernel_us)))
    e = assess(p, peaks_for(p))
    assert e.peaks.device == "A100 80GB SXM" and e.peaks.source == DATASHEET
    assert e.basis == "device" and 0 < e.coverage <= 1
    mm = next(o for o in e.ops if o.name == "aten::mm")
    assert mm.achieved_flops == pytest.approx(2 * m * k * n / (kernel_us * 1e-6))
    assert mm.bytes / mm.calls * e.steps == pytest.approx(4 * (m * k + k * n + m * n))
    assert mm.achieved_flops <= e.peaks.flops["fp32"]
    for o in e.ops:
        assert o.time_us > 0 and o.bytes > 0 and o.roofline_share < 1, o
    bare = read_trace(write(tmp_path / "bare.json", training_trace(shapes=False)))
    assert assess(bare, peaks_for(bare)) == NO_SHAPES
    h200 = read_trace(H200_TRAIN)
    assert assess(h200, peaks_for(h200)).peaks.device == "H200 SXM"


def test_old_runs_say_not_recorded():
    from reporter.store import load

    run = load(Path(__file__).parent / "fixtures" / "runs" / "cpu-tensor-ops")
    assert of_section(run.sections[0]) == NOT_RECORDED


@pytest.mark.slow
def test_live_cpu_run_measures_peaks_and_reports_efficiency(tmp_path):
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve
    from reporter.render.report import render_markdown
    from reporter.pipeline import report_view
    from reporter.store import commit, load, staging

    spec, builder = resolve("transformer")
    opts = RunOptions(device="cpu", preset="tiny", windows=3, time_budget_s=0.5,
                      warmup_steps=1)
    for attempt in range(5):  # again while the machine's other work withholds the figures
        time.sleep(2 * bool(attempt))  # a pause: a burst of other work may pass
        run = profile_target(spec, builder, opts, tmp_path / f"scratch{attempt}")
        section = run.sections[0]
        e = of_section(section, run.target["batch_size"])
        if not isinstance(e, str):
            break
    peaks = Peaks.from_dict(section.peaks)
    assert peaks.source == MEASURED and peaks.flops["fp32"] > 0 and peaks.bandwidth > 0
    assert peaks.seconds is not None and peaks.seconds < 5
    assert section.profile.costs and section.profile.cost_basis == "cpu"
    assert not isinstance(e, str) and e.training and 0 < e.mfu < 1
    assert any(o.name in ("aten::mm", "aten::addmm", "aten::bmm") for o in e.ops)
    # Stored and read back: the same figures.
    root = tmp_path / "runs"
    with staging(root) as stage:
        again = load(commit(run, stage, root))
    assert to_json(of_section(again.sections[0], 1))["mfu"] == pytest.approx(
        to_json(of_section(section, 1))["mfu"])
    words = {"en": ("## Efficiency", "| Operator | dtype |", "- MFU: **"),
             "ru": ("## Эффективность", "| Оператор | dtype |", "- MFU: **"),
             "zh": ("## 效率", "| 算子 | dtype |", "- MFU：**")}
    for lang, expected in words.items():
        text = render_markdown(report_view(again, lang))
        for w in expected:
            assert w in text, (lang, w)
    doc = json.loads(json.dumps(to_json(e)))
    assert doc["ops"] and {"flops", "bytes", "roofline_share", "bound"} <= set(doc["ops"][0])


def test_crafted_run_json(tmp_path):
    """costs and peaks are input: a wrong type is one clear error; text is escaped."""
    import shutil

    from reporter.errors import BadInput
    from reporter.render.report import render_markdown
    from reporter.pipeline import report_view
    from reporter.store import load

    src = Path(__file__).parent / "fixtures" / "runs" / "cpu-transformer"
    folder = tmp_path / "run"
    shutil.copytree(src, folder)
    doc = json.loads((folder / "run.json").read_text())
    section = doc["run"]["sections"][0]
    assert section["profile"]["costs"] and section["peaks"]["source"] == "measured"
    section["peaks"]["device"] = "<img src=http://x/y.png> [a](http://x)"
    section["profile"]["costs"][0]["dtype"] = "<b>fp32</b>"
    (folder / "run.json").write_text(json.dumps(doc))
    text = render_markdown(report_view(load(folder), "en"))
    assert "<img src=http" not in text and "<b>fp32</b>" not in text
    assert "[a](http" not in text  # escaped: \\[a\\](http...
    section["profile"]["costs"][0]["flops"] = "many"
    (folder / "run.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"costs\[0\]\.flops"):
        load(folder)
    del section["profile"]["costs"][0]["flops"]
    (folder / "run.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="missing flops"):
        load(folder)


def test_the_near_roofline_lever_is_one_autocast_or_tf32_can_pull():
    """cuda review N8: on an H100, bf16 products were told to go 'fp8 with torch.autocast',
    which autocast cannot do; and fp32 products under TF32 were held to the CUDA-core
    fp32 peak."""
    from dataclasses import replace

    from conftest import FIXTURES

    from reporter.analyze.roofline import _lever
    from reporter.store import load

    run = load(FIXTURES / "runs" / "cpu-transformer")
    e = of_section(run.sections[0], run.target["batch_size"])
    h100 = lookup("NVIDIA H100 80GB HBM3", 85_520_809_984)
    bf16 = _lever(replace(e, peaks=h100, peak_dtype="bf16"), ["bf16"], 1000.0)
    assert bf16["faster_dtype"] is None and bf16["saving_us"] is None  # fp8 is no lever
    tf32 = _lever(replace(e, peaks=h100, peak_dtype="tf32"), ["fp32"], 1000.0)
    assert tf32["peak_fps"] == h100.flops["tf32"]  # held to the rate TF32 runs at
    assert tf32["faster_dtype"] in ("bf16", "fp16")
    assert tf32["saving_us"] == pytest.approx(1000.0 * (1 - 494.5 / 989.5))
    fp32 = _lever(replace(e, peaks=h100, peak_dtype="fp32"), ["fp32"], 1000.0)
    assert fp32["peak_fps"] == h100.flops["fp32"] and fp32["faster_dtype"] in ("bf16", "fp16")


def test_near_roofline_only_where_the_gpu_holds_the_step():
    """Issue 65: "bound by its matrix work" is said only where the GPU's kernels fill half
    the step at least; the same products in a step the host holds get no such statement."""
    from dataclasses import replace

    from conftest import FIXTURES

    from reporter.analyze.analyzer import analyze
    from reporter.store import load

    run = load(FIXTURES / "runs" / "cuda-h200-transformer-fixed")
    section = next(s for s in run.sections if s.label == "inference")
    e = of_section(section, run.target["batch_size"])
    # the run's own: 16.8 ms of kernels per step in the 18.6 ms timed without the profiler
    assert e.basis == "device" and e.step_timed and 0.85 < e.total_us / e.step_us < 0.95
    assert "near-roofline" in {f.rule for f in analyze(section.profile, None, e)}
    host_bound = replace(e, step_us=e.total_us / 0.3)  # the same kernels, 30% of the step
    rules = {f.rule for f in analyze(section.profile, None, host_bound)}
    assert "near-roofline" not in rules and "dominant-operator" in rules
