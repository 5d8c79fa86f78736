"""Where the step goes: host phases and device activity, on traces with known answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reporter.analyze.breakdown import DEVICE_ACTIVITIES, HOST_PHASES
from reporter.ingest.traces import read_trace

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "traces"


def _x(name, ts, dur, cat="cpu_op", tid=1, pid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def _kernel(name, ts, dur, stream=7, cat="kernel"):
    return _x(name, ts, dur, cat=cat, pid=0, tid=stream)


def _read(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return read_trace(path).breakdown


def _step(b, i=0):
    host = {k: v[i] for k, v in b.host_us.items()}
    device = {k: v[i] for k, v in b.device_us.items()}
    return host, device


def test_nested_and_overlapping_marks_count_once(tmp_path):
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("forward", 10, 40, cat="user_annotation"),
        _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 20, 10),  # nested
        _x("aten::mm", 12, 5),
        _x("backward", 50, 30, cat="user_annotation"),
        # the autograd engine on its own thread, overlapping the mark and past it
        _x("autograd::engine::evaluate_function: MmBackward0", 70, 20, tid=2),
        _x("Optimizer.step#SGD.step", 92, 5, cat="user_annotation"),
    ])
    assert b.marked and b.phases_found and b.steps_us == [100]
    host, device = _step(b)
    assert device == {}
    # forward 10..50 less the DataLoader inside it; backward 50..90 on two threads
    assert host == {"data": 10, "input_copy": 0, "forward": 30, "loss": 0, "backward": 40,
                    "optimizer": 5, "drain": 0, "other": 15}
    assert sum(host.values()) == b.steps_us[0]


def test_the_runners_wait_for_the_last_steps_kernels_is_its_own_phase(tmp_path):
    """The GPU runner's device_drain mark (the last recorded step waiting for its own
    kernels) is the host waiting for the device, not unmarked time; the kernels it waits
    for keep the device busy, so none of it is idle."""
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("forward", 0, 20, cat="user_annotation"),
        _x("device_drain", 30, 70, cat="user_annotation"),
        _x("cudaEventSynchronize", 31, 68, cat="cuda_runtime"),
        _kernel("sgemm", 5, 95),
    ])
    host, device = _step(b)
    assert host["drain"] == 70 and host["forward"] == 20 and host["other"] == 10
    assert device["compute"] == 95 and device.get("idle_sync", 0) == 0

def test_overlapping_streams_are_one_busy_time(tmp_path):
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _kernel("void gemm_a", 0, 50, stream=7),
        _kernel("void gemm_b", 25, 50, stream=8),
        _kernel("Memcpy HtoD (Pinned -> Device)", 60, 30, cat="gpu_memcpy"),  # 15 not hidden
        _kernel("ncclDevKernel_AllReduce_Sum_f32", 70, 20, stream=9),
    ])
    host, device = _step(b)
    assert device["compute"] == 75
    assert device["communication"] == 15  # 75..90; 70..75 ran under compute
    assert b.device_notes_us["comm_overlapped"] == [5]
    assert device["copy_h2d"] == 0  # under compute and communication
    assert device["idle_host"] == 10
    assert sum(device.values()) == 100


def test_a_long_dataloader_wait_idles_the_gpu_for_data(tmp_path):
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 80),
        _x("cudaMemcpyAsync", 80, 4, cat="cuda_runtime"),
        _kernel("Memcpy HtoD (Pageable -> Device)", 81, 4, cat="gpu_memcpy"),
        _kernel("void conv", 85, 10),
    ])
    host, device = _step(b)
    assert host["data"] == 80 and max(host, key=host.get) == "data"
    assert device == {"compute": 10, "communication": 0, "copy_h2d": 4, "copy_d2h": 0,
                      "copy_d2d": 0, "memset": 0, "idle_data": 80, "idle_sync": 1,
                      "idle_latency": 0, "idle_queued": 0, "idle_host": 5}
    assert b.device_notes_us["copy_pageable"] == [4]


def test_a_step_blocked_on_a_sync(tmp_path):
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("forward", 0, 50, cat="user_annotation"),
        _kernel("void big_kernel", 5, 55),
        _x("aten::item", 50, 42),
        _x("cudaStreamSynchronize", 50, 40, cat="cuda_runtime"),
    ])
    host, device = _step(b)
    assert device["compute"] == 55
    assert device["idle_sync"] == 30  # 60..90: the queue ran dry while the host waited
    assert device["idle_host"] == 15  # 0..5 and 90..100
    assert host["forward"] == 50 and host["other"] == 50


def test_module_times_forward_and_backward(tmp_path):
    """Module calls (with_stack's nn.Module events here) get their forward time, and the
    backward time of the autograd nodes their forward operators created (by sequence
    number), the outer module including the inner one."""
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("nn.Module: Net_0", 0, 40, cat="python_function"),
        _x("nn.Module: Linear_0", 5, 10, cat="python_function"),
        _x("aten::linear", 6, 8, **{"Sequence number": 7}),
        _x("nn.Module: Linear_1", 20, 15, cat="python_function"),
        _x("aten::linear", 21, 12, **{"Sequence number": 8}),
        _x("aten::relu", 36, 2, **{"Sequence number": 9}),
        _x("autograd::engine::evaluate_function: ReluBackward0", 50, 3, tid=2,
           **{"Sequence number": 9}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 53, 20, tid=2,
           **{"Sequence number": 8}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 73, 6, tid=2,
           **{"Sequence number": 7}),
        _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 80, 2,
           tid=2),
    ])
    assert b.module_forward_us == {"Net_0": 40, "Linear_0": 10, "Linear_1": 15}
    assert b.module_backward_us == {"Net_0": 29, "Linear_0": 6, "Linear_1": 20}
    assert b.module_depth == {"Net_0": 0, "Linear_0": 1, "Linear_1": 1}


def test_several_steps_and_no_step_marks(tmp_path):
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 10, cat="user_annotation"),
        _x("forward", 0, 8, cat="user_annotation"),
        _x("ProfilerStep#2", 10, 30, cat="user_annotation"),
        _x("forward", 10, 25, cat="user_annotation"),
    ])
    assert b.steps_us == [10, 30] and b.host_us["forward"] == [8, 25]
    b = _read(tmp_path, [_x("aten::mm", 5, 10), _x("aten::add", 20, 5)], name="u.json")
    assert not b.marked and not b.phases_found
    assert b.steps_us == [20] and b.host_us["other"] == [20]


def _ours() -> dict:
    from kineto import training_trace

    return {"written": training_trace(), "rank": training_trace(rank=1, kernel_us=90.0),
            "host-bound": training_trace(data_us=20.0, kernel_us=4.0),
            "cpu-only": {"traceEvents": [e for e in training_trace()["traceEvents"]
                                         if e.get("pid") != 0 and e.get("cat") != "ac2g"]}}


@pytest.mark.parametrize("name", ["written", "rank", "host-bound", "cpu-only", "h200"] + (
    sorted(p.name for p in CORPUS.glob("*.json*")) if CORPUS.is_dir() else []))
def test_breakdowns_sum_to_the_step(tmp_path, name):
    """Host phases and device activities each tile every step: on traces written by
    tests/kineto.py, the project's H200 trace, and each corpus trace where present."""
    from kineto import H200_TRAIN, write

    if name.startswith(tuple("0123456789")):
        _sums_to_the_step(read_trace(CORPUS / name).breakdown)
        return
    path = H200_TRAIN if name == "h200" else write(tmp_path / "t.json", _ours()[name])
    b = read_trace(path).breakdown
    _sums_to_the_step(b)
    assert bool(b.device_us) == (name != "cpu-only")


def _sums_to_the_step(b) -> None:
    assert b is not None and b.steps_us
    for i, step in enumerate(b.steps_us):
        host = sum(b.host_us[p][i] for p in HOST_PHASES)
        assert abs(host - step) <= 0.01 * step, (i, host, step)
        assert all(b.host_us[p][i] >= 0 for p in HOST_PHASES)
        if b.device_us:
            device = sum(b.device_us[a][i] for a in DEVICE_ACTIVITIES)
            assert abs(device - step) <= 0.01 * step, (i, device, step)
            assert all(b.device_us[a][i] >= -1e-6 for a in DEVICE_ACTIVITIES)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not here")
def test_the_tb_plugin_resnet_waits_for_its_dataloader():
    """The kineto sample profiled with num_workers=0: the DataLoader is a large phase, and
    the GPU idles while the host loads data."""
    b = read_trace(CORPUS / "01_kineto-tbplugin-resnet50-2021feb.pt.trace.json.gz").breakdown
    means = b.means()
    assert means["host_us"]["data"] > 0.2 * means["step_us"]
    assert means["device_us"]["idle_data"] > 0.05 * means["step_us"]


def test_a_written_step_that_waits_for_its_dataloader(tmp_path):
    """tests/kineto.py's step waits data_us for the DataLoader with nothing launched: the
    host's data phase is that wait, and the device idles for data all of it."""
    from kineto import training_trace, write

    for data_us in (400.0, 1000.0):
        doc = training_trace(data_us=data_us)
        b = read_trace(write(tmp_path / "t.json", doc)).breakdown
        means = b.means()
        waits = [e["dur"] for e in doc["traceEvents"] if e["name"].startswith("enumerate(")]
        assert means["host_us"]["data"] == pytest.approx(sum(waits) / len(waits))
        assert means["device_us"]["idle_data"] == pytest.approx(data_us)
        assert means["host_us"]["data"] > 0.2 * means["step_us"]


@pytest.mark.slow
@pytest.mark.parametrize("target, data_largest", [("cnn", True), ("cnn-fixed", False)])
def test_live_cnn_breakdown(target, data_largest, tmp_path):
    """seed 002: the baseline's step is mostly data loading; its fix's is not."""
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    spec, builder = resolve(target)
    run = profile_target(spec, builder, RunOptions(device="cpu", windows=3, time_budget_s=0.5,
                                                   warmup_steps=2), tmp_path)
    b = run.sections[0].profile.breakdown
    means = b.means()["host_us"]
    largest = max((p for p in HOST_PHASES if p != "other"), key=means.get)
    assert (largest == "data") is data_largest, means
    assert len(b.steps_us) >= 3
    # the runner's module marks: the model (by its class) and its layers, forward and
    # backward
    assert b.module_depth.get("Sequential") == 0, b.module_depth
    assert b.module_forward_us["Sequential"] > b.module_forward_us["0"] > 0
    assert b.module_backward_us["Sequential"] > 0


def test_json_carries_the_breakdown_per_profile(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("forward", 0, 60, cat="user_annotation")]}))
    out = subprocess.run([sys.executable, "-m", "reporter", "analyze", str(path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    b = json.loads(out)["profiles"][0]["breakdown"]
    assert b["steps_us"] == [100] and b["host_us"]["forward"] == [60]
    assert b["host_us"]["other"] == [40]


def test_idle_time_with_the_next_work_already_launched_is_not_the_hosts(tmp_path):
    """A gap whose next kernel was launched before it began is the device waiting on
    something else (a dependency, an event, the launch itself), not the host: from the
    launch on (its call's return), a gap is queued work; before it, the host had not
    launched."""
    def launch(ts, corr):
        return _x("cudaLaunchKernel", ts, 2, cat="cuda_runtime", correlation=corr)

    def kernel(name, ts, dur, corr):
        return _x(name, ts, dur, cat="kernel", pid=0, tid=7, correlation=corr)
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("forward", 0, 100, cat="user_annotation"),
        launch(0, 1), kernel("void k1", 0, 20, 1),
        launch(10, 2), kernel("void k2", 50, 20, 2),    # 20..50: launched by 12, queued
        launch(80, 3), kernel("void k3", 90, 10, 3),    # 70..90: host until 82, then queued
    ])
    _, device = _step(b)
    assert device["compute"] == 50
    assert device["idle_queued"] == 30  # queued for 30 us: a dependency or an event
    assert device["idle_latency"] == 8  # queued 8 us (under LATENCY_US): the launch's latency
    assert device["idle_host"] == 12  # 70..82: the host was still in its launch call
    assert sum(device.values()) == 100


def test_short_queued_gaps_are_launch_latency_and_streams_split_when_two_compute(tmp_path):
    """A gap whose next kernel waited in the queue at most LATENCY_US is launch latency,
    a longer wait a dependency or an event; with two computing streams, each stream's own
    idle time is split the same way (exact answers by hand)."""
    def launch(ts, corr):
        return _x("cudaLaunchKernel", ts, 1, cat="cuda_runtime", correlation=corr)

    def kernel(ts, dur, corr, tid=7):
        return _x(f"void k{corr}", ts, dur, cat="kernel", pid=0, tid=tid, correlation=corr)
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 200, cat="user_annotation"),
        _x("forward", 0, 200, cat="user_annotation"),
        launch(0, 1), kernel(0, 50, 1),
        launch(1, 2), kernel(54, 40, 2),             # gap 50..54, queued since 2: latency 4
        launch(2, 3), kernel(120, 30, 3, tid=9),     # stream 9; device gap 94..120: queued 26
        launch(3, 4), kernel(125, 20, 4),            # stream 7: gap 94..125, queued 31
        launch(170, 5), kernel(175, 25, 5),          # gap 150..175: host 21, then latency 4
    ])
    _, device = _step(b)
    assert device["compute"] == 50 + 40 + 30 + 25
    assert device["idle_latency"] == 4 + 4
    assert device["idle_queued"] == 26
    assert device["idle_host"] == 21
    streams = {k: {a: v[0] for a, v in split.items()} for k, split in b.stream_us.items()}
    assert list(streams) == ["stream 7", "stream 9"]
    assert streams["stream 7"] == {"busy": 50 + 40 + 20 + 25, "idle_latency": 4 + 4,
                                   "idle_queued": 31, "idle_host": 26}  # 145..171
    # stream 9: 0..3 not launched (its call returns at 3), 3..120 queued (117), 150..200
    # nothing follows
    assert streams["stream 9"] == {"busy": 30, "idle_latency": 0, "idle_queued": 117,
                                   "idle_host": 3 + 50}
    one = _read(tmp_path, [_x("ProfilerStep#1", 0, 100, cat="user_annotation"),
                           launch(0, 1), kernel(0, 50, 1), launch(1, 2), kernel(60, 10, 2)])
    assert one.stream_us == {}  # one computing stream: the device's split is its own


def test_launch_statistics_by_hand(tmp_path):
    """Delays from each launch (its call's return) to its kernel's start (median and p90
    by nearest rank),
    kernels launched per step, and the steps whose queue ran dry (idle over 10 us with
    nothing queued). Copies and kernels without a launch in the trace do not count."""
    def launch(ts, corr):
        return _x("cudaLaunchKernel", ts, 1, cat="cuda_runtime", correlation=corr)

    def kernel(ts, dur, corr, cat="kernel"):
        return _x(f"void k{corr}", ts, dur, cat=cat, pid=0, tid=7, correlation=corr)
    b = _read(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("ProfilerStep#2", 100, 100, cat="user_annotation"),
        launch(0, 1), kernel(2, 40, 1),             # delay 1 (the call returns at 1)
        launch(1, 2), kernel(42, 40, 2),            # delay 40
        launch(3, 3), kernel(82, 10, 3, cat="gpu_memcpy"),  # a copy: not a kernel launch
        kernel(92, 5, 4),                           # no launch in the trace
        launch(150, 5), kernel(160, 20, 5),         # step 2: idle 100..150 not launched
        launch(151, 6), kernel(180, 20, 6),         # delay 28
    ])
    stats = b.launch
    assert stats["kernels"] == 4  # delays 1, 40, 9, 28
    assert stats["delay_median_us"] == 9 and stats["delay_p90_us"] == 40
    assert stats["delay_max_us"] == 40
    assert stats["launches_per_step"] == 2.0  # 4 kernels launched, 2 steps
    assert stats["steps"] == 2 and stats["dry_steps"] == 1 and stats["dry_share"] == 0.5


def test_copy_bandwidth_by_hand(tmp_path):
    """Copies inside the steps per direction and memory kind, with the bandwidth they
    achieved and their link's peak from the device's name (an A100: PCIe 4.0 x16, 31.5
    GB/s; device copies: half of 2039 GB/s). A copy outside the steps or without bytes
    does not count."""
    def copy(name, ts, dur, nbytes):
        args = {"bytes": nbytes} if nbytes is not None else {}
        return _x(name, ts, dur, cat="gpu_memcpy", pid=0, tid=7, **args)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [{"name": "NVIDIA A100-SXM4-80GB",
                                                      "totalGlobalMem": 84990623744}],
                                "traceEvents": [
        _x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        copy("Memcpy HtoD (Pageable -> Device)", 10, 100, 1_000_000),     # 10 GB/s
        copy("Memcpy HtoD (Pageable -> Device)", 200, 100, 3_000_000),    # 30 GB/s
        copy("Memcpy HtoD (Pinned -> Device)", 400, 50, 1_250_000),       # 25 GB/s
        copy("Memcpy DtoH (Device -> Pinned)", 500, 10, None),            # no bytes
        copy("Memcpy DtoD (Device -> Device)", 600, 10, 5_000_000),       # 500 GB/s
        copy("Memcpy HtoD (Pinned -> Device)", 1500, 50, 1_250_000),      # after the step
    ]}))
    rows = {(r["direction"], r["kind"]): r for r in read_trace(path).breakdown.copies}
    assert set(rows) == {("h2d", "pageable"), ("h2d", "pinned"), ("d2d", "device")}
    pageable = rows[("h2d", "pageable")]
    assert (pageable["copies"], pageable["bytes"], pageable["time_us"]) == (2, 4e6, 200)
    assert pageable["gbps"] == 20.0 and pageable["peak_gbps"] == 31.5
    assert pageable["link"] == "PCIe 4.0 x16"
    assert rows[("h2d", "pinned")]["gbps"] == 25.0
    assert rows[("d2d", "device")]["gbps"] == 500.0
    assert rows[("d2d", "device")]["peak_gbps"] == 2039 / 2


def test_stragglers_by_hand(tmp_path):
    """Two ranks: rank 1's step is 130 us against rank 0's 100 (30% more), its extra time
    all compute (40 us more kernels, 10 us less idle); straggler-rank says so in each
    language."""
    from reporter.analyze.analyzer import analyze
    from reporter.ingest.traces import read_trace_folder
    from reporter.render.view import LANGUAGES, Fmt

    from conftest import render_finding

    def rank(n, step, kernel):
        (tmp_path / f"r{n}.json").write_text(json.dumps({
            "distributedInfo": {"rank": n}, "traceEvents": [
                _x("ProfilerStep#1", 0, step, cat="user_annotation"),
                _kernel("void k", 0, kernel)]}))
    rank(0, 100, 80)
    rank(1, 130, 120)
    profiles = read_trace_folder(tmp_path)
    s = profiles[0].stragglers
    assert [r["step_us"] for r in s["ranks"]] == [100, 130]
    assert s["slowest"] == "rank 1" and s["reference_step_us"] == 100
    assert s["extra_us"] == 30 and s["extra_share"] == pytest.approx(0.3)
    assert s["extra_by_cause_us"] == {"compute": 40, "communication": 0, "host": -10,
                                      "waiting": 0}
    assert s["cause"] == "compute" and not profiles[1].stragglers
    f = next(f for f in analyze(profiles[0]) if f.rule == "straggler-rank")
    assert f.evidence.rank == "1" and f.evidence.saving_us == 30
    words = {"en": "Rank 1 holds the other rank back", "ru": "Ранг 1 тормозит другой ранг",
             "zh": "Rank 1 拖慢了另一个 rank"}
    for lang in LANGUAGES:
        text = render_finding(f, lang)
        assert words[lang] in text and Fmt(lang).time(40) in text, text
        assert "{{" not in text and "None" not in text, text
    rank(1, 103, 83)  # 3% slower: under the 5% threshold
    assert "straggler-rank" not in {f.rule for f in analyze(read_trace_folder(tmp_path)[0])}


def test_stragglers_of_a_stored_cpu_run_by_hand():
    """A stored two-rank run on the CPU (gloo): rank 1 is the fixture's own profile with
    every step 30% longer and 2 ms per step of collectives, none hidden. Its ranks go side
    by side (stragglers.of_run, called by analyze_run): rank 1 is 30% slower, its causes
    from the host (communication, data loading, compute the rest); straggler-rank fires,
    and each language's report shows the table without the GPU's queued-waits column."""
    from reporter.analyze.analyzer import analyze_run
    from reporter.render.report import render_markdown
    from reporter.render.view import LANGUAGES, Fmt, run_view
    from reporter.store import load
    from conftest import FIXTURES, with_a_slower_rank

    run = load(FIXTURES / "runs" / "cpu-transformer")
    other = with_a_slower_rank(run)
    analyses = analyze_run(run)
    train = run.sections[0].profile
    assert not train.stragglers  # the analysis carries the ranks; the run is as it was read
    s = analyses[0].stragglers
    b0, b1 = train.breakdown, other[0].profile.breakdown
    assert not s["device"] and [r["rank"] for r in s["ranks"]] == ["rank 0", "rank 1"]
    assert s["slowest"] == "rank 1" and s["extra_share"] == pytest.approx(0.3)
    r0, r1 = s["ranks"]
    data0 = b0.mean(b0.host_us["data"]) + b0.mean(b0.host_us["input_copy"])
    assert r0 == pytest.approx({"rank": "rank 0", "steps": 4, "step_us": b0.mean(b0.steps_us),
                                "compute": b0.mean(b0.steps_us) - data0, "communication": 0.0,
                                "host": data0, "waiting": 0.0})
    assert r1["communication"] == 2000.0 and r1["step_us"] == pytest.approx(b1.mean(b1.steps_us))
    assert r1["compute"] + r1["communication"] + r1["host"] == pytest.approx(r1["step_us"])
    assert s["cause"] == "compute"  # 30% longer steps, 2 ms of them in collectives
    rules = {f.rule for f, _ in analyses[0].main + analyses[0].minor}
    assert "straggler-rank" in rules
    header = {"en": "| Rank | Step | Compute | Communication (not hidden) | Data loading |",
              "ru": "| Ранг | Шаг | Вычисления | Коммуникация (не перекрытая) | Загрузка данных |",
              "zh": "| Rank | 单步 | 计算 | 通信（未重叠） | 数据加载 |"}
    for lang in LANGUAGES:
        md = render_markdown(run_view(run, lang, analyses))
        assert header[lang] in md, lang
        lines = md.splitlines()
        row = lines[lines.index(header[lang]) + 3]  # the header, its rule, rank 0, rank 1
        assert row.startswith("| 1 | ") and row.count("|") == 6, row
        assert Fmt(lang).time(2000.0) in row, row
        assert "{{" not in md and "None" not in md
