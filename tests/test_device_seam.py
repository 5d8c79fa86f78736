"""The CUDA path on the CPU, through reporter.collect.device's seam (tests/fake_cuda.py):
the device calls are the fake's, answered with what the H100 run recorded; the model's
tensors stay on the CPU."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from fake_cuda import H100_ENV, H100_PEAKS, fake_cuda

from reporter.collect import device as devices

FAST = dict(windows=2, window_s=0.005, time_budget_s=0.05, profile_steps=1,
            max_profile_steps=1, warmup_steps=1)


def _reading_target(seen: list):
    """A two-mode target that asks for TF32 and, in each step, reads torch's legacy TF32
    getters, as torch.compile and Lightning do (they raised in a mixed state: N1)."""
    from reporter.collect.target import Target

    def build(device: str = "cpu", preset: str = "tiny"):
        assert device == "cpu", "the fake keeps the model's tensors on the CPU"
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4))

        def forward(m, batch):
            seen.append((torch.backends.cuda.matmul.allow_tf32,
                         torch.get_float32_matmul_precision()))
            return m(batch[0])
        return Target(model=model, batches=[(torch.randn(8, 16), torch.randn(8, 4))],
                      batch_size=8, loss=lambda out, b: torch.nn.functional.mse_loss(out, b[1]),
                      optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                      forward=forward, modes=("train", "inference"), tf32=True)
    return build


def test_profile_target_with_cuda_runs_every_gpu_branch_on_the_cpu(tmp_path: Path):
    from reporter.collect.runner import RunOptions, profile_target

    seen: list = []
    before = torch.get_float32_matmul_precision()
    with fake_cuda() as gpu:
        run = profile_target("reader", _reading_target(seen),
                             RunOptions(device="cuda", preset="tiny", **FAST), tmp_path)
    log = gpu.log
    # the device's facts are the device's, not the CPU's
    assert run.device == "cuda" and run.env["device_name"] == H100_ENV["device_name"]
    assert run.env["device_memory_b"] == H100_ENV["device_memory_b"]
    assert run.env["capability"] == "9.0" and run.env["cudnn"] == 91900
    assert run.env["driver"] == H100_ENV["driver"]
    # TF32 set through both APIs for the whole target: the legacy getters answered
    assert seen and all(s == (True, "high") for s in seen)
    assert log[0] == "tf32 True" and log[-1] == "tf32 restored"
    assert torch.get_float32_matmul_precision() == before
    assert torch.backends.cuda.matmul.allow_tf32 is (before != "highest")
    # the memory peaks reset once per mode, before its warm-up, and read once per mode
    assert log.count("reset_peaks") == 2 and log.count("memory_peaks") == 2
    for section, peaks in zip(run.sections, H100_PEAKS):
        assert (section.memory["device_allocated_b"],
                section.memory["device_reserved_b"]) == peaks
        assert section.profile.device_type == "cuda"
        assert section.profile.device_name == H100_ENV["device_name"]
        assert section.precision["tf32"]["matmul"] is True
    assert run.sections[0].peaks["device"] == "H100 SXM"  # the datasheet, not measured
    # each profiled window: synchronised before the recording, the steps between two
    # events, then drained with a whole-device synchronisation (all streams)
    for reset in [i for i, c in enumerate(log) if c == "reset_peaks"]:
        rest = log[reset:]
        begin = rest.index("event.record")
        assert rest[begin - 1] == "sync"
        end = rest.index("event.record", begin + 1)
        assert rest[end + 1] == "sync" and "memory_peaks" in rest[end:]
        assert "event.sync" not in rest[begin:end + 2]  # not the current stream alone


def test_the_default_preset_is_chosen_by_the_devices_memory():
    """N2: 'large' needs about 32 GB (the H100's transformer training step)."""
    from reporter.collect.runner import default_preset

    with fake_cuda():
        assert default_preset("cuda", None) == "large"
    with fake_cuda(total_memory=24 << 30):
        assert default_preset("cuda", None) == "default"
        assert default_preset("cuda", "large") == "large"  # asked for: kept


def test_what_ifs_time_device_work_between_events_not_host_latency():
    """N10: on a GPU a what-if is timed on the device: calls back to back between two
    events, no synchronisation per call; the optimizer's step alone is timed from the
    host, where its launches are the point."""
    from reporter.collect import whatif

    calls = []
    with fake_cuda() as gpu:
        dev = devices.get("cuda")
        whatif._median_s(lambda: calls.append(1), dev, budget_s=0.001)
        timed = list(gpu.log)
        gpu.log.clear()
        whatif._median_s(lambda: calls.append(1), dev, budget_s=0.001, host=True)
    assert timed.count("event.record") >= 2 * 6 and timed.count("sync") == 1
    assert len(calls) > timed.count("event.record") // 2  # several calls per sample
    assert "event.record" not in gpu.log and gpu.log.count("sync") >= 6
    # variants timed in turn on the host are timed one by one on the device: its kernels
    # are not what the host's load slows
    gpu.log.clear()
    with fake_cuda() as gpu:
        whatif._medians_s([lambda: calls.append(1)] * 2, devices.get("cuda"), budget_s=0.001)
    assert gpu.log.count("event.record") >= 2 * 2 * 6


def _gemm_profile():
    from reporter.model.profile import Op, Profile

    p = Profile(label="train")
    p.ops_by_shape = [Op(name="aten::mm", calls=3, cpu_total_us=300.0, device_total_us=900.0,
                         input_shapes="[[64, 64], [64, 64]]")]
    return p


def test_the_gemm_what_if_runs_on_the_device_and_leaves_tf32_as_it_was():
    """N12: TF32 through set_float32_matmul_precision, no deprecation warning, and torch's
    state put back; in a mixed state (a target set the new API alone) the measurement is
    not lost."""
    from reporter.collect import whatif

    with fake_cuda() as gpu, warnings.catch_warnings():
        warnings.simplefilter("error")
        before = torch.get_float32_matmul_precision()
        got = whatif.gemm_precision(_gemm_profile(), "cuda", 3)
        assert got is not None and got["before_ms"] == pytest.approx(0.3)
        assert torch.get_float32_matmul_precision() == before
        assert "event.record" in gpu.log
        matmul = torch.backends.cuda.matmul
        if hasattr(matmul, "fp32_precision"):
            saved = matmul.fp32_precision
            try:
                matmul.fp32_precision = "tf32"  # the new API alone: legacy getters raise
                assert whatif.gemm_precision(_gemm_profile(), "cuda", 3) is not None
                assert matmul.fp32_precision == "tf32"
            finally:
                torch.set_float32_matmul_precision(before)
                matmul.fp32_precision = saved


def test_tf32_is_set_and_restored_through_both_apis():
    """N1: inside, the legacy getters and the new attributes agree on TF32; after, every
    one of them is as it was."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    state = lambda: (torch.get_float32_matmul_precision(), matmul.allow_tf32,  # noqa: E731
                     cudnn.allow_tf32, getattr(matmul, "fp32_precision", None),
                     getattr(getattr(cudnn, "conv", None), "fp32_precision", None))
    before = state()
    with devices.tf32(True):
        inside = state()
        assert inside[:3] == ("high", True, True)
        if devices.new_tf32_api():
            assert inside[3:] == ("tf32", "tf32")
        assert devices.tf32_state() == {"matmul": True, "conv": True, "override": False}
    assert state() == before


def test_a_sticky_cuda_error_through_the_seam_stops_the_suite(tmp_path: Path):
    """N9 on the GPU path: the fake device's synchronisation fails as a poisoned context
    does; the suite stops at the first target and says why, in one line."""
    from conftest import cli

    runs = tmp_path / "runs"
    with fake_cuda(fail_after_syncs=0):
        result = cli("run", "--target", "tensor-ops", "--target", "transformer",
                     "--preset", "tiny", "--device", "cuda", "--out", runs, "--quiet")
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert "[cuda-broken]" in lines[-1] and "1 remaining target(s) were not run" in lines[-1]
    assert "illegal memory access" in result.err
    assert not list(runs.glob("*/run.json"))


def test_ranks_are_aligned_before_the_recording_starts():
    """cuda review N14: in a distributed run the ranks meet (a barrier through the store)
    after the device is synchronised and before the prof.step() that starts the
    recording, so the first recorded collective does not hold the peers' skew."""
    from reporter.collect import runner

    class Prof:
        def step(self):
            gpu.log.append("prof.step")

    with fake_cuda() as gpu:
        runner._profiled_steps(lambda: gpu.log.append("step"), "cuda", Prof(), 2, 2,
                               align=lambda: gpu.log.append("align"))
    first = gpu.log.index("align")
    assert gpu.log[first - 1:first + 3] == ["sync", "align", "prof.step", "event.record"]
    assert gpu.log.count("align") == 1


def test_a_gpus_bandwidth_is_timed_over_copies_back_to_back(monkeypatch):
    """cuda review N16: one synchronisation per 256 MiB copy read HBM3 ~10% low. Through
    the seam (the copies run on the CPU, small): each timed sample holds several copies
    between two synchronisations. The datasheet table does not know the fake's name."""
    from reporter.collect import calibrate

    monkeypatch.setattr(calibrate, "_matmul_rate", lambda *a, **k: 1e12)
    monkeypatch.setattr(calibrate, "_fp32_rate", lambda *a, **k: 1e12)
    copies = []
    real = torch.Tensor.copy_

    def counted(self, src, *a, **k):
        copies.append(1)
        return real(self, src, *a, **k)
    monkeypatch.setattr(torch.Tensor, "copy_", counted)
    with fake_cuda() as gpu:
        peaks = calibrate.measure("cuda")
    syncs = gpu.log.count("sync")
    assert peaks.bandwidth > 0 and peaks.device == H100_ENV["device_name"]
    assert len(copies) >= calibrate.COPIES_PER_SAMPLE * (syncs - 1)


def test_a_device_name_resolves_through_the_seam():
    """cuda review §3, untested branch 1: a rank's own GPU and auto with a GPU present."""
    from reporter.collect.runner import resolve_device

    with fake_cuda():
        assert resolve_device("cuda:1") == "cuda:1"
        assert resolve_device("auto") == "cuda"
        assert resolve_device("cpu") == "cpu"


def test_the_gpu_side_benchmark_runs_on_the_device():
    """cuda review §3, untested branch 8: a CUDA run times the side benchmark on the GPU
    too (here the fake's tensors, on the CPU)."""
    from reporter.collect.runner import _benchmark
    from reporter.collect.target import Target

    asked = []
    target = Target(model=None, batches=[], batch_size=1,
                    benchmark=lambda device: asked.append(device) or [("matmul", 1.0)])
    with fake_cuda():
        rows = _benchmark(target, "cuda", lambda msg: None)
    assert asked == ["cpu", "cpu"] and rows == [{"op": "matmul", "cpu_ms": 1.0, "gpu_ms": 1.0}]


def test_attention_is_timed_under_the_autocast_the_model_ran_under():
    """cuda review N5: a model under bf16 autocast had its attention timed in fp32."""
    from conftest import FIXTURES

    from reporter.collect import whatif
    from reporter.store import load

    section = load(FIXTURES / "runs" / "cpu-transformer").sections[0]
    section.precision = {"autocast": "bf16", "tf32": {}}
    seen = []
    real = torch.matmul

    def matmul(a, b):  # the recipe times the recorded chain: its products are matmul
        out = real(a, b)
        seen.append(out.dtype)
        return out
    with fake_cuda() as gpu:
        ctx = whatif._autocast(devices.get("cuda"), section)
        assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16
        import unittest.mock as mock
        with mock.patch.object(torch, "matmul", matmul):
            got = whatif.attention(section.profile, "cuda", False, 3, section)
    assert got is not None and got["before_ms"] > 0 and seen
    assert set(seen) == {torch.bfloat16} and "event.record" in gpu.log
