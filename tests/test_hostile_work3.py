"""No lost work (issue 35, item 2): shared runs folders, optional steps that fail, the
what-ifs' memory, the time budget.

Each case runs the real command (or the code under test) in a child process under an
address-space limit and a time limit, as the reliability probe of 2026-11-23 ran it
(cases CC2, W1, W2, W5 and the note on --time-budget).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_hostile import SLOW_TARGET

from reporter.store import OWNER_FILE, STALE_AFTER_S, owner_record

pytestmark = pytest.mark.slow

GiB = 1 << 30
LIMITS = "import resource; resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))\n"


def child(*argv, cwd: Path, timeout: float = 60, memory: int = 4 * GiB,
          code: str | None = None) -> subprocess.CompletedProcess:
    """``reporter ARGV`` (or the Python ``code`` with ARGV as its arguments) in a child
    process under ``memory`` bytes of address space; fails the test past ``timeout`` s."""
    body = code if code is not None else (
        "import sys\nfrom reporter.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", LIMITS.format(mem=memory) + body,
                           *map(str, argv)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _staging(root: Path, name: str, owner: dict | str | None, age_s: float = 0) -> Path:
    folder = root / f".{name}.partial"
    folder.mkdir(parents=True)
    (folder / "trace-train.json").write_text("{}")
    if owner is not None:
        (folder / OWNER_FILE).write_text(owner if isinstance(owner, str) else json.dumps(owner))
    if age_s:
        for path in [*folder.iterdir(), folder]:
            os.utime(path, (time.time() - age_s,) * 2)
    return folder


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


# CC2: a staging folder is removed only when this host, boot and pid namespace own it and
# its process is gone.

def test_only_folders_of_our_own_dead_processes_are_removed(tmp_path):
    dead = _dead_pid()
    ours = owner_record(dead)
    live = owner_record(os.getpid())
    kept = {
        "other-pid-namespace": _staging(tmp_path, "a", {**ours, "pid_ns": "pid:[1]"}),
        "other-host": _staging(tmp_path, "b", {**ours, "host": socket.gethostname() + "-x"}),
        # a machine of the same name, booted apart (or this one before a reboot)
        "other-boot": _staging(tmp_path, "c", {**ours, "boot": "another-boot"}),
        "live": _staging(tmp_path, "d", live),
        "no-owner-file": _staging(tmp_path, "e", None),
        "unreadable-owner": _staging(tmp_path, "f", "{not json"),
        "pid-as-text": _staging(tmp_path, "g", {**ours, "pid": str(dead)}),
    }
    fifo = _staging(tmp_path, "h", None)  # an owner file that would block a reader
    os.mkfifo(fifo / OWNER_FILE)
    kept["fifo-owner"] = fifo
    removed = {
        "dead": _staging(tmp_path, "i", ours),
        "reused-pid": _staging(tmp_path, "j", {**live, "start": "1"}),
        "foreign-but-untouched-for-8-days": _staging(
            tmp_path, "k", {**ours, "pid_ns": "pid:[1]"}, age_s=8 * 24 * 3600),
    }
    assert STALE_AFTER_S <= 8 * 24 * 3600
    res = child("list", "--runs", tmp_path, cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"removed {len(removed)} unfinished" in res.stderr, res.stderr
    assert [k for k, p in kept.items() if not p.exists()] == []
    assert [k for k, p in removed.items() if p.exists()] == []


SLOW = SLOW_TARGET.replace("time.sleep(0.2)", "time.sleep(0.05)")  # a slow inference step


def _pid_namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _pid_namespaces(), reason="unshare --pid needs privileges here")
def test_a_live_run_in_another_pid_namespace_survives_list_from_this_one(tmp_path):
    """The probe's CC2, for real: `reporter run` in a pid namespace of its own (its pid is
    one no process has here), `reporter list` from outside while it runs: the run is
    stored, and list removed nothing."""
    (tmp_path / "slow.py").write_text(SLOW)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = ('for i in $(seq 300); do /bin/true; done; '
              f'ulimit -v {4 * GiB // 1024}; "$@"')  # a child: not pid 1
    inner = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
                              "sh", "-c", script, "sh", sys.executable, "-m", "reporter", "run",
                              "--target", "slow.py:build", "--out", str(runs), "--quiet",
                              "--time-budget", "0.3", "--format", "md"],
                             cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(runs.glob(".*.partial")):
            time.sleep(0.1)
        [stage] = list(runs.glob(".*.partial"))
        pid = json.loads((stage / OWNER_FILE).read_text())["pid"]
        if os.path.exists(f"/proc/{pid}"):
            pytest.skip(f"pid {pid} is taken in this namespace too")
        said = []
        while inner.poll() is None and stage.exists():
            res = child("list", "--runs", runs, cwd=tmp_path, timeout=60)
            said.append(res.stderr)
        _, err = inner.communicate(timeout=180)
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
    assert said and not any("removed" in s for s in said), said
    assert inner.returncode == 0, err[-2000:]
    assert len(list(runs.glob("*/run.json"))) == 1


# W1, W2: a what-if that raises anything, or changes torch's process settings, costs its
# target nothing but that what-if, and the next target nothing at all.

OPTIMIZER = """
import sys, torch
from torch import nn
from reporter import Target

made = []

class Picky(torch.optim.Adam):
    def __init__(self, params, **kw):
        made.append(1)
        if len(made) > 1:  # only reporter's what-if makes a second one
            {how}
        super().__init__(params, **kw)

def build(device="cpu", preset="default"):
    made.clear()
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(150)])  # 300 parameters
    return Target(model=model, batches=[(torch.randn(2, 4), torch.randn(2, 4))], batch_size=2,
                  loss=lambda out, batch: ((out - batch[1]) ** 2).mean(),
                  optimizer=Picky(model.parameters(), foreach=False), modes=("train",))
"""

HOWS = {
    "key": "raise KeyError('second optimizer')",
    "memory": "raise MemoryError('no room for a copy')",
    "exit": "sys.exit(0)",
    "state": "torch.set_grad_enabled(False); torch.set_default_dtype(torch.float64)",
    "ok": "pass",
}


def test_a_what_if_that_raises_keeps_the_run_and_the_next_target_is_not_blamed(tmp_path):
    for name, how in HOWS.items():
        (tmp_path / f"{name}.py").write_text(OPTIMIZER.format(how=how))
    targets = [a for name in HOWS for a in ("--target", f"{name}.py:build")]
    res = child("run", *targets, "--out", "runs", "--quiet", "--time-budget", "0.3",
                "--format", "md", cwd=tmp_path, timeout=900)  # 5 targets: 295 s at load 10
    assert res.returncode == 0, res.stderr[-3000:]
    assert "raised while profiled" not in res.stderr
    runs = {json.loads(p.read_text())["run"]["target"]["name"]: p.parent
            for p in (tmp_path / "runs").glob("*/run.json")}
    assert sorted(runs) == sorted(f"{name}.py:build" for name in HOWS)

    def failed(name):
        section = json.loads((runs[f"{name}.py:build"] / "run.json").read_text())[
            "run"]["sections"][0]
        return section["whatif_failed"]
    assert failed("key") == {"single-tensor-optimizer": {"error": "KeyError: 'second optimizer'"}}
    assert failed("memory") == {"single-tensor-optimizer": {
        "error": "MemoryError: no room for a copy"}}
    assert failed("exit") == {"single-tensor-optimizer": {"exit": "0"}}
    assert failed("state") == {} and failed("ok") == {}
    report = (runs["key.py:build"] / "report.en.md").read_text()
    assert ("The proposed replacement for per-parameter optimizer step could not be timed on "
            "this machine: it raised KeyError: 'second optimizer'.") in report
    for lang, words in (("ru", "код модели вызвал sys.exit(0)"),
                        ("zh", "模型代码调用了 sys.exit(0)")):
        res = child("render", runs["exit.py:build"], "--lang", lang, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert words in (runs["exit.py:build"] / f"report.{lang}.md").read_text()


KEPT_STATE = """
import torch
from reporter.collect.whatif import kept_state
with kept_state():
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    torch.set_float32_matmul_precision("medium")
    torch.use_deterministic_algorithms(True)
    torch.autograd.set_detect_anomaly(True)
print(torch.is_grad_enabled(), torch.get_default_dtype(), torch.get_num_threads() > 0,
      torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
      torch.is_anomaly_enabled())
"""


def test_the_process_settings_a_what_if_changed_are_put_back(tmp_path):
    res = child(cwd=tmp_path, code=KEPT_STATE, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "torch.float32", "True", "highest", "False",
                                  "False"]


# W5: the what-ifs' memory is capped relative to the model's own tensors.

EXPANDED = """
import torch
from torch import nn
from reporter import Target

N = 128

class M(nn.Module):
    # attention on broadcast views: q and k of (N, 8, 65536) hold 2 MB each
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(1, 8, 65536) * 1e-3)
        self.k = nn.Parameter(torch.randn(1, 8, 65536) * 1e-3)
        self.v = nn.Parameter(torch.randn(1, 8, 16))

    def forward(self, x):
        q, k = self.q.expand(N, 8, 65536), self.k.expand(N, 8, 65536)
        p = torch.softmax(torch.bmm(q, k.transpose(1, 2)) + x, -1)
        return torch.bmm(p, self.v.expand(N, 8, 16))

def build(device="cpu", preset="default"):
    return Target(model=M(), batches=[(torch.randn(N, 8, 8),)], batch_size=N,
                  modes=("inference",))
"""


def test_the_attention_what_if_on_broadcast_operands_is_capped_by_the_models_tensors(
        tmp_path):
    """The probe's W5: a model holding a few MB of tensors whose attention reads broadcast
    views; materialised at the recorded shapes its q and k take 512 MiB (2.45 GB of RSS
    at the probe's size). Not allocated: the cap is 4x the model's own tensors (at least
    256 MiB), and the report says so."""
    (tmp_path / "expanded.py").write_text(EXPANDED)
    res = child("run", "--target", "expanded.py:build", "--out", "runs", "--quiet",
                "--time-budget", "0.3", "--format", "md", cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    [path] = (tmp_path / "runs").glob("*/run.json")
    section = json.loads(path.read_text())["run"]["sections"][0]
    why = section["whatif_failed"]["unfused-attention"]
    assert why["need_b"] > why["cap_b"] >= 256 << 20
    assert why["cap_b"] <= max(256 << 20, 4 * section["tensor_memory"]["peak_b"]) < 2 * GiB
    report = (path.parent / "report.en.md").read_text()
    assert "The proposed replacement for unfused attention could not be timed" in report


TRAIN_SHAPES = """
import sys
from pathlib import Path
import torch
from torch.profiler import profile
from reporter.collect.whatif import attention_shapes
from reporter.ingest.traces import host_calls, read_trace

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k = torch.nn.Linear(64, 32), torch.nn.Linear(64, 32)
        self.v = torch.nn.Linear(64, 8)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        p = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 4, -1)
        return torch.bmm(p, v)

m, x = M(), torch.randn(4, 16, 64)
with profile(record_shapes=True) as prof:
    for _ in range(2):
        m(x).sum().backward()
trace = Path(sys.argv[1])
prof.export_chrome_trace(str(trace))
p = read_trace(trace, shapes=True)
with_calls = attention_shapes(p, host_calls(trace))
print(json.dumps([[with_calls[k] for k in ("n", "l", "s", "e", "ev")],
                  attention_shapes(p)]))
"""


def test_the_attention_what_if_reads_the_forwards_products_in_training(tmp_path):
    """The probe's W5 shape bug: in a training step the scores' gradient, (N, L, Ev) @
    (N, Ev, S), reads as q @ k^T. With the trace, the forward's products decide (E = 32,
    Ev = 8); without it, a profile that allows both readings is not read."""
    res = child(tmp_path / "t.json", cwd=tmp_path, code="import json\n" + TRAIN_SHAPES,
                timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    shapes, without = json.loads(res.stdout.strip().splitlines()[-1])
    assert shapes == [4, 16, 16, 32, 8] and without is None


# The note "--time-budget is not a bound": the windows keep to it.

UNEVEN = """
import time, torch
from torch import nn
from reporter import Target

calls = []

def build(device="cpu", preset="default"):
    calls.clear()
    model = nn.Linear(4, 4)
    def forward(model, batch):
        calls.append(1)
        # fast: the warm-up, the probe of the user's own forward (an inference-only
        # target) and the step that sizes the windows
        if len(calls) > 4:
            time.sleep(0.02)
        return model(batch[0])
    return Target(model=model, batches=[(torch.randn(2, 4),)], batch_size=2,
                  modes=("inference",), forward=forward)
"""


def test_the_windows_keep_to_the_budget_after_an_unrepresentative_first_step(tmp_path):
    """The sizing step takes microseconds, every later one 20 ms: sized on it, 5 windows
    of 200 steps took 20 s against --time-budget 0.3. The first window is cut at twice
    its aim and the windows sized again from the steps it ran."""
    (tmp_path / "uneven.py").write_text(UNEVEN)
    res = child("run", "--target", "uneven.py:build", "--out", "runs", "--time-budget", "0.3",
                "--format", "md", cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "not the sizing step's" in res.stderr
    [path] = (tmp_path / "runs").glob("*/run.json")
    t = json.loads(path.read_text())["run"]["sections"][0]["throughput"]
    assert 1 <= t["steps_per_window"] <= 3  # 0.3 s / 5 windows of 20 ms steps
    # the windows' own time, from their samples/s: within the budget's bound (3 budgets
    # on a busy machine, the first window's cut at twice its aim)
    spent = sum(t["steps_per_window"] * 2 / w for w in t["windows"])
    assert spent <= 3 * 0.3 + 0.2, t


def test_window_sizes_fit_the_budget():
    from reporter.collect.runner import RunOptions, _steps_for, window_s

    opts = RunOptions()
    assert window_s(opts, 0.3) == pytest.approx(0.06) and window_s(opts, None) == 0.25
    assert window_s(opts, 100.0) == 0.25
    assert _steps_for(0.25, 1e-6) == 200 and _steps_for(0.25, 0.05) == 5
    assert _steps_for(0.06, 0.025) == 2 and _steps_for(0.06, 1.0) == 1
    assert _steps_for(0.06, 1.0, minimum=3) == 3  # no budget: at least 3 steps, as before


# An optional step that fails keeps the run: the report (a broken template here).

def test_a_report_that_cannot_be_written_keeps_the_run(tmp_path):
    import shutil

    from reporter.render.languages import language

    langs = tmp_path / "langs"
    shutil.copytree(language("en").folder, langs / "xx")
    text = (langs / "xx" / "report.md.j2").read_text(encoding="utf-8")
    (langs / "xx" / "report.md.j2").write_text(text.replace(
        "{% block summary_heading %}", "{% block summary_heading %}{{ 1 // 0 }}"), encoding="utf-8")
    (tmp_path / "slow.py").write_text(SLOW.replace("0.05", "0.001"))
    code = ("import os, sys\nos.environ['REPORTER_TEMPLATES'] = sys.argv.pop(1)\n"
            "from reporter.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    res = child(langs, "run", "--target", "slow.py:build", "--out", "runs", "--quiet",
                "--time-budget", "0.3", "--lang", "xx", cwd=tmp_path, code=code, timeout=300)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "[template]" in lines[0] and "its run is stored as" in lines[0], lines[0]
    [path] = (tmp_path / "runs").glob("*/run.json")
    assert not list(path.parent.glob("report*")) and not list(path.parent.glob("*chart*"))
    assert not list((tmp_path / "runs").glob(".*"))
    res = child("render", path.parent, "--lang", "en", cwd=tmp_path)
    assert res.returncode == 0 and (path.parent / "report.en.md").is_file(), res.stderr


# I11: a rank whose peers vanished says so in one line, without c10d's C++ stack.

LOST_PEER = """
import sys
import torch.distributed
import reporter.cli as cli

def lost(args):
    raise torch.distributed.DistNetworkError(
        "Broken pipe\\nException raised from sendBytes at ../torch/csrc/distributed/c10d/"
        "Utils.hpp:653\\nframe #0: c10::Error::Error() + 0x1\\nframe #1: <unknown function>")
cli.cmd_list = lost
sys.exit(cli.main(["list", "--runs", sys.argv[1]]))
"""


def test_a_rank_that_lost_its_peers_says_one_line(tmp_path):
    res = child(tmp_path, cwd=tmp_path, code=LOST_PEER, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert "[ranks]" in lines[0] and "DistNetworkError: Broken pipe" in lines[0]
    assert "frame #" not in res.stderr and "internal error" not in res.stderr
