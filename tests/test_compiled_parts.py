"""The GPU time of compiled regions, by how it was launched: CUDA graph replays, other
copies and sets, other kernels. The parts add up to the region's time, so a reader can
check the headline against them (corpus trace 07: 23.9 ms of region time read as the
graphs' 21.1 ms plus the generated kernel's 1.41 ms, which the graphs already hold).
Checked against arithmetic done here on the raw events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from reporter.analyze.compiled import compiled
from reporter.ingest.traces import read_trace
from reporter.pipeline import profiles_view
from reporter.render.report import render_markdown
from conftest import SHARED

TRACE_07 = SHARED / "corpus" / "traces" / "07_hta-a100-80gb-rank0.json.gz"


def _x(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def _trace(path: Path) -> Path:
    """One step: a compiled forward (CompiledFunction) that replays a graph of two
    kernels, copies once and launches one kernel; an eager kernel after it."""
    ev = [_x("ProfilerStep#0", "user_annotation", 0, 1000),
          _x("CompiledFunction", "cpu_op", 10, 500, **{"External id": 1}),
          _x("cudaGraphLaunch", "cuda_runtime", 20, 10, correlation=100),
          _x("cudaMemcpyAsync", "cuda_runtime", 40, 10, correlation=101),
          _x("cudaLaunchKernel", "cuda_runtime", 60, 10, correlation=102),
          _x("aten::relu", "cpu_op", 600, 50, **{"External id": 2}),
          _x("cudaLaunchKernel", "cuda_runtime", 610, 10, correlation=103),
          # on the device (stream 7)
          _x("triton_poi_fused_add_0", "kernel", 100, 30, tid=7, correlation=100),
          _x("ampere_sgemm_128x64_nn", "kernel", 130, 70, tid=7, correlation=100),
          _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 200, 40, tid=7, correlation=101),
          _x("void at::native::vectorized_elementwise_kernel", "kernel", 240, 15, tid=7,
             correlation=102),
          _x("void at::native::relu_kernel", "kernel", 700, 20, tid=7, correlation=103)]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_the_parts_of_a_planted_region_are_its_launches(tmp_path):
    p = read_trace(_trace(tmp_path / "t.json"))
    c = compiled(p)
    assert c is not None
    assert c.device_split_us == {"graphs": 100.0, "copies": 40.0, "kernels": 15.0}
    assert c.compiled_device_us == pytest.approx(155.0)  # the eager relu kernel is not in it
    md = render_markdown(profiles_view([p], "t.json", "en"))
    assert ("(155\u00a0μs per step: CUDA graph replays 100\u00a0μs, other copies and sets "
            "40.0\u00a0μs and other kernels 15.0\u00a0μs)") in md
    # the compiled graph's call is no operator of the user's: not "dominant"
    assert "**`CompiledFunction`** alone takes" not in md
    for lang, words in (("ru", "воспроизведение CUDA graphs — 100\u00a0мкс"),
                        ("zh", "CUDA Graphs 重放 100\u00a0μs")):
        assert words in render_markdown(profiles_view([p], "t.json", lang))


def test_one_way_of_launching_prints_no_parts(tmp_path):
    """A region whose GPU work all came from graph replays: the parts would repeat the
    headline, and are left out."""
    path = _trace(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["args"].get("correlation")
                          not in (101, 102)]
    path.write_text(json.dumps(doc))
    md = render_markdown(profiles_view([read_trace(path)], "t.json", "en"))
    assert "(100\u00a0μs per step);" in md and "graph replays" not in md


@pytest.mark.skipif(not TRACE_07.is_file(), reason="../shared/corpus is absent")
def test_trace_07s_parts_match_the_raw_events():
    """Each device event whose runtime call lies inside a CompiledFunction or
    CompiledFunctionBackward on the same thread, summed by how it was launched, per
    profiled step."""
    ev = json.load(gzip.open(TRACE_07))["traceEvents"]
    xs = [e for e in ev if e.get("ph") == "X"]
    steps = sum(1 for e in xs if str(e["name"]).startswith("ProfilerStep#"))
    regions = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in xs
               if e["name"] in ("CompiledFunction", "CompiledFunctionBackward")]
    runtime = {e["args"]["correlation"]: e for e in xs
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    want = {"graphs": 0.0, "copies": 0.0, "kernels": 0.0}
    for k in xs:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        r = runtime.get(k["args"].get("correlation"))
        if r is None or not any(lo <= r["ts"] <= hi and tid == r["tid"]
                                for lo, hi, tid in regions):
            continue
        part = ("graphs" if r["name"] == "cudaGraphLaunch" else
                "kernels" if k["cat"] == "kernel" else "copies")
        want[part] += k["dur"]
    c = compiled(read_trace(TRACE_07))
    assert c is not None and c.steps == steps == 5
    for part, us in want.items():
        assert c.device_split_us[part] == pytest.approx(us, rel=1e-9), part
    assert sum(c.device_split_us.values()) == pytest.approx(c.compiled_device_us)
    # 21.1 ms of graphs, the generated kernel inside them: not to be added again
    assert c.device_split_us["graphs"] / steps == pytest.approx(c.graph_kernel_us / steps,
                                                                rel=0.01)


def test_without_graphs_the_parts_are_not_called_other(tmp_path):
    """Copies and kernels launched one by one, no graph: "copies and sets", "kernels",
    with nothing for "other" to be other than."""
    path = _trace(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["args"].get("correlation") != 100]
    path.write_text(json.dumps(doc))
    md = render_markdown(profiles_view([read_trace(path)], "t.json", "en"))
    assert ("(55.0\u00a0μs per step: copies and sets 40.0\u00a0μs and kernels 15.0\u00a0μs)"
            in md), [line for line in md.splitlines() if "compiled regions" in line]
    assert "прочие" not in render_markdown(profiles_view([read_trace(path)], "t.json", "ru"))
