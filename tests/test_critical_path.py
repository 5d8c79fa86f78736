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
    plain loops over the raw events, a linear search for each predecessor."""
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
    out = []
    for step in (e for e in events if e["name"].startswith("ProfilerStep#")):
        lo, hi = step["ts"], step["ts"] + step["dur"]
        host, dev, links, seen = [], {}, {}, set()
        thread, t, item = (step["pid"], step["tid"]), hi, None
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
                links["sync"] = links.get("sync", 0) + end - max(w_end, lo)
                t, item = w_end, found
                continue
            seen.add(item)
            w = work[item]
            kind = _device_kind(w)
            dev[kind] = dev.get(kind, 0) + t - max(w["ts"], lo)
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
                links["unknown"] = links.get("unknown", 0) + start - lo
                break
            how = best[1]
            if how == "queue":
                how = "latency" if start - best[0] <= latency else "waiting"
            links[how] = links.get(how, 0) + start - max(best[0], lo)
            t = best[0]
            if best[2] is not None:
                item = best[2]
            else:
                item, thread = None, best[3]
        out.append((hi - lo, host, dev, links))
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
