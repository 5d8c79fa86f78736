"""The built-in targets: they build, step, and each fixed twin computes the same thing."""

from __future__ import annotations

import pytest
import torch

from reporter.collect.target import DEFAULT_SUITE, build, resolve
from reporter.collect.targets import bloat, seq2seq


@pytest.mark.parametrize("name", DEFAULT_SUITE)  # ddp needs ranks: tests/test_distributed.py
def test_every_builtin_builds_at_tiny_size(name):
    spec, builder = resolve(name)
    target = build(spec, builder, "cpu", "tiny")
    assert target.batch_size > 0
    batch = next(iter(target.batches))
    forward = target.forward or (lambda m, b: m(b[0]))
    out = forward(target.model, batch)
    if target.loss is not None:
        loss = target.loss(out, batch)
        assert loss.dim() == 0 and torch.isfinite(loss)


def test_bloated_mixing_equals_matmul_mixing():
    gen = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(3, 2, 24, 16, generator=gen).unbind(0)
    torch.testing.assert_close(bloat.bloated_mixing(q, k, v), bloat.matmul_mixing(q, k, v),
                               rtol=1e-4, atol=1e-5)


def test_bloat_models_with_the_same_weights_give_the_same_output():
    slow = bloat.MixerModel(16, 2, bloat.bloated_mixing)
    fast = bloat.MixerModel(16, 2, bloat.matmul_mixing)
    fast.load_state_dict(slow.state_dict())
    x = torch.randn(2, 12, 16)
    torch.testing.assert_close(slow(x), fast(x), rtol=1e-4, atol=1e-5)


def test_seq2seq_loop_and_one_call_decode_the_same():
    looped = seq2seq.Seq2Seq(vocab=50, hidden=8, loop=True)
    whole = seq2seq.Seq2Seq(vocab=50, hidden=8, loop=False)
    whole.load_state_dict(looped.state_dict())
    src, tgt = torch.randint(1, 50, (3, 7)), torch.randint(1, 50, (3, 5))
    torch.testing.assert_close(looped(src, tgt), whole(src, tgt), rtol=1e-4, atol=1e-5)


def test_seq2seq_pads_on_the_cpu_with_pad_sequence():
    items = [(torch.tensor([1, 2, 3]), torch.tensor([4])),
             (torch.tensor([5]), torch.tensor([6, 7]))]
    src, tgt = seq2seq.collate(items)
    assert src.tolist() == [[1, 2, 3], [5, 0, 0]]
    assert tgt.tolist() == [[4, 0], [6, 7]]


class _FakeEvent:
    log: list = []

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.log.append("record")
        self.t = len(self.log)

    def synchronize(self):
        self.log.append("event-sync")

    def elapsed_time(self, other):
        return 1000.0 * (other.t - self.t)


def test_profiled_gpu_window_holds_exactly_the_recorded_steps_device_work(monkeypatch):
    """On a GPU the device is synchronised before the prof.step() that starts the
    recording (the recording begins inside that call: a sync after it is recorded, and
    the earlier steps' queued kernels run inside the window), and the last recorded step
    ends by waiting for its own kernels inside the device_drain mark, before the
    prof.step() that stops the recording. CPU-only test: the device calls are stand-ins
    that log what the runner does."""
    import contextlib

    import torch

    from reporter.collect import profiling, runner

    log: list = []
    _FakeEvent.log = log
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)

    @contextlib.contextmanager
    def mark(name):
        log.append(f"enter {name}")
        yield
        log.append(f"exit {name}")
    monkeypatch.setattr(profiling, "record_function", mark)  # where _profiled_steps reads it

    class Prof:
        recording = False
        steps = 0

        def step(self):
            self.steps += 1
            self.recording = 2 <= self.steps < 5  # wait 1, warm-up 1, active 3
            log.append("prof.step")

    prof = Prof()

    def stepper():
        log.append("recorded-step" if prof.recording else "step-body")

    seconds = runner._profiled_steps(stepper, "cuda", prof, skipped=2, active=3)
    assert log.count("recorded-step") == 3 and seconds > 0
    first = log.index("recorded-step")
    # the device idles when the recording starts: synchronised, then the starting step()
    assert log[first - 3:first] == ["sync", "prof.step", "record"]
    last = len(log) - 1 - log[::-1].index("recorded-step")
    assert "sync" not in log[first:last]
    # the last recorded step waits for the device's kernels, on every stream (cuda review
    # N14: not the current stream's event alone), inside the mark; then the recording stops
    assert log[last + 1:] == ["record", "enter device_drain", "sync",
                              "exit device_drain", "prof.step"]


def test_device_memory_uses_the_allocated_peak_after_emptying_the_cache(monkeypatch):
    import torch

    from reporter.collect import runner
    from reporter.model.profile import Profile

    calls = []
    monkeypatch.setattr(runner.gc, "collect", lambda: calls.append("gc"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: calls.append("reset"))
    runner._reset_device_memory("cuda")
    assert calls == ["gc", "empty", "reset"]

    class Props:
        total_memory, name, major, minor = 16 << 30, "Tesla V100-SXM2-16GB", 7, 0
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 3 << 30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 15 << 30)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: Props())
    p = Profile(label="x")
    memory = runner._device_memory(p, "cuda")
    assert memory == {"device_allocated_b": 3 << 30, "device_reserved_b": 15 << 30}
    assert p.peak_device_mem_b == 3 << 30  # memory-pressure reads the allocated peak


@pytest.mark.parametrize("value", ["bfloat16", True, "float16", "fp8"])
def test_an_unsupported_autocast_is_refused_not_run_in_fp32(value):
    import torch

    from reporter.collect.target import Target
    from reporter.errors import BadInput

    target = Target(model=torch.nn.Linear(2, 2), batches=[(torch.randn(1, 2),)], batch_size=1,
                    modes=("inference",), autocast=value)
    with pytest.raises(BadInput, match="autocast"):
        target.check("t.py:build")


def test_a_distributed_run_id_has_no_colon_and_compares_as_cuda():
    from datetime import datetime, timezone

    from reporter.collect.runner import new_run_id
    from reporter.compare import Step

    run_id = new_run_id("ddp", "cuda:0", datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert ":" not in run_id and "-cuda-" in run_id

    class R:
        device = "cuda:0"
    assert Step("a", "a", [], R()).device == "cuda"


@pytest.mark.parametrize("name, fp32", [
    # fp32 GEMVs (batch-1 and decode products), as cuBLAS names them on sm80/sm90
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
     "false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
     "float> >(cublasGemvParamsEx<...>, float, float)", True),
    ("void gemv2N_kernel<int, int, float, float, float, float, 128, 32, 4, 4, false, "
     "cublasGemvParams<...> >(cublasGemvParams<...>)", True),
    ("void internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, "
     "false, 7, false, cublasGemvParamsEx<...> >(cublasGemvParamsEx<...>)", True),
    ("sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize"
     "128x128x8_stage3_warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn", True),
    ("ampere_sgemm_128x64_tn", True),
    # bf16 GEMVs and tensor-core kernels are not
    ("void internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
     "float, false, true, true, false, 7, false, cublasGemvParamsEx<...> >(...)", False),
    ("void gemv2T_kernel_val<int, int, __half, __half, float, float, 128, 16, 4, 4, false, "
     "false, cublasGemvParamsEx<...> >(...)", False),
    ("nvjet_sss_tf32_64x8_64x16_2x1_v_bz_TNN", False),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1", False),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", False),
    ("cutlass_tensorop_s1688fprop_optimized_tf32_64x64_32x5_nhwc_align4", False),
])
def test_fp32_gemm_kernels_are_told_by_their_element_type(name, fp32):
    """cuda review N7: the bare 'gemvx' counted bf16 GEMVs, and gemv2T was missed."""
    from reporter.analyze.rules.precision import _FP32_GEMM

    assert bool(_FP32_GEMM.search(name)) is fp32, name


def test_the_real_gemmsn_kernel_name_counts_as_fp32_gemm():
    from reporter.analyze.rules.precision import _FP32_GEMM

    assert _FP32_GEMM.search("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, "
                             "cublasGemvTensorStridedBatched<float const> >(...)")


def test_tensor_ops_builds_its_inputs_on_the_device():
    from reporter.collect.targets.tensor_ops import build

    target = build(device="meta", preset="tiny")  # any device: no copy in the step
    assert all(t.device.type == "meta" for t in target.batches[0])


def test_a_cpu_run_benchmarks_the_cpu_only_even_with_a_gpu(monkeypatch):
    import torch

    from reporter.collect import runner
    from reporter.collect.targets.tensor_ops import build

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    asked = []
    target = build(device="cpu", preset="tiny")
    target.benchmark = lambda dev: asked.append(dev) or [("matmul", 1.0)]
    rows = runner._benchmark(target, "cpu", lambda msg: None)
    assert asked == ["cpu"] and rows == [{"op": "matmul", "cpu_ms": 1.0, "gpu_ms": None}]


def test_tf32_flags_are_left_alone_unless_the_target_asks(monkeypatch):
    import torch

    from reporter.collect import runner

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"read {name}")

        def __setattr__(self, name, value):
            raise AssertionError(f"set {name}")

    with monkeypatch.context() as m:
        m.setattr(torch.backends.cuda, "matmul", Untouchable())
        m.setattr(torch.backends, "cudnn", Untouchable())
        with runner._tf32(False):
            pass
    before = torch.get_float32_matmul_precision()
    with runner._tf32(True):
        assert runner.tf32_state()["matmul"] is True
        assert runner.tf32_state()["conv"] is True
        # The legacy getters, which torch.compile and Lightning read, still answer (they
        # raised while only the new API was set: "a mix of the legacy and new APIs").
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_a_forced_tf32_is_recorded_and_reported(monkeypatch, stored):
    from reporter.collect import runner
    from reporter.render.report import render_markdown
    from reporter.render.view import LANGUAGES
    from reporter.pipeline import report_view
    from reporter.store import load

    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    state = runner.tf32_state()
    assert state["override"] is True and state["matmul"] is True
    _, folder = stored("cuda-seed001")
    run = load(folder)
    run.sections[0].precision = {"tf32": state, "autocast": None}
    words = {"en": "forced by", "ru": "принудительно", "zh": "强制开启"}
    for lang in LANGUAGES:
        md = render_markdown(report_view(run, lang))
        assert words[lang] in md and "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in md


def test_a_cuda_run_without_a_preset_uses_sizes_that_fill_the_gpu():
    from reporter.collect.runner import default_preset

    h100, card_24gb = 85_520_809_984, 25_386_352_640  # total_memory as torch reads them
    assert default_preset("cuda", None, h100) == "large"
    assert default_preset("cuda:1", None, h100) == "large"
    # large's transformer training step allocated 31.6 GB on the H100: not on a 24 GB card
    assert default_preset("cuda", None, card_24gb) == "default"
    assert default_preset("cpu", None) == "default"
    assert default_preset("cuda", "default", h100) == "default"  # asked for: kept
    assert default_preset("cuda", "large", card_24gb) == "large"


def test_a_report_says_when_kernels_are_too_small_for_the_gpu(stored):
    from reporter.model.profile import Op
    from reporter.render.report import render_markdown
    from reporter.render.view import LANGUAGES
    from reporter.pipeline import report_view
    from reporter.store import load

    _, folder = stored("cuda-seed001")
    run = load(folder)
    assert "`--preset large`" not in render_markdown(report_view(run, "en"))  # long kernels
    run.target.update(builtin=True, preset="default")
    p = run.sections[0].profile
    p.ops = [o for o in p.ops if o.kind != "kernel"] + [
        Op("void tiny_kernel<float>()", calls=100_000, self_device_us=300_000.0, kind="kernel")]
    words = {"en": "too small", "ru": "слишком мелкие задачи", "zh": "对这块 GPU 来说太小"}
    for lang in LANGUAGES:
        md = render_markdown(report_view(run, lang))
        assert words[lang] in md and "`--preset large`" in md, lang


def test_a_cuda_run_without_kernels_says_so(stored, capsys):
    from reporter.collect import runner
    from reporter.render.report import render_markdown
    from reporter.render.view import LANGUAGES
    from reporter.pipeline import report_view
    from reporter.store import load

    _, folder = stored("cuda-seed001")
    run = load(folder)
    p = run.sections[0].profile
    p.ops = [o for o in p.ops if o.kind != "kernel"]
    for o in p.ops:
        o.self_device_us = o.device_total_us = 0.0
    p.self_device_us = 0.0
    runner._check_kernels(p)
    assert "holds no kernels" in capsys.readouterr().err
    words = {"en": "No CUDA kernels were recorded", "ru": "Ядра CUDA не записаны",
             "zh": "没有记录到 CUDA kernel"}
    for lang in LANGUAGES:
        assert words[lang] in render_markdown(report_view(run, lang))


def test_device_annotations_are_not_host_marks_or_steps(tmp_path):
    import json

    from reporter.analyze.analyzer import step_wall_us
    from reporter.ingest.traces import read_trace

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 100, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10,
         "dur": 50, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 20, "dur": 5, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 30, "dur": 40,
         "args": {"correlation": 7, "External id": 1}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0,
         "tid": 7, "ts": 30, "dur": 400, "args": {}},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    p = read_trace(path)
    assert p.steps == 1
    rows = [o for o in p.ops if o.name.startswith("ProfilerStep")]
    assert sorted(o.kind for o in rows) == ["annotation", "device_annotation"]
    assert step_wall_us(p) == 100


def test_native_stderr_is_passed_on_as_it_comes_without_kinetos_lines(capfd):
    import os
    import time

    from reporter.collect.runner import _filtered_native_stderr

    with _filtered_native_stderr():
        os.write(2, b"USDT: profiler_start\nNCCL WARN something broke\n")
        deadline = time.monotonic() + 5
        seen = ""
        while "NCCL WARN" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen += capfd.readouterr().err
        # still inside: a process that died here would have shown the message
        assert "NCCL WARN something broke" in seen and "USDT" not in seen
    os.write(2, b"after\n")
    assert "after" in capfd.readouterr().err


def test_kinetos_failed_write_line_is_dropped_where_reporter_says_it_in_one(capfd):
    """D1: a full disk while torch exports its trace: reporter's [io] line says it, so
    kineto's own "Failed to write to log file!" is not a second line."""
    import os
    import time

    from reporter.collect.runner import _KINETO_WRITE_FAILED, _filtered_native_stderr

    with _filtered_native_stderr(_KINETO_WRITE_FAILED):
        os.write(2, b"ERROR:2026 output_json.cpp:977] Failed to write to log file!\n"
                    b"something else\n")
        deadline, seen = time.monotonic() + 5, ""
        while "something else" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen += capfd.readouterr().err
    seen += capfd.readouterr().err
    assert "something else" in seen and "Failed to write" not in seen


def test_cnn_fixed_prefetches_no_more_than_shared_memory_holds():
    from reporter.collect.targets.cnn import _worker_settings

    batch = 256 * 3 * 128 * 128 * 4  # the large preset: 50 MB a batch
    assert _worker_settings(batch, 64 << 20) == {"num_workers": 0}  # Docker's default /dev/shm
    s = _worker_settings(batch, 1 << 30)
    assert s["num_workers"] * s["prefetch_factor"] * batch <= (1 << 30) // 2
    assert _worker_settings(1 << 20, 8 << 30)["prefetch_factor"] == 4


def test_cnn_fixed_loads_a_batch_in_one_indexing(monkeypatch):
    """cuda review 2026-11-22 #11 (partly fixed): with Docker's 64 MB /dev/shm the fixed
    twin has no workers, and the main thread indexed each sample and stacked them (tens of
    ms a step at the large preset); the batch is now one indexing, the same batch."""
    import torch
    from torch.utils.data import default_collate

    from reporter.collect.targets import cnn

    monkeypatch.setattr(cnn, "_shared_memory_free", lambda: 64 << 20)
    monkeypatch.setattr(cnn, "_worker_settings", lambda *a: {"num_workers": 0})
    target = cnn.fixed("cpu", "tiny")
    dataset = target.batches.dataset
    asked = []
    monkeypatch.setattr(type(dataset), "__getitem__",
                        lambda self, i: asked.append(i) or pytest.fail("per sample"))
    images, labels = next(iter(target.batches))
    assert not asked and images.shape[0] == labels.shape[0] == target.batch_size
    indices = [3, 0, 5]
    monkeypatch.undo()
    one = default_collate([dataset[i] for i in indices])
    whole = dataset.__getitems__(indices)
    assert torch.equal(one[0], whole[0]) and torch.equal(one[1], whole[1])


STICKY_TARGET = '''
import torch
from reporter.collect.target import Target


def build(device="cpu", preset="default"):
    model = torch.nn.Linear(4, 4)

    def forward(model, batch):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\\n"
                           "CUDA kernel errors might be asynchronously reported")
    return Target(model=model, batches=[(torch.ones(2, 4),)], batch_size=2,
                  modes=("inference",), forward=forward)
'''


def test_a_sticky_cuda_error_stops_the_suite_instead_of_blaming_the_next_targets(tmp_path):
    """cuda review N9: after an illegal address the CUDA context is gone, and every later
    target failed 'while building' with the same error."""
    from conftest import cli

    (tmp_path / "sticky.py").write_text(STICKY_TARGET, encoding="utf-8")
    runs = tmp_path / "runs"
    result = cli("run", "--target", tmp_path / "sticky.py:build", "--target", "tensor-ops",
                 "--preset", "tiny", "--device", "cpu", "--out", runs, "--quiet")
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert "illegal memory access" in lines[-2]
    assert "[cuda-broken]" in lines[-1] and "1 remaining target(s) were not run" in lines[-1]
    assert not list(runs.glob("*/run.json")), "tensor-ops was not run"
