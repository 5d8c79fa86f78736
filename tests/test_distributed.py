"""Distributed runs: 2 ranks with gloo on the CPU, merged by rank 0; ranks that fail or hang."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import cli
from fake_cuda import fake_cuda

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, *argv: str, env: dict | None = None, timeout: float = 240):
    import os
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "reporter", "run", "--quiet", "--lang", "en",
                          "--device", "cpu", "--out", str(tmp_path / "runs"), *argv],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    return res, time.monotonic() - start


def _load(report: Path) -> dict:
    return json.loads((report.parent / "run.json").read_text())["run"]


def test_two_ranks_with_gloo(tmp_path):
    res, _ = _run(tmp_path, "--nproc", "2", "--target", "ddp", "--rank-timeout", "120")
    assert res.returncode == 0, res.stderr[-2000:]
    report = Path(res.stdout.strip().splitlines()[-1])
    run = _load(report)
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert all(r["status"] == "ok" for r in run["ranks"])
    profiles = [run["sections"][0]["profile"], run["ranks"][1]["sections"][0]["profile"]]
    for p in profiles:  # collectives found on both ranks, and their overlap
        assert p["comm_us"] > 0 and 0 <= p["comm_overlap_us"] <= p["comm_us"]
        assert any(o["name"].startswith("gloo:") for o in p["ops"])
    md = report.read_text()
    assert "## Ranks" in md and "over 2 ranks" in md
    rows = [line for line in md.splitlines()  # the Ranks table's (its last cell: a status)
            if line.startswith(("| 0 |", "| 1 |")) and line.endswith("| ok |")]
    assert len(rows) == 2 and all("%" in row.split("|")[4] for row in rows)  # communication share
    traces = sorted(p.name for p in report.parent.glob("trace-*.gz"))
    assert traces == ["trace-train.json.gz", "trace-train.rank1.json.gz"]
    # The ranks side by side (stragglers.of_run): each rank's mean step is its trace's
    # mean ProfilerStep; the host's causes sum to it; straggler-rank fires past 5%.
    res = cli("analyze", report.parent, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)["profiles"][0]
    s = doc["stragglers"]
    assert not s["device"] and [r["rank"] for r in s["ranks"]] == ["rank 0", "rank 1"]
    for row, name in zip(s["ranks"], traces):
        steps = [e["dur"] for e in json.loads(gzip.decompress(
            (report.parent / name).read_bytes()))["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#")]
        assert row["steps"] == len(steps)
        assert row["step_us"] == pytest.approx(sum(steps) / len(steps), rel=1e-6)
        assert row["compute"] + row["communication"] + row["host"] == \
            pytest.approx(row["step_us"], rel=1e-9)
    fired = "straggler-rank" in {f["rule"] for f in doc["findings"]}
    assert fired == (s["extra_share"] > 0.05)
    assert "**Ranks side by side:**" in md and "| Rank | Step | Compute |" in md
    # The same per-rank traces, analyzed as a folder, give the same ranks table.
    folder = tmp_path / "traces"
    folder.mkdir()
    for t in traces:
        (folder / t).write_bytes((report.parent / t).read_bytes())
    res = cli("analyze", folder, "--lang", "en", "--out", tmp_path)
    assert res.code == 0, res.err
    again = Path(res.out.strip()).read_text()
    assert [r.split("|")[3:6] for r in rows] == [
        r.split("|")[3:6] for r in again.splitlines()
        if r.startswith(("| 0 |", "| 1 |")) and r.endswith("| ok |")]


FAULTY = '''
import os, time, torch
from reporter import Target

def build(device="cpu", preset="default"):
    if os.environ["RANK"] == "1":
        mode = os.environ["FAULT"]
        if mode == "raise":
            raise RuntimeError("rank 1 broke on purpose")
        if mode == "exit":
            os._exit(7)
        time.sleep(3600)  # hang
    model = torch.nn.Linear(16, 4)
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,)))]
    return Target(model=model, batches=data, batch_size=8,
                  loss=lambda out, b: torch.nn.functional.cross_entropy(out, b[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
'''


@pytest.mark.parametrize("fault,status", [("raise", "failed"), ("exit", "missing"),
                                          ("hang", "missing")])
def test_a_rank_that_fails_or_hangs_does_not_hang_the_report(tmp_path, fault, status):
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY)
    res, took = _run(tmp_path, "--nproc", "2", "--target", f"{script}:build",
                     "--rank-timeout", "15", env={"FAULT": fault})
    assert res.returncode == 0, res.stderr[-2000:]
    assert took < 90  # the rank-timeout, then the launcher stops what still runs
    report = Path(res.stdout.strip().splitlines()[-1])
    ranks = _load(report)["ranks"]
    assert [(r["rank"], r["status"]) for r in ranks] == [(0, "ok"), (1, status)]
    md = report.read_text()
    assert "Missing from this report: rank 1" in md
    if fault == "raise":
        assert "rank 1 broke on purpose" in md


def test_ddp_alone_and_nproc_errors():
    res = cli("run", "--target", "ddp", "--device", "cpu", "--quiet")
    assert res.code == 2 and "--nproc 2" in res.err
    res = cli("run", "--target", "ddp", "--nproc", "1")
    assert res.code == 2 and "2 or more" in res.err


def test_a_payload_over_the_store_limit_travels_in_parts():
    """TCPStore refuses values over 8 MiB; a rank's trace can be larger (gloo, one process)."""
    import os
    from datetime import timedelta

    import torch.distributed as dist

    from reporter.collect import distributed

    port = distributed.free_port()
    kv = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=True,
                       timeout=timedelta(seconds=30), wait_for_workers=False)
    big = os.urandom(9 << 20)  # 9 MiB
    distributed.post(kv, "reporter/1", 1, {"status": "ok", "run": {"id": "x"}},
                     {"trace-train.json.gz": big})
    world = distributed.World(rank=0, size=2, local_rank=0)
    results = distributed.Peers(kv, world, 10).collect("reporter/1")
    assert results[1]["status"] == "ok" and results[1]["trace_bytes"]["trace-train.json.gz"] == big


def test_a_result_the_store_refuses_becomes_a_failure_that_says_why():
    from reporter.collect import distributed

    class Refusing(dict):
        def set(self, key, value):
            if "trace" in key:
                raise RuntimeError("value too large")
            self[key] = value.encode() if isinstance(value, str) else value

        def get(self, key):
            return self[key]

    kv = Refusing()
    distributed.post(kv, "reporter/1", 3, {"status": "ok"}, {"t.json.gz": b"x"})
    result = json.loads(distributed.take(kv, "reporter/1/3/result"))
    assert result["status"] == "failed" and "value too large" in result["error"]


def test_nproc_beyond_the_gpus_is_refused_before_starting(monkeypatch):
    import torch

    from reporter.collect import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    started = []
    monkeypatch.setattr(distributed, "launch", lambda *a, **k: started.append(a) or 0)
    res = cli("run", "--nproc", "2", "--target", "ddp", "--device", "cuda")
    assert res.code == 2 and "needs 2 GPUs" in res.err and not started
    res = cli("run", "--nproc", "2", "--target", "ddp")  # auto picks the GPU: same check
    assert res.code == 2 and not started


def test_nccl_errors_raise_in_the_rank(monkeypatch):
    import torch.distributed as dist

    from reporter.collect import distributed

    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    seen = {}
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **k: seen.update(
        backend=backend, handling=os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")))
    with fake_cuda(count=2):
        device = distributed.init(distributed.World(1, 2, 1), "cuda", 30)
    assert device == "cuda:1" and seen == {"backend": "nccl", "handling": "2"}


def test_a_rank_beyond_the_machines_gpus_is_a_usage_error(monkeypatch):
    """cuda review N16: under torchrun with fewer GPUs than local ranks, set_device raised
    outside any of reporter's errors; --nproc 2 on one GPU suggested --nproc 1."""
    import torch.distributed as dist

    from reporter.collect import distributed
    from reporter.errors import BadInput

    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: pytest.fail("joined"))
    with fake_cuda(count=1), pytest.raises(BadInput, match="local rank 1.*1 GPU"):
        distributed.init(distributed.World(1, 2, 1), "cuda", 30)
    with fake_cuda(count=1), pytest.raises(BadInput) as refused:
        distributed.check_devices(2, "cuda")
    assert "--nproc 1" not in str(refused.value) and "--device cpu" in str(refused.value)
