"""torch.compile in a profile (reporter.analyze.compiled): compiled regions, Inductor's
kernels by the operators they fuse, CUDA graphs, recompilation inside the window; on
real traces torch wrote, a corpus trace of a compiled model on an A100, and a hand-made
trace in torch's CUDA-graph format."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SHARED
from torch.profiler import ProfilerActivity, profile

from reporter.analyze.analyzer import analyze, analyze_section
from reporter.analyze.compiled import compiled, generated_kernels
from reporter.analyze.rules.waits import launch_overhead
from reporter.ingest.traces import read_trace
from reporter.model.profile import KIND_KERNEL, KIND_OP, Op, Profile
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, Fmt, _finding_view
from reporter.pipeline import profiles_view, report_view

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


CUDA_GRAPH_LAUNCH_CBID = 311  # CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000
LAUNCH_KERNEL_CBID = 211  # CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000


def _graph_trace(tmp_path: Path, graphs: int = 1, singles: int = 1, per_graph: int = 3,
                 name: str = "graph.json") -> Path:
    """One step in the format torch (kineto over CUPTI) writes: ``graphs`` launches of a
    CUDA graph from a compiled region, each replaying ``per_graph`` kernels, and
    ``singles`` kernels launched alone. CUPTI gives a graph's kernels the correlation id of
    the ``cudaGraphLaunch`` that replayed them (kineto: RuntimeActivity's cbid and
    correlation, GpuActivity's correlation, an ``ac2g`` flow from launch to kernel); each
    launch is followed by 30 us in which the GPU has nothing queued."""
    ev: list[dict] = []
    corr, ts = 100, 10

    def launch(name: str, cbid: int, kernels: list[str]) -> None:
        nonlocal corr, ts
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1,
                   "ts": ts, "dur": 8, "args": {"cbid": cbid, "correlation": corr}})
        ev.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g",
                   "name": "ac2g"})
        start = ts + 10
        for i, k in enumerate(kernels):
            ev.append({"ph": "X", "cat": "kernel", "name": k, "pid": 0, "tid": 7,
                       "ts": start, "dur": 2, "args": {
                           "queued": 0, "device": 0, "context": 1, "stream": 7,
                           "correlation": corr, "registers per thread": 16,
                           "shared memory": 0, "grid": [1, 1, 1], "block": [128, 1, 1]}})
            if i == 0:
                ev.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": start,
                           "cat": "ac2g", "name": "ac2g", "bp": "e"})
            start += 2
        ts = start + 30

    for _ in range(graphs):
        launch("cudaGraphLaunch", CUDA_GRAPH_LAUNCH_CBID,
               [f"triton_poi_fused_relu_{i}" for i in range(per_graph)])
    region_end = ts
    for _ in range(singles):
        launch("cudaLaunchKernel", LAUNCH_KERNEL_CBID, ["void other_kernel()"])
    ev += [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1,
            "tid": 1, "ts": 0, "dur": ts + 10, "args": {}},
           {"ph": "X", "cat": "cpu_op", "name": "Torch-Compiled Region: 0/0", "pid": 1,
            "tid": 1, "ts": 5, "dur": region_end - 5, "args": {"External id": 1}},
           {"ph": "X", "cat": "user_annotation", "name": "## Call CompiledFxGraph fx0 ##",
            "pid": 1, "tid": 1, "ts": 6, "dur": region_end - 8, "args": {}}]
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": ev, "deviceProperties": []}))
    return path


def test_kernels_replayed_by_a_cuda_graph_belong_to_its_one_launch(tmp_path):
    p = read_trace(_graph_trace(tmp_path))
    c = compiled(p)
    assert c is not None
    assert (c.graph_launches, c.graph_kernels, c.graph_kernel_us) == (1, 3, 6)
    assert c.steps == 1 and c.regions == ["0/0"]
    assert c.compiled_device_us == 6  # the graph was launched from the compiled region
    # Its kernels are the region's, found through the launch's correlation id.
    assert [(k.region, k.fused, k.calls, k.time_us) for k in c.kernels] == [
        ("0/0", "relu", 3, 6)]


def test_launch_overhead_counts_a_cuda_graph_as_one_launch(tmp_path):
    """60 graph launches of 5 kernels each and 60 kernels launched alone, in one step:
    120 launches, not 360, and each graph's launch delay is its first kernel's."""
    p = read_trace(_graph_trace(tmp_path, graphs=60, singles=60, per_graph=5))
    stats = p.breakdown.launch
    assert stats["launches_per_step"] == 120
    # from each call's end (8 us) to its first kernel: not 10, the graph's last kernel's
    assert stats["delay_median_us"] == 2 and stats["delay_max_us"] == 2
    assert stats["dry_steps"] == 1
    f = launch_overhead(p, {"ratio": 0.5, "short_kernel_us": 10.0, "min_launches": 100,
                            "host_idle": 0.1})
    assert f is not None and f.evidence.calls == 120
    assert f.evidence.op_time_us == 120 * 8
    assert f.evidence.mean_kernel_us == (60 * 5 * 2 + 60 * 2) / 120  # device time a launch
    assert f.evidence.graphs == 60
    said = {"en": "60 of them replay a CUDA graph", "ru": "60 из них воспроизводят CUDA graph",
            "zh": "其中 60 次为 CUDA Graphs 重放"}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                "f": _finding_view(f, fmt)},
                               template="findings/launch-overhead.md.j2")
        assert said[lang] in text and "{{" not in text, (lang, text)


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


@pytest.mark.slow
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
    assert found["recompilation"].evidence.op_time_us == c.compile_us
    # Every finding of a compiled profile knows it, so none of them says "compile it".
    assert all(f.evidence.compiled for f in found.values())


@torch._dynamo.disable
def _eager(x: torch.Tensor) -> torch.Tensor:
    """Code Dynamo does not compile: calling it breaks the graph around it."""
    for _ in range(100):
        x = x + 1
    return x


@pytest.mark.slow
def test_a_graph_break_and_its_eager_time_are_found_on_a_real_trace(tmp_path):
    """A compiled function with a graph break, three calls under the profiler: the frame
    resumed after the break runs its region inside the first one, the eager code lies
    between them, and each generated kernel is placed in its region."""
    import torch._inductor.config as inductor
    from torch.profiler import record_function

    torch._dynamo.reset()
    threads = torch.get_num_threads()
    try:
        with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
            mp.setattr(inductor.cpp, "enable_kernel_profile", True)
            torch.set_num_threads(1)
            fn = torch.compile(lambda x: _eager((x * 2).sin()).cos().sum(), dynamic=False)
            x = torch.randn(64, 64)
            fn(x)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for i in range(3):
                    with record_function(f"ProfilerStep#{i}"):  # a step, as a schedule marks it
                        fn(x)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path / "break.json"
    prof.export_chrome_trace(str(path))
    p = read_trace(path)
    c = compiled(p)
    assert c is not None and c.steps == 3 and c.regions == ["0/0", "1/0"]
    assert c.breaks == 3 and c.break_pairs == {"0/0 → 1/0": 3}
    # The nested region counts once, the break's eager code not at all.
    assert c.compiled_us < c.step_us
    # Independently, from the raw events: from the end of the outer region's graph call to
    # the start of the region nested in it; the eager additions lie in between.
    events = sorted(_events(path), key=lambda e: (e["ts"], -e["dur"]))
    outer = [e for e in events if e["name"] == "Torch-Compiled Region: 0/0"]
    inner = [e for e in events if e["name"] == "Torch-Compiled Region: 1/0"]
    gaps = []
    for o, i in zip(outer, inner):
        assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 1e-3
        graph_end = max(e["ts"] + e["dur"] for e in events
                        if e["name"].startswith("## Call CompiledFxGraph")
                        and o["ts"] <= e["ts"] < i["ts"])
        adds = [e for e in events if e["name"] == "aten::add" and graph_end <= e["ts"] < i["ts"]]
        assert len(adds) == 100
        gaps.append(i["ts"] - graph_end)
    assert c.break_us == pytest.approx(sum(gaps), rel=1e-6)
    assert {k.region for k in c.kernels} == {"0/0", "1/0"}
    assert all(k.backend == "cpp" and k.fused for k in c.kernels)
    sin = [k for k in c.kernels if "sin" in k.fused]
    cos = [k for k in c.kernels if "cos" in k.fused]
    assert sin and {k.region for k in sin} == {"0/0"} and {k.region for k in cos} == {"1/0"}
    outer_us = sum(e["dur"] for e in outer)
    assert c.compiled_us == pytest.approx(outer_us - c.break_us, rel=1e-6)
    # Per step: each call's outer region less its break, in the step it ran in.
    assert c.step_compiled_us == pytest.approx(
        [o["dur"] - gap for o, gap in zip(outer, gaps)], rel=1e-6)
    # One thread: Inductor's kernels run without OpenMP's wake-ups, which on a busy
    # machine can outlast the whole break; the 100 eager additions take most of the step.
    found = {f.rule: f for f in analyze(p)}
    assert "graph-break" in found, (c.break_us, c.step_us)
    assert found["graph-break"].evidence.calls == 3
    assert found["graph-break"].evidence.op_time_us == c.break_us
    # The report of the trace says so, in each language: the section and the finding.
    said = {"en": ("Graph breaks split the compiled code 1 time per step",
                   "Graph breaks split the compiled model"),
            "ru": ("Из-за graph breaks скомпилированный код прерывается 1 раз за шаг",
                   "Скомпилированная модель разбита graph breaks на части"),
            "zh": ("每步有 1 次 graph break 切断编译代码", "graph break 把编译后的模型切成多段")}
    for lang in LANGUAGES:
        text = render_markdown(profiles_view([p], "break.json", lang))
        assert all(words in text for words in said[lang]), (lang, text)
        assert "`0/0 → 1/0`" in text


def test_the_compiled_twin_without_a_compiler_stops_with_one_line(monkeypatch):
    from reporter.collect.targets import compiled as twin
    from reporter.errors import WorkFailed

    monkeypatch.setattr(twin, "_compiler", lambda: None)
    with pytest.raises(WorkFailed) as e:
        twin.build("cpu", "tiny")
    assert "C++ compiler" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
@pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                    reason="no C++ compiler: torch.compile's CPU backend cannot build "
                           "(scripts/setup.sh installs g++)")
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
        # Each kernel in the region it ran in, its backward's too (by sequence number).
        assert {k.region for k in c.kernels} <= set(c.regions), (section.label, c.regions)
        assert c.breaks == 0
        # The model code of each kernel, as Inductor told it while compiling: lines of
        # the target's own file (the warm-up compiles, or loads from Inductor's cache,
        # which tells the same).
        assert all(k.sources for k in c.kernels), [k.names for k in c.kernels if not k.sources]
        assert all(line.startswith("transformer.py:") for k in c.kernels for line in k.sources)
        assert 0 < c.compiled_us <= c.step_us
        analysis = analyze_section(section, run.target.get("batch_size"))
        assert "recompilation" not in [f.rule for f in analysis.findings]
    region = {"en": "| Compiled region |", "ru": "| Скомпилированный участок |",
              "zh": "| 编译区域 |"}
    for lang in LANGUAGES:
        text = render_markdown(report_view(run, lang))
        assert "torch.compile" in text and c.kernels[0].fused in text
        assert region[lang] in text and f"| `{c.kernels[0].region}` |" in text
        assert f"`{c.kernels[0].sources[0]}`" in text


def test_inductors_account_of_model_code_is_read_from_its_structured_log():
    """reporter.collect.inductor: the provenance artifact Inductor logs (torch 2.13's
    format, two kernels of frame 0's first compilation), read into model lines per region
    and kernel, and put on the profile's kernels by their name without the graph prefix."""
    import logging

    from reporter.collect.inductor import ARTIFACT, _Capture, attach

    trace = ('  File "/home/u/model.py", line {n}, in forward\n    {code}\n'
             '        ^^^^^^^^\n')
    payload = json.dumps({
        "extern_kernels.addmm:1": [trace.format(n=19, code="y = self.l(x)")],
        "cpp_fused_add_gelu_0:2": [trace.format(n=20, code="return (y * 2 + x).sum()"),
                                   trace.format(n=19, code="y = gelu(self.l(x))"),
                                   trace.format(n=20, code="return (y * 2 + x).sum()")]})
    sources: dict = {}
    record = logging.LogRecord("torch.__trace", logging.DEBUG, "", 0, "", None, None)
    record.metadata = {"artifact": {"name": ARTIFACT, "encoding": "json"}, "frame_id": 0,
                       "frame_compile_id": 0}
    record.payload = payload
    _Capture(sources).emit(record)
    assert sources == {"0/0 cpp_fused_add_gelu_0": [
        "model.py:19 y = gelu(self.l(x))", "model.py:20 return (y * 2 + x).sum()"]}
    facts = {"kernels": [{"name": "graph_0_cpp_fused_add_gelu_0", "region": "0/0",
                          "calls": 1, "time_us": 1.0},
                         {"name": "graph_1_cpp_fused_add_gelu_0", "region": "1/0",
                          "calls": 1, "time_us": 1.0}]}
    attach(facts, sources)
    assert facts["kernels"][0]["sources"] == sources["0/0 cpp_fused_add_gelu_0"]
    assert "sources" not in facts["kernels"][1]  # another region's kernel of the same name


def test_malformed_facts_of_a_stored_run_are_left_out():
    """Profile.compiled comes from run.json, which may be hand-edited: what is not in the
    shape the trace reader writes is left out, and nothing raises."""
    p = Profile(self_cpu_us=1000, steps=2, ops=[
        Op("Torch-Compiled Region: 0/0", calls=2, self_cpu_us=10, cpu_total_us=600)],
        compiled={"kernels": [{"name": "graph_0_cpp_fused_relu_0", "region": "0/0",
                               "calls": 2, "time_us": 40.0, "sources": ["m.py:3 x", 7]},
                              {"name": 5}, "junk", {"name": "cpp_fused_x_1", "calls": True}],
                  "compiled_us": "lots", "breaks": -3, "break_pairs": ["x"],
                  "step_us": [1.0, float("nan")]})
    c = compiled(p)
    assert c is not None
    assert [(k.region, k.fused, k.calls, k.sources) for k in c.kernels] == [
        ("0/0", "relu", 2, ["m.py:3 x"])]
    assert c.compiled_us == 600 and c.breaks == 0 and c.break_pairs == {}
    assert c.step_compiled_us == [1.0, 0.0]


def test_a_graph_break_without_guard_checks_reads_in_every_language():
    """Dynamo's guard checks are said only when the trace recorded some in the breaks."""
    from reporter.analyze.compiled import graph_break

    p = Profile(self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep#1", calls=2, cpu_total_us=10_000, kind="annotation"),
        Op("Torch-Compiled Region: 0/0", calls=2, cpu_total_us=6000)],
        compiled={"kernels": [], "breaks": 2, "break_us": 1500.0, "break_lookup_us": 0.0,
                  "break_pairs": {"0/0 → 1/0": 2}})
    f = graph_break(p, {"share": 0.03})
    assert f is not None and "lookup_us" not in f.evidence.as_dict()
    assert f.evidence.share == pytest.approx(0.15)
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = render_markdown({"lang": lang, "on_gpu": False, "plural": fmt.plural,
                                "f": _finding_view(f, fmt)}, template="findings/graph-break.md.j2")
        assert fmt.pct(0.15) in text and "`0/0 → 1/0`" in text and "{{" not in text


@pytest.mark.slow
@pytest.mark.skipif(not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
                    reason="no C++ compiler: torch.compile's CPU backend cannot build "
                           "(scripts/setup.sh installs g++)")
def test_a_users_own_compiled_model_shows_its_generated_kernels(tmp_path):
    """Issue #66, item 6: a model the user compiled in their own file, with none of
    Inductor's flags set, is read like the built-in twin: its C++ kernels by name and
    model line (the runner turns Inductor's kernel profiling on before the model's first
    call, and puts it back after)."""
    import torch._inductor.config as inductor

    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    before = inductor.cpp.enable_kernel_profile
    spec, builder = resolve("tests/models/user_compiled.py:build")
    run = profile_target(spec, builder, RunOptions(device="cpu", time_budget_s=0.5), tmp_path)
    assert inductor.cpp.enable_kernel_profile == before  # put back
    c = compiled(run.sections[0].profile)
    assert c is not None and c.kernels
    assert all(k.backend == "cpp" and k.fused for k in c.kernels)
    assert any(line.startswith("user_compiled.py:") for k in c.kernels for line in k.sources)
    text = render_markdown(report_view(run, "en"))
    assert c.kernels[0].fused in text
    assert "enable_kernel_profile" not in text  # no "set this flag" advice
