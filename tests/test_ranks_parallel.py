"""A folder of ranks read in parallel (reporter.ingest.ranks): in worker processes on this
machine (--workers) and on a Dask cluster (--scheduler), each the same report, byte for
byte, as reading the ranks one after another in this process; the same one-line error for
a bad rank; a planted straggler found among 64 ranks written in kineto's format
(tests/kineto_ranks.py). Real processes and a real Dask LocalCluster, nothing mocked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cli
from kineto_ranks import write_folder
from reporter.ingest import ranks
from reporter.ingest.traces import read_trace_folder

SLOW_RANK = 37


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("ranks") / "job", ranks=64,
                        slow_rank=SLOW_RANK)


@pytest.fixture(scope="module")
def sequential(folder, tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    """``analyze --json`` and the report's files, read in this process (--workers 1)."""
    return _analyzed(folder, tmp_path_factory.mktemp("one"), "--workers", "1")


def _analyzed(folder: Path, out: Path, *options: str) -> tuple[str, dict[str, bytes]]:
    as_json = cli("analyze", folder, "--json", *options)
    assert as_json.code == 0, as_json.err
    res = cli("analyze", folder, "--out", out, *options)
    assert res.code == 0, res.err
    return as_json.out, {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _straggler(out: str) -> dict:
    first = json.loads(out)["profiles"][0]
    return next(f for f in first["findings"] if f["rule"] == "straggler-rank")


def test_the_planted_straggler_is_found(sequential):
    out, files = sequential
    assert len(json.loads(out)["profiles"]) == 64
    assert _straggler(out)["rank"] == str(SLOW_RANK)
    report = next(v for k, v in files.items() if k.endswith(".md")).decode()
    assert f"Rank {SLOW_RANK} holds the other 63 ranks back" in report


def test_worker_processes_give_the_same_report(folder, sequential, tmp_path):
    """--workers 2: every byte of the report and of --json is the sequential reading's."""
    assert _analyzed(folder, tmp_path, "--workers", "2") == sequential


def test_the_pool_reads_every_rank_in_order(folder):
    said: list[str] = []
    profiles = ranks.read_ranks(folder, workers=2, progress=said.append)
    assert [p.label for p in profiles] == [f"rank {i}" for i in range(64)]
    assert said[0].endswith("(2 worker processes)") and len(said) == 64
    assert profiles == read_trace_folder(folder)  # field for field
    assert profiles[0].stragglers["slowest"] == f"rank {SLOW_RANK}"


def test_the_automatic_choice(folder, tmp_path):
    files = sorted(folder.iterdir())
    assert ranks.workers_for(files, None) == 1  # 2.6 MB: not worth a process
    assert ranks.workers_for(files, 3) == 3
    assert ranks.workers_for(files[:2], 8) == 2  # never more than the ranks
    big = [tmp_path / f"r{i}.json" for i in range(3)]
    for p in big:
        with open(p, "wb") as f:
            f.truncate(ranks.SMALL_FOLDER)  # sparse: sizes, not bytes on disk
    assert 1 <= ranks.workers_for(big, None) <= min(3, ranks.cores())


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_bad_rank_is_the_same_one_line_error(folder, tmp_path, workers):
    """Two bad ranks among good ones: the error is the first bad file's (in the files'
    order), one line, exit 2, with one worker or two."""
    bad = tmp_path / "job"
    bad.mkdir()
    names = sorted(p.name for p in folder.iterdir())
    for name in names[:6]:
        (bad / name).write_bytes((folder / name).read_bytes())
    (bad / names[2]).write_text("{")
    (bad / names[4]).write_text('{"traceEvents": [{"ph": "X"')
    res = cli("analyze", bad, "--json", "--workers", workers)
    assert res.code == 2 and res.out == ""
    assert res.err.count("\n") == 1 and "Traceback" not in res.err
    assert res.err.startswith("reporter: error [") and names[2] in res.err, res.err


def test_workers_must_be_a_count():
    res = cli("analyze", ".", "--workers", "0")
    assert res.code == 2 and "--workers" in res.err and res.err.count("\n") == 1


# --- compare: each side's folder read the same way -----------------------------------------

@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory) -> tuple[Path, Path]:
    """Two small folders of 3 ranks: before (rank 1 a straggler) and after (none)."""
    root = tmp_path_factory.mktemp("compare")
    return (write_folder(root / "before", ranks=3, slow_rank=1),
            write_folder(root / "after", ranks=3, slow_rank=-1))


def _compared(jobs: tuple[Path, Path], out: Path, *options: str) -> tuple[str, dict[str, bytes]]:
    as_json = cli("compare", *jobs, "--json", *options)
    assert (as_json.code, as_json.err) == (0, ""), as_json.err
    res = cli("compare", *jobs, "--out", out, *options)
    assert (res.code, res.err) == (0, ""), res.err
    return as_json.out, {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture(scope="module")
def compared_in_turn(two_jobs, tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    return _compared(two_jobs, tmp_path_factory.mktemp("cmp-one"), "--workers", "1")


def test_compare_reads_each_folder_in_worker_processes(two_jobs, compared_in_turn, tmp_path,
                                                       monkeypatch):
    """compare --workers 2: both sides' ranks read in a pool of two processes, and the
    report and --json are the rank-by-rank reading's, byte for byte; without --workers the
    small folders are read in this process, the same."""
    pools: list[int] = []
    in_pool = ranks._in_pool
    monkeypatch.setattr(ranks, "_in_pool", lambda files, costs, progress, n: (
        pools.append(n), in_pool(files, costs, progress, n))[1])
    assert _compared(two_jobs, tmp_path / "two", "--workers", "2") == compared_in_turn
    assert pools == [2, 2] * 2  # each side, for --json and for the report
    pools.clear()
    assert _compared(two_jobs, tmp_path / "auto") == compared_in_turn
    assert pools == []
    modes = json.loads(compared_in_turn[0])["modes"]
    assert [m["mode"] for m in modes] == ["rank 0", "rank 1", "rank 2"]


def test_compare_checks_workers_as_analyze_does(two_jobs):
    res = cli("compare", *two_jobs, "--workers", "0")
    assert res.code == 2 and res.out == "" and res.err.count("\n") == 1
    assert res.err.startswith("reporter: error [usage]: argument --workers: takes a number "
                              "of processes from 1 to 1,024, not '0'"), res.err


# --- the options where no folder of ranks is read: a notice, not an error -----------------

def _noticed(argv: list, *options: str) -> tuple[str, str]:
    """The command with the options and without: the same exit 0 and stdout; stderr the
    same after one more line first, which is returned (and stdout)."""
    plain, given = cli(*argv), cli(*argv, *options)
    assert (plain.code, given.code) == (0, 0), given.err
    assert given.out == plain.out
    first, rest = given.err.split("\n", 1)
    assert rest == plain.err and "Traceback" not in given.err
    return first, given.out


def test_a_stored_run_with_the_options_says_they_have_no_effect(stored):
    root, run = stored("cpu-tensor-ops")
    for command in (["analyze", run, "--json"], ["analyze", "latest", "--runs", root,
                                                 "--out", root]):
        line, _ = _noticed(command, "--scheduler", "tcp://127.0.0.1:9")
        assert line == ("reporter: --scheduler has no effect (it reads folders of per-rank "
                        f"traces only): {run} is a stored run, read from its run.json")
    line, out = _noticed(["compare", run, "latest", "--runs", root, "--json"],
                         "--workers", "2", "--scheduler", "tcp://127.0.0.1:9")
    assert line == ("reporter: --workers and --scheduler have no effect (they read folders "
                    f"of per-rank traces only, --workers Chrome traces too): {run} is a "
                    "stored run, read from its run.json")
    assert json.loads(out)["steps"][0]["name"] == "tensor-ops"


def test_a_single_file_with_the_options_says_they_have_no_effect(two_jobs, stored):
    """A single trace is read on this machine (--scheduler with one used to be an error:
    now the same notice as a stored run, for analyze and compare alike); --workers reads
    its chunks in worker processes, the same Profile, and says nothing."""
    trace = sorted(two_jobs[0].iterdir())[0]
    line, _ = _noticed(["analyze", trace, "--json"], "--scheduler", "tcp://127.0.0.1:9")
    assert line == ("reporter: --scheduler has no effect (it reads folders of per-rank "
                    f"traces only): {trace} is a single file, read in this process")
    root, run = stored("cpu-tensor-ops")
    line, _ = _noticed(["compare", run, "latest", "--runs", root, "--json"], "--workers", "2")
    assert line == ("reporter: --workers has no effect (it reads folders of per-rank traces "
                    f"and Chrome traces only): {run} is a stored run, read from its run.json")
    plain, given = (cli("compare", run, trace, "--json", *extra)
                    for extra in ((), ("--workers", "2")))
    assert (plain.code, given.code, given.out, given.err) == (0, 0, plain.out, plain.err)


def test_no_notice_when_one_input_is_a_folder_of_ranks(two_jobs, stored, monkeypatch):
    """A stored run compared with a folder of ranks: the options read the folder, and
    nothing is said of the run."""
    pools: list[int] = []
    in_pool = ranks._in_pool
    monkeypatch.setattr(ranks, "_in_pool", lambda files, costs, progress, n: (
        pools.append(n), in_pool(files, costs, progress, n))[1])
    _, run = stored("cpu-tensor-ops")
    res = cli("compare", run, two_jobs[1], "--json", "--workers", "2")
    assert (res.code, res.err) == (0, ""), res.err
    assert pools == [2]


# --- Dask ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dask():
    """Dask is in the test extra: a machine without it fails here, not skips (bash
    scripts/setup.sh installs it)."""
    try:
        import distributed
    except ImportError as exc:
        pytest.fail(f"dask.distributed is not installed ({exc}): bash scripts/setup.sh "
                    "installs the test extra, which has it")
    return distributed


@pytest.fixture(scope="module")
def cluster(dask):
    """Two worker processes of one thread each."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=50) as c:
        yield c


def test_a_dask_cluster_gives_the_same_report(folder, sequential, cluster, tmp_path):
    out, files = _analyzed(folder, tmp_path, "--scheduler", cluster.scheduler_address)
    assert (out, files) == sequential
    assert _straggler(out)["rank"] == str(SLOW_RANK)
    workers = {w.worker_address for w in cluster.workers.values()}
    assert len(workers) == 2


def test_compare_on_a_dask_cluster(two_jobs, compared_in_turn, cluster, tmp_path):
    """compare --scheduler: both sides' ranks read on the cluster, the same report and
    --json as the rank-by-rank reading."""
    assert _compared(two_jobs, tmp_path, "--scheduler",
                     cluster.scheduler_address) == compared_in_turn


def test_a_bad_rank_on_the_cluster(folder, tmp_path, cluster):
    bad = tmp_path / "job"
    bad.mkdir()
    names = sorted(p.name for p in folder.iterdir())
    for name in names[:6]:
        (bad / name).write_bytes((folder / name).read_bytes())
    (bad / names[3]).write_text("{")
    (bad / names[5]).write_text("[]")
    local = cli("analyze", bad, "--json", "--workers", "1")
    res = cli("analyze", bad, "--json", "--scheduler", cluster.scheduler_address)
    assert (res.code, res.out, res.err) == (local.code, "", local.err)
    assert names[3] in res.err and res.err.count("\n") == 1


def test_an_unreachable_scheduler_is_one_line(folder, monkeypatch, dask):
    monkeypatch.setattr(ranks, "CONNECT_TIMEOUT_S", 2)
    res = cli("analyze", folder, "--json", "--scheduler", "tcp://127.0.0.1:9")
    assert res.code == 1 and res.out == "", res.err
    assert res.err.startswith("reporter: error [scheduler]: cannot reach the Dask scheduler "
                              "at tcp://127.0.0.1:9 within 2 s"), res.err
    assert res.err.count("\n") == 1 and "Traceback" not in res.err


def test_without_dask_the_error_says_what_to_install(folder):
    code = ("import sys; sys.modules['distributed'] = None\n"
            "from reporter.cli import main\n"
            "sys.exit(main(['analyze', sys.argv[1], '--scheduler', 'tcp://127.0.0.1:8786']))")
    res = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and res.stdout == ""
    assert "pip install 'reporter[dask]'" in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.parametrize("sig", ["SIGINT", "Ctrl-C", "SIGKILL"])
def test_an_interrupt_leaves_no_worker(tmp_path, sig):
    """SIGINT while the workers start and read: one line, exit 130, the workers stopped;
    Ctrl-C (SIGINT to the whole process group, workers starting included): the same one
    line, no worker's traceback; a parent killed outright (SIGKILL) takes its workers with
    it (Linux: PR_SET_PDEATHSIG)."""
    import os
    import signal
    import time

    folder = write_folder(tmp_path / "job", ranks=4, steps=40, layers=60)  # 6 MB a rank
    proc = subprocess.Popen([sys.executable, "-m", "reporter", "analyze", str(folder),
                             "--json", "--workers", "2"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    children: set[int] = set()
    deadline = time.monotonic() + 30
    while len(children) < 2 and time.monotonic() < deadline and proc.poll() is None:
        children = {int(c) for t in os.listdir(f"/proc/{proc.pid}/task")
                    for c in open(f"/proc/{proc.pid}/task/{t}/children").read().split()}
        time.sleep(0.02)
    assert proc.poll() is None and len(children) >= 2, "the workers never started"
    if sig == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=30)
    if sig != "SIGKILL":
        assert (proc.returncode, out) == (130, "")
        assert err == "reporter: interrupted; nothing half-written was kept\n"
    else:
        assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{c}") and
                                              "zombie" not in _state(c) for c in children):
        time.sleep(0.05)
    assert not [c for c in children if os.path.exists(f"/proc/{c}") and "zombie" not in _state(c)]


def _state(pid: int) -> str:
    try:
        return next(line for line in open(f"/proc/{pid}/status")
                    if line.startswith("State:")).lower()
    except (OSError, StopIteration):
        return "zombie"


@pytest.mark.slow  # inflates 70 MiB here and on the cluster
def test_the_commands_settings_go_with_each_task(folder, tmp_path, cluster, monkeypatch):
    """REPORTER_MAX_INFLATE_RATIO set where reporter runs holds on the Dask workers too
    (their environment is their own, fixed when they started): a gzipped rank that
    inflates 200 times (70 MiB of blanks) is refused by default, here and there, and read
    with the limit raised, here and there."""
    import gzip

    job = tmp_path / "job"
    job.mkdir()
    first = sorted(folder.iterdir())[0]
    (job / first.name).write_bytes(first.read_bytes())
    text = first.read_text()
    (job / "padded.json.gz").write_bytes(gzip.compress(
        (text[:-1] + " " * (70 << 20) + "}").encode(), 1))
    for limit, code in ((None, 2), ("1e9", 0)):
        if limit:
            monkeypatch.setenv("REPORTER_MAX_INFLATE_RATIO", limit)
        local = cli("analyze", job, "--json", "--workers", "1")
        remote = cli("analyze", job, "--json", "--scheduler", cluster.scheduler_address)
        assert local.code == code and (limit or "decompression bomb" in local.err), local.err
        assert (remote.code, remote.out, remote.err) == (local.code, local.out, local.err)


def test_a_scheduler_without_workers_is_one_line(folder, monkeypatch, dask):
    """A scheduler with no worker would hold the tasks for ever: one line instead."""
    from distributed import LocalCluster

    monkeypatch.setattr(ranks, "CONNECT_TIMEOUT_S", 1)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0",
                      silence_logs=50) as empty:
        res = cli("analyze", folder, "--json", "--scheduler", empty.scheduler_address)
    assert res.code == 1 and res.out == ""
    assert res.err == (f"reporter: error [scheduler]: the Dask scheduler at "
                       f"{empty.scheduler_address} has no worker (none joined in 1 s): start "
                       f"some with 'dask worker {empty.scheduler_address}'\n")
