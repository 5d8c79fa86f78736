"""torch.compile in a profile (reporter.analyze.compiled): compiled regions, Inductor's
kernels by the operators they fuse, CUDA graphs, recompilation inside the window; on
real traces torch wrote, a corpus trace of a compiled model on an A100, and a hand-made
trace in torch's CUDA-graph format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from conftest import SHARED
from torch.profiler import ProfilerActivity, profile

from reporter.analyze.analyzer import analyze, analyze_section
from reporter.analyze.compiled import compiled, generated_kernels
from reporter.analyze.rules import launch_overhead
from reporter.ingest.traces import read_trace
from reporter.model.profile import KIND_KERNEL, KIND_OP, KIND_RUNTIME, Op, Profile
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES
from reporter.pipeline import report_view

TRACES = SHARED / "corpus" / "traces"
needs_corpus = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/corpus is absent")


def test_generated_kernels_are_grouped_by_what_they_fuse():
    p = Profile(self_cpu_us=1000, self_device_us=1000, device_type="cuda", ops=[
        Op("triton_poi_fused_add_mul_0", calls=4, self_device_us=40, kind=KIND_KERNEL),
        Op("triton_poi_fused_add_mul_3", calls=4, self_device_us=20, kind=KIND_KERNEL),
        Op("triton_red_fused_sum_1", calls=2, self_device_us=100, kind=KIND_KERNEL),
        Op("triton__0d1d2d3d", calls=1, self_device_us=5, kind=KIND_KERNEL),
        Op("void cutlass::Kernel<x>", calls=9, self_device_us=500, kind=KIND_KERNEL),
        # the host range recent torch records around a Triton launch: not a second kernel
        Op("triton_red_fused_sum_1", calls=2, self_cpu_us=30, cpu_total_us=30, kind=KIND_OP),
        Op("aten::mul", calls=9, self_cpu_us=500, cpu_total_us=500, kind=KIND_OP)])
    rows = [(k.backend, k.kind, k.fused, k.calls, k.time_us) for k in generated_kernels(p)]
    assert rows == [("triton", "red", "sum", 2, 100), ("triton", "poi", "add_mul", 8, 60),
                    ("triton", None, None, 1, 5)]
    cpu = Profile(self_cpu_us=1000, ops=[
        Op("graph_0_cpp_fused_gelu_native_layer_norm_0", calls=3, self_cpu_us=30,
           cpu_total_us=30)])
    assert [(k.backend, k.fused) for k in generated_kernels(cpu)] == [
        ("cpp", "gelu_native_layer_norm")]
    assert compiled(Profile(self_cpu_us=1000, ops=[Op("aten::mm", calls=1)])) is None


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


@needs_corpus
def test_corpus_trace_07_compiled_functions_and_cuda_graphs_match_the_raw_events():
    path = TRACES / "07_hta-a100-80gb-rank0.json.gz"
    c = compiled(read_trace(path))
    events = _events(path)
    # Independent arithmetic over the raw events.
    steps = sum(e["name"].startswith("ProfilerStep#") for e in events)
    region = [e for e in events if e["name"] in ("CompiledFunction", "CompiledFunctionBackward")
              and e.get("cat") == "cpu_op"]
    launch = {e["args"]["correlation"] for e in events if e["name"] == "cudaGraphLaunch"}
    replayed = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and e["args"].get("correlation") in launch]
    assert c is not None and c.steps == steps == 5
    assert c.regions == []  # torch 2.0: no "Torch-Compiled Region" events
    assert c.region_calls == sum(e["name"] == "CompiledFunction" for e in region) == 35
    assert c.compiled_us == pytest.approx(sum(e["dur"] for e in region), rel=1e-9)
    assert c.graph_launches == len(launch) == 70
    assert c.graph_kernels == len(replayed) == 345
    assert c.graph_kernel_us == pytest.approx(sum(e["dur"] for e in replayed), rel=1e-9)
    # torch 2.0 named its Triton kernels by their arguments: one row, fused ops unknown.
    unnamed = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("triton__")]
    assert [(k.fused, k.calls) for k in c.kernels] == [(None, len(unnamed))]
    assert c.compile_us == 0 and c.recompiled == []


def _graph_trace(tmp_path: Path) -> Path:
    """A step with one CUDA graph replaying three kernels and one kernel launched alone,
    in the format torch writes (runtime call and kernels share a correlation id)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": 0, "dur": 1000, "args": {}},
          {"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 1, "tid": 1,
           "ts": 10, "dur": 500, "args": {"External id": 1}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1,
           "ts": 20, "dur": 30, "args": {"External id": 2, "correlation": 7}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
           "ts": 600, "dur": 5, "args": {"External id": 3, "correlation": 8}}]
    for i, (ts, dur) in enumerate([(100, 50), (150, 70), (220, 30)]):
        ev.append({"ph": "X", "cat": "kernel", "name": f"triton_poi_fused_relu_{i}", "pid": 0,
                   "tid": 7, "ts": ts, "dur": dur, "args": {"correlation": 7, "stream": 7}})
    ev.append({"ph": "X", "cat": "kernel", "name": "void other_kernel()", "pid": 0, "tid": 7,
               "ts": 610, "dur": 20, "args": {"correlation": 8, "stream": 7}})
    path = tmp_path / "graph.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_kernels_replayed_by_a_cuda_graph_belong_to_its_one_launch(tmp_path):
    p = read_trace(_graph_trace(tmp_path))
    c = compiled(p)
    assert c is not None
    assert (c.graph_launches, c.graph_kernels, c.graph_kernel_us) == (1, 3, 150)
    assert c.compiled_device_us == 150  # the graph was launched from the compiled region
    assert [(k.fused, k.calls, k.time_us) for k in c.kernels] == [("relu", 3, 150)]
    # Launch overhead counts the graph once: two launches, not four.
    many = Profile(self_cpu_us=2e4, self_device_us=1e4, device_type="cuda", ops=[
        Op("cudaGraphLaunch", calls=60, self_cpu_us=6000, kind=KIND_RUNTIME),
        Op("cudaLaunchKernel", calls=60, self_cpu_us=3000, kind=KIND_RUNTIME)])
    f = launch_overhead(many, {"ratio": 0.5, "short_kernel_us": 10.0, "min_launches": 100})
    assert f is not None and f.evidence["calls"] == 120
    assert f.evidence["op_time_us"] == 9000


def _compiled_trace(tmp_path: Path, shapes: list[int]) -> Path:
    """A compiled function called once per shape under the profiler, after one warm-up
    call of the first shape; torch.compile recompiles for each new shape."""
    torch._dynamo.reset()
    fn = torch.compile(lambda x: (x * 2).sin().sum(-1), dynamic=False)
    fn(torch.randn(4, shapes[0]))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for n in shapes:
            fn(torch.randn(4, n))
    path = tmp_path / f"compiled-{len(set(shapes))}.json"
    prof.export_chrome_trace(str(path))
    return path


def test_a_recompilation_inside_the_window_is_found_on_a_real_trace(tmp_path):
    steady = read_trace(_compiled_trace(tmp_path, [8, 8, 8]))
    c = compiled(steady)
    assert c is not None and c.regions == ["0/0"] and c.region_calls == 3
    assert c.compile_us == 0
    assert "recompilation" not in [f.rule for f in analyze(steady)]

    recompiled = read_trace(_compiled_trace(tmp_path, [8, 16, 16]))
    c = compiled(recompiled)
    assert c is not None and c.compile_us > 0 and c.compile_ids == ["0/1"]
    assert c.recompiled == ["0"]
    found = {f.rule: f for f in analyze(recompiled)}
    assert "recompilation" in found
    assert found["recompilation"].evidence["op_time_us"] == c.compile_us
    # Every finding of a compiled profile knows it, so none of them says "compile it".
    assert all(f.evidence.get("compiled") for f in found.values())


def test_the_compiled_twin_runs_compiled_without_graph_breaks_or_recompiles(tmp_path):
    """The built-in transformer-compiled, profiled by the runner: its regions, its named
    C++ kernels and their time; the runner's module marks stay off a compiled model, so
    that it neither breaks graphs nor recompiles inside the window."""
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    spec, builder = resolve("transformer-compiled")
    run = profile_target(spec, builder, RunOptions(device="cpu", preset="tiny",
                                                   time_budget_s=0.5), tmp_path)
    for section in run.sections:
        c = compiled(section.profile)
        assert c is not None, section.label
        assert c.frames == 1 and c.compile_us == 0, (section.label, c.regions, c.compile_ids)
        assert c.kernels and all(k.backend == "cpp" and k.fused for k in c.kernels)
        assert 0 < c.compiled_us <= c.step_us
        analysis = analyze_section(section, run.target.get("batch_size"))
        assert "recompilation" not in [f.rule for f in analysis.findings]
    for lang in LANGUAGES:
        text = render_markdown(report_view(run, lang))
        assert "torch.compile" in text and c.kernels[0].fused in text
