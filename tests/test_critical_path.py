"""The critical path of a step: a hand-made trace with a known answer, and the corpus
traces against an independent walk over their raw events."""

from __future__ import annotations

import bisect
import gzip
import json
import re
from pathlib import Path

import pytest

from reporter.analyze.critical_path import BETWEEN, DEVICE_KINDS
from reporter.ingest.traces import read_trace

from test_breakdown import CORPUS, _x  # the traces' corpus and its event maker
from test_traces import _union  # a sorted, disjoint union of spans


def _launch(ts, corr, dur=10, name="cudaLaunchKernel", tid=1):
    return _x(name, ts, dur, cat="cuda_runtime", tid=tid, correlation=corr)


def _kernel(name, ts, dur, corr=None, stream=7, cat="kernel"):
    return _x(name, ts, dur, cat=cat, pid=0, tid=stream,
              **({"correlation": corr} if corr is not None else {}))


def _critical(tmp_path, events):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return read_trace(path).breakdown.critical


def _nonzero(d):
    return {k: v for k, v in d.items() if v}


KNOWN = [
    _x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
    _x("forward", 0, 140, cat="user_annotation"),
    _launch(100, 1), _launch(130, 2),
    _x("cudaDeviceSynchronize", 150, 680, cat="cuda_runtime"),
    _x("Optimizer.step#SGD.step", 900, 100, cat="user_annotation"),
    _kernel("void k1", 120, 400, corr=1), _kernel("void k2", 520, 300, corr=2),
]


def test_a_step_with_a_known_critical_path(tmp_path):
    """Host 0-100 launches k1 (runs 120-520) and k2 (queued behind it, 520-820), waits
    in cudaDeviceSynchronize 150-830, then works until the step ends at 1000. Walked back:
    host 830-1000, the sync's return 820-830, k2 520-820, k1 120-520 (k2 waited for k1,
    not for its launch at 130), k1's launch 100-120, host 0-100."""
    c = _critical(tmp_path, KNOWN)
    assert c["steps"] == 1 and c["step_us"] == 1000 and c["device"]
    assert _nonzero(c["host_us"]) == {"forward": 100, "optimizer": 100, "other": 70}
    assert _nonzero(c["device_us"]) == {"compute": 700}
    assert _nonzero(c["between_us"]) == {"launch": 20, "sync": 10}
    assert c["host_total_us"]["forward"] == 140 and c["host_total_us"]["other"] == 760
    assert c["device_total_us"]["compute"] == 700




def test_steps_that_end_on_the_host_while_the_gpu_runs_their_work(tmp_path):
    """A GPU-bound loop: each step launches its kernel and ends on the host while the
    kernel still runs; the next step's sync waits for it. Walked once from the end of the
    last kernel (260) and cut at the steps' edges: step 1 is k1's launch 0-2 and k1
    2-100; step 2 is k1 100-150, the sync's return 150-151, the host 151-152, k2's launch
    152-154 and k2 154-200. Each step walked from its own end on the host read step 1 as
    all host."""
    c = _critical(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("ProfilerStep#2", 100, 100, cat="user_annotation"),
        _launch(0, 1, dur=1), _kernel("void k1", 2, 148, corr=1),
        _x("cudaStreamSynchronize", 100, 51, cat="cuda_runtime"),
        _launch(152, 2, dur=1), _kernel("void k2", 154, 106, corr=2),
    ])
    assert c["steps"] == 2 and c["step_us"] == 100
    assert _nonzero(c["device_us"]) == {"compute": (98 + 96) / 2}
    assert _nonzero(c["between_us"]) == {"launch": (2 + 2) / 2, "sync": 1 / 2}
    assert sum(c["host_us"].values()) == 1 / 2


def test_json_and_the_report_carry_it_in_each_language(tmp_path):
    """--json has the path under the breakdown; each language's report has its section
    (the compute row: 700 us, 70% of the step, all of the compute on the path); a CPU
    trace's report has none (its path is its host phases, already shown)."""
    from conftest import cli
    from reporter.render.view import LANGUAGES, Fmt

    path = tmp_path / "known.json"
    path.write_text(json.dumps({"traceEvents": KNOWN}))
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    c = json.loads(res.out)["profiles"][0]["breakdown"]["critical"]
    assert c["device_us"]["compute"] == 700 and c["between_us"]["launch"] == 20
    heading = {"en": "**Critical path:**", "ru": "**Критический путь:**", "zh": "**关键路径：**"}
    for lang in LANGUAGES:
        res = cli("analyze", path, "--lang", lang, "--out", tmp_path)
        assert res.code == 0, res.err
        md = Path(res.out.strip().splitlines()[-1]).read_text()
        fmt = Fmt(lang)
        assert heading[lang] in md, lang
        row = next(line for line in md.splitlines()
                   if line.startswith("| GPU") and fmt.time(700) in line)
        assert row.split("|")[2:5] == [f" {fmt.time(700)} ", f" {fmt.pct(0.7)} ",
                                       f" {fmt.pct(1.0)} "], row
        assert "{{" not in md and "None" not in md
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps({"traceEvents": [e for e in KNOWN if e["cat"] != "kernel"]}))
    res = cli("analyze", cpu, "--lang", "en", "--out", tmp_path)
    assert res.code == 0 and "Critical path" not in Path(res.out.strip()).read_text()


def test_launch_bound_event_waits_and_waiting(tmp_path):
    """A kernel that waits for its launch sends the path back to the launching thread
    (here another thread than the step's); one queued long after its launch while other
    device work ended waited for that work, not for the host; one that starts 5 us after
    another stream's work ended, long after its own stream and launch were ready, waited
    for that work (an event); a gap the trace does not explain is 'waiting'."""
    c = _critical(tmp_path, [
        _x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        _launch(50, 1, tid=2),                       # on the backward thread
        _kernel("void a", 70, 100, corr=1),          # 70-170, stream 7
        _launch(60, 2),
        _kernel("ncclKernel_AllReduce", 200, 300, corr=2, stream=9),  # 200-500: its launch
        _launch(80, 3),
        _kernel("void b", 505, 95, corr=3),          # 505-600: waited for the NCCL kernel
        _launch(90, 4),
        _kernel("void c", 700, 50, corr=4),          # 700-750: 100 us gap, unexplained
        _x("cudaStreamSynchronize", 600, 160, cat="cuda_runtime"),  # 600-760
    ])
    # host 760-1000; sync 750-760; c 700-750; waiting 600-700; b 505-600; latency
    # 500-505 (the event); nccl 200-500, queued since 60 while a ran: waiting 170-200;
    # a 70-170; its launch 50-70 on thread 2; host 0-50 there
    assert _nonzero(c["device_us"]) == {"compute": 245, "communication": 300}
    assert _nonzero(c["between_us"]) == {"sync": 10, "waiting": 130, "latency": 5,
                                         "launch": 20}
    assert _nonzero(c["host_us"]) == {"other": 290}


def test_a_cpu_trace_is_its_host_phases(tmp_path):
    c = _critical(tmp_path, [
        _x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _x("forward", 10, 40, cat="user_annotation"),
        _x("aten::mm", 12, 5),
        _x("backward", 50, 30, cat="user_annotation"),
        _x("ProfilerStep#2", 100, 50, cat="user_annotation"),
        _x("forward", 100, 50, cat="user_annotation"),
    ])
    assert c["steps"] == 2 and not c["device"] and c["device_us"] == {}
    assert _nonzero(c["host_us"]) == {"forward": 45, "backward": 15, "other": 15}
    assert c["host_us"] == c["host_total_us"]


# --- corpus: an independent walk over the raw events -------------------------------

_WAITS = re.compile(r"Synchronize$|^(cuda|hip)Memcpy(Async)?$")
_RUNTIME = ("cuda_runtime", "cuda_driver", "Runtime")
_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
_PHASE = [("data", re.compile(r"^enumerate\(DataLoader\)|^data_loading$")),
          ("optimizer", re.compile(r"^Optimizer\.(step|zero_grad)#|^optimizer_step$")),
          ("backward", re.compile(r"^backward$|^autograd::engine::evaluate_function")),
          ("forward", re.compile(r"^forward$"))]


def _raw(path: Path) -> list[dict]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return [e for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"]


def _device_kind(e: dict) -> str:
    if e["cat"] == "gpu_memcpy":
        return "copy_h2d" if "HtoD" in e["name"] else "copy_d2h" if "DtoH" in e["name"] \
            else "copy_d2d"
    if e["cat"] == "gpu_memset":
        return "memset"
    return "communication" if re.search("nccl", e["name"], re.I) else "compute"


def _walk_raw(events: list[dict], latency: float = 10.0):
    """Per step: the step's length, host time on the path (by thread interval), device
    time on it per activity, links per kind; written from the module's doc, not its code:
    plain loops over the raw events, a linear search for each predecessor, one walk over
    all the steps cut at their edges."""
    work = sorted((e for e in events if e["cat"] in _DEVICE), key=lambda e: (e["ts"], e["dur"]))
    runtime = [e for e in events if e["cat"] in _RUNTIME]
    launch = {e["args"]["correlation"]: e for e in runtime if "correlation" in e.get("args", {})}
    waits = [e for e in runtime if _WAITS.search(e["name"])
             or ("Launch" in e["name"] and e["dur"] > 100)]  # a launch at a full queue
    ends = sorted((w["ts"] + w["dur"], i) for i, w in enumerate(work))
    end_keys = [t for t, _ in ends]

    def last_ending(after, upto):
        k = bisect.bisect_right(end_keys, upto) - 1
        return ends[k][1] if k >= 0 and end_keys[k] > after else None

    prev, last = {}, {}
    for i, w in enumerate(work):
        prev[i] = last.get((w["pid"], w["tid"]))
        last[(w["pid"], w["tid"])] = i
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#")),
                   key=lambda e: (e["ts"], e["ts"] + e["dur"]))
    # One walk over all the steps, from the last step's end, or from the end of the
    # device work launched in the steps where that is later; cut at the steps' edges.
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    host, dev, links, seen = [], {}, {}, set()
    thread, t, item = (steps[-1]["pid"], steps[-1]["tid"]), hi, None
    late = [i for i, w in enumerate(work)
            if (rt := launch.get(w.get("args", {}).get("correlation"))) is not None
            and lo <= rt["ts"] <= hi and w["ts"] + w["dur"] > hi]
    if late:
        item = max(late, key=lambda i: work[i]["ts"] + work[i]["dur"])
        t = work[item]["ts"] + work[item]["dur"]

    def add(d, k, a, b):
        if b > max(a, lo):
            d.setdefault(k, []).append((max(a, lo), b))
    while t > lo:
        if item is None:
            mine = sorted((w for w in waits if (w["pid"], w["tid"]) == thread
                           and lo < w["ts"] + w["dur"] <= t + 1e-3),
                          key=lambda w: w["ts"] + w["dur"], reverse=True)
            for w in mine:
                end = min(w["ts"] + w["dur"], t)
                found = last_ending(w["ts"], end + 1e-3)
                if found is not None and found not in seen:
                    break
            else:
                host.append((lo, t))
                break
            host.append((end, t))
            w_end = min(work[found]["ts"] + work[found]["dur"], end)
            add(links, "sync", w_end, end)
            t, item = w_end, found
            continue
        seen.add(item)
        w = work[item]
        add(dev, _device_kind(w), w["ts"], t)
        start = w["ts"]
        if start <= lo:
            break
        options = []  # (time, how, next item, next thread)
        if prev[item] is not None and prev[item] not in seen:
            p = work[prev[item]]
            options.append((min(p["ts"] + p["dur"], start), "queue", prev[item], None))
        rt = launch.get(w.get("args", {}).get("correlation"))
        after = options[0][0] if options else float("-inf")
        if rt is not None and after < rt["ts"] <= start + 1e-3:
            # launched after its stream was free and queued past its latency while
            # device work ended: that work held it
            held = (last_ending(rt["ts"], start + 1e-3) if start - rt["ts"] > latency
                    else None)
            if held is not None and held not in seen:
                options.append((min(work[held]["ts"] + work[held]["dur"], start),
                                "queue", held, None))
            else:
                options.append((min(rt["ts"], start), "launch", None,
                                (rt["pid"], rt["tid"])))
        best = max(options, key=lambda o: o[0]) if options else None
        if best is None or best[0] < start - latency:
            k = last_ending(max(best[0] if best else float("-inf"), start - latency),
                            start + 1e-3)
            if k is not None and k not in seen and \
                    (work[k]["pid"], work[k]["tid"]) != (w["pid"], w["tid"]):
                best = (min(work[k]["ts"] + work[k]["dur"], start), "queue", k, None)
        if best is None:
            add(links, "unknown", lo, start)
            break
        how = best[1]
        if how == "queue":
            how = "latency" if start - best[0] <= latency else "waiting"
        add(links, how, best[0], start)
        t = best[0]
        if best[2] is not None:
            item = best[2]
        else:
            item, thread = None, best[3]

    def cut(intervals, a, b):
        return sum(max(0.0, min(y, b) - max(x, a)) for x, y in intervals)
    out = []
    for step in steps:
        a, b = step["ts"], step["ts"] + step["dur"]
        out.append((b - a, [(max(x, a), min(y, b)) for x, y in host if y > a and x < b],
                    {k: cut(v, a, b) for k, v in dev.items()},
                    {k: cut(v, a, b) for k, v in links.items()}))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")
@pytest.mark.parametrize("name", ["07_hta-a100-80gb-rank0.json.gz",
                                  "11_hta-v100-nccl-rank1.json.gz",
                                  "13_hta-v100-rank1-test.json.gz"])
def test_corpus_paths_match_an_independent_walk(name):
    path = CORPUS / name
    c = read_trace(path).breakdown.critical
    raw = _walk_raw(_raw(path))
    n = len(raw)
    assert c["steps"] == n and c["device"]
    assert c["step_us"] == pytest.approx(sum(r[0] for r in raw) / n, abs=1e-6)
    # The path tiles the step: host, device and links sum to its length.
    parts = (sum(c["host_us"].values()) + sum(c["device_us"].values())
             + sum(c["between_us"].values()))
    assert parts == pytest.approx(c["step_us"], rel=1e-9)
    for k in DEVICE_KINDS:
        assert c["device_us"][k] == pytest.approx(sum(r[2].get(k, 0) for r in raw) / n,
                                                  abs=1e-3), k
        assert c["device_us"][k] <= c["device_total_us"][k] + 1e-6, k
    for k in BETWEEN:
        assert c["between_us"][k] == pytest.approx(sum(r[3].get(k, 0) for r in raw) / n,
                                                   abs=1e-3), k
    host = sum(b - a for r in raw for a, b in r[1]) / n
    assert sum(c["host_us"].values()) == pytest.approx(host, abs=1e-3)
    for k, v in c["host_us"].items():
        assert v <= c["host_total_us"][k] + 1e-6, k


# --- our own H200 trace: a GPU-bound training step --------------------------------------

H200_TRAIN = (Path(__file__).parent / "fixtures" / "traces"
              / "h200-transformer-large-train.json.gz")


def _inside(u, lo, hi):
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in u)


def test_a_gpu_bound_h200_step_is_on_the_gpu():
    """`transformer` at the `large` preset in training on an H200 (2026-12-04, torch
    2.11): its GPU never runs dry but after each step's input copy, which waits for the
    step before. From the raw events: the share of the steps in which the GPU ran
    nothing and had nothing queued (no work launched, its call returned, and not yet
    started) is the most the host (and its launches) can hold of the path; the path's GPU
    work is at most the GPU's busy time. Each step walked from its own end on the host
    read 15.2% host."""
    events = _raw(H200_TRAIN)
    work = [e for e in events if e["cat"] in _DEVICE]
    calls = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in events
             if e["cat"] in _RUNTIME and "correlation" in e.get("args", {})}
    busy = _union((w["ts"], w["ts"] + w["dur"]) for w in work)
    pending = _union((min(calls.get(w["args"].get("correlation"), w["ts"]), w["ts"]),
                          w["ts"] + w["dur"]) for w in work)
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e["name"].startswith("ProfilerStep#")]
    wall = sum(b - a for a, b in steps)
    busy_share = sum(_inside(busy, a, b) for a, b in steps) / wall
    dry_share = 1 - sum(_inside(pending, a, b) for a, b in steps) / wall
    assert busy_share > 0.98 and dry_share < 0.01  # what makes this trace GPU-bound

    c = read_trace(H200_TRAIN).breakdown.critical
    host = (sum(c["host_us"].values()) + c["between_us"]["launch"]) / c["step_us"]
    assert host <= dry_share + 0.002
    assert sum(c["device_us"].values()) / c["step_us"] <= busy_share + 1e-9
    assert sum(c["device_us"].values()) / c["step_us"] > 0.98
