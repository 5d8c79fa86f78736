"""Distributed runs: every rank profiles its own window, rank 0 writes one run.

Ranks are started by torchrun (``torchrun --nproc-per-node N -m reporter run``)
or by ``reporter run --nproc N``, which starts them itself with the same
env:// rendezvous (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) instead of
torchrun's elastic agent: the agent stops every rank when one fails, and the
report of the others would be lost with it.

Results travel through torch.distributed's TCPStore, not through a collective,
so that a rank that crashed or hangs cannot block the others: each rank posts
its run (JSON) and its traces (gzip bytes) under its own keys; rank 0 waits for
each rank until a deadline and reports the ranks that never answered.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import BadInput, ReporterError, WorkFailed
from ..model import device as kinds


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int


def world_from_env() -> World | None:
    """This process's place in a distributed run, when torchrun or --nproc started it."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return None
        return World(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
    except (KeyError, ValueError) as exc:
        raise BadInput(f"a distributed run needs RANK and WORLD_SIZE set ({exc})",
                       error_id="bad-world") from exc


def init(world: World, device: str, timeout_s: float) -> str:
    """Join the process group (NCCL on GPUs, gloo on the CPU); the rank's device."""
    import torch.distributed as dist

    if kinds.cuda_api(device):
        # A failed or hung collective raises in this rank (so that it is reported as
        # failed) instead of the NCCL watchdog tearing the whole process down.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
        from . import device as devices

        count = devices.device_count()
        if world.local_rank >= count:  # torchrun started more ranks than this machine has GPUs
            raise BadInput(f"rank {world.rank} is local rank {world.local_rank}, and this "
                           f"machine has {count} GPU(s): start at most {count} processes per "
                           "machine, or use --device cpu (gloo)", error_id="usage")
        devices.set_current(world.local_rank)
        device, backend = f"cuda:{world.local_rank}", "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return device


def store(world: World, timeout_s: float):
    """The key-value store results travel through (rank 0 serves it)."""
    import torch.distributed as dist

    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("REPORTER_STORE_PORT")
               or int(os.environ.get("MASTER_PORT", "29500")) + 1)
    return dist.TCPStore(host, port, world_size=None, is_master=world.rank == 0,
                         timeout=timedelta(seconds=timeout_s), wait_for_workers=False)


# The store refuses values over 8 MiB: larger ones travel in parts of this size.
CHUNK = 4 << 20


def put(kv, key: str, data: bytes | str) -> None:
    """Set ``key`` to ``data`` of any size: its parts first, then ``key`` (their count),
    so that a reader that sees ``key`` finds every part."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    parts = [payload[i:i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
    for i, part in enumerate(parts):
        kv.set(f"{key}#{i}", part)
    kv.set(key, f"parts:{len(parts)}")


def take(kv, key: str) -> bytes:
    """What ``put`` stored under ``key``."""
    head = kv.get(key).decode()
    if not head.startswith("parts:"):
        raise ValueError(f"store key {key} holds no parts")
    return b"".join(kv.get(f"{key}#{i}") for i in range(int(head[6:])))


def post(kv, key: str, rank: int, result: dict[str, Any], traces: dict[str, bytes]) -> None:
    """Publish a rank's result: its run (or error) and its gzipped traces. A result the
    store does not take is replaced by a failure that says why."""
    try:
        for name, data in traces.items():
            put(kv, f"{key}/{rank}/trace/{name}", data)
        put(kv, f"{key}/{rank}/result", json.dumps({**result, "traces": list(traces)}))
    except Exception as exc:  # noqa: BLE001 (torch raises its own store errors)
        why = f"rank {rank} could not send its result: {type(exc).__name__}: {exc}"
        put(kv, f"{key}/{rank}/result", json.dumps({"status": "failed", "error": why[:500]}))


class Peers:
    """Rank 0's and the others' view of each other, through the store, with one deadline.

    A rank that has posted its result for a target, or that stayed silent past
    the deadline, is no longer waited for, neither when the ranks agree on a
    number nor when rank 0 collects the results.
    """

    def __init__(self, kv, world: World, timeout_s: float):
        self.kv, self.world, self.timeout_s = kv, world, timeout_s
        self.gone: dict[int, str] = {}  # rank -> why it is no longer waited for
        self._agreements = 0

    def _others(self) -> list[int]:
        return [r for r in range(self.world.size) if r != self.world.rank and r not in self.gone]

    def agree(self, target_key: str, value: int) -> int:
        """The largest of every live rank's ``value`` (each rank calls this in the same order)."""
        key = f"reporter/agree/{self._agreements}"
        self._agreements += 1
        self.kv.set(f"{key}/{self.world.rank}", str(value))
        values, pending = [value], self._others()
        deadline = time.monotonic() + self.timeout_s
        while pending:
            for rank in list(pending):
                if self.kv.check([f"{key}/{rank}"]):
                    values.append(int(self.kv.get(f"{key}/{rank}")))
                    pending.remove(rank)
                elif self.kv.check([f"{target_key}/{rank}/result"]):
                    pending.remove(rank)  # it finished (or failed) without this step
            if pending and time.monotonic() >= deadline:
                for rank in pending:
                    self.gone[rank] = f"no answer within {self.timeout_s:g} s"
                break
            if pending:
                time.sleep(0.05)
        return max(values)

    def collect(self, key: str) -> dict[int, dict[str, Any]]:
        """Each other rank's result, or {"status": "missing"} for those silent past the deadline."""
        deadline = time.monotonic() + self.timeout_s
        results: dict[int, dict[str, Any]] = {}
        pending = self._others()
        while pending and time.monotonic() < deadline:
            for rank in list(pending):
                if self.kv.check([f"{key}/{rank}/result"]):
                    result = json.loads(take(self.kv, f"{key}/{rank}/result"))
                    result["trace_bytes"] = {name: take(self.kv, f"{key}/{rank}/trace/{name}")
                                             for name in result.pop("traces", [])}
                    results[rank] = result
                    pending.remove(rank)
            if pending:
                time.sleep(0.2)
        for rank in pending:
            self.gone.setdefault(rank, f"no answer within {self.timeout_s:g} s")
        for rank, why in self.gone.items():
            results.setdefault(rank, {"status": "missing", "error": why})
        return results


def finish() -> None:
    """Leave the process group at the end of a distributed run."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def check_devices(nproc: int, device: str) -> None:
    """Refuse --nproc N on a GPU machine with fewer than N GPUs, before starting anything."""
    if device == "cpu":
        return
    from . import device as devices

    count = devices.device_count()
    if device == "auto" and count == 0:
        return
    if count < nproc:
        fewer = f"use --nproc {count} or fewer, or " if count >= 2 else "use "
        raise BadInput(f"--nproc {nproc} needs {nproc} GPUs and this machine has {count}; "
                       f"{fewer}--device cpu (gloo)", error_id="usage")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], nproc: int, grace_s: float = 10.0) -> int:
    """Start ``nproc`` ranks of ``reporter <argv>`` on this machine; rank 0's exit code.

    Once rank 0 has written the run, ranks still running (hung) are stopped
    after ``grace_s`` seconds.
    """
    if nproc < 2:
        raise BadInput("--nproc takes 2 or more ranks", error_id="usage")
    env = {**os.environ, "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "REPORTER_STORE_PORT": str(free_port())}
    procs = []
    quiet = threading.Event()  # set once the launcher is interrupted
    try:
        for rank in range(nproc):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "reporter", *argv],
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                stdout=None if rank == 0 else subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=_die_with_parent))
            threading.Thread(target=_forward, args=(procs[-1].stderr, quiet),
                             daemon=True).start()
        code = procs[0].wait()
        deadline = time.monotonic() + grace_s
        for p in procs[1:]:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _stop(p)
        return code
    except OSError as exc:
        raise WorkFailed(f"cannot start the ranks: {exc}", error_id="launch") from exc
    except KeyboardInterrupt:
        # The ranks are stopped below; what they say while dying (their own "terminated",
        # the collectives' C++ stack dumps as peers vanish) is not the user's news: the
        # launcher's one line is.
        quiet.set()
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                _stop(p)


def _forward(pipe: Any, quiet: threading.Event) -> None:
    """A rank's standard error, line by line, to the launcher's, until ``quiet`` is set."""
    with pipe:
        for line in pipe:
            if not quiet.is_set():
                try:
                    sys.stderr.buffer.write(line)
                    sys.stderr.buffer.flush()
                except (OSError, ValueError, AttributeError):
                    pass


def _die_with_parent() -> None:
    """In a rank, before it runs: killed when the launcher dies, even by SIGKILL (Linux).

    SIGKILL, not SIGTERM: a rank blocked in a collective whose peer is gone would
    not run a Python handler until the collective's timeout. What it leaves (a
    hidden staging folder) is removed by the next run or list."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a launcher killed with SIGKILL leaves its ranks running


def _stop(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass


def trace_files(scratch: Path) -> dict[str, bytes]:
    """A rank's traces, gzipped, by file name."""
    import gzip

    return {f"{p.name}.gz": gzip.compress(p.read_bytes(), 6)
            for p in sorted(scratch.glob("trace-*.json"))}


def merge(own, own_error: str | None, results: dict[int, dict[str, Any]], stage: Path):
    """One run from every rank's result; other ranks' traces are written to ``stage``.

    Rank 0's run carries the report (or, when rank 0 failed, the first rank
    that finished); its entry in ``ranks`` is marked ``main`` and holds no
    sections of its own. Returns None when no rank finished profiling.
    """
    from ..model.run import Run

    runs: dict[int, Any] = {0: own} if own is not None else {}
    ranks: list[dict[str, Any]] = [{"rank": 0, "status": "ok" if own else "failed",
                                    "error": own_error}]
    for rank in sorted(results):
        res = results[rank]
        ranks.append({"rank": rank, "status": res["status"], "error": res.get("error")})
        if res["status"] != "ok":
            continue
        run = Run.from_dict(res["run"])
        for section in run.sections:  # its traces, renamed for the rank
            data = res["trace_bytes"].get(f"{section.trace}.gz") if section.trace else None
            if data is None or section.trace is None:
                section.trace = None
                continue
            section.trace = section.trace.replace(".json", f".rank{rank}.json") + ".gz"
            (stage / section.trace).write_bytes(data)
        runs[rank] = run
    if not runs:
        return None
    main_rank = min(runs)
    for entry in ranks:
        entry["main"] = entry["rank"] == main_rank
        entry["sections"] = (runs[entry["rank"]].sections
                             if entry["rank"] in runs and not entry["main"] else None)
    main = runs[main_rank]
    main.ranks = ranks
    return main


# The rank protocol, whole: a session (process group, store, peers) around the targets,
# and one target profiled on every rank, gathered on rank 0.

@contextmanager
def session(world: World, device: str, timeout_s: float) -> Iterator[tuple[str, Peers]]:
    """Join the process group for the length of a run: yields this rank's device and the
    peers it posts to and collects from; leaves the group at the end, even on an error."""
    device = init(world, device, timeout_s)
    try:
        yield device, Peers(store(world, timeout_s), world, timeout_s)
    finally:
        finish()


Profiler = Callable[..., Any]  # collect.runner.profile_target (passed in: no import cycle)


def profile_on_ranks(profile: Profiler, world: World, peers: Peers, index: int, spec: str,
                     builder: Any, opts: Any, stage: Path | None = None,
                     step: Callable[[str], None] = lambda msg: None) -> Any:
    """Target number ``index`` of the run profiled on every rank, its windows agreed
    between them. Rank 0 profiles into ``stage``, waits for the others (up to the peers'
    timeout) and returns one run with every rank in it; another rank profiles into a
    scratch folder, posts its run and traces to rank 0 and returns None. Raises
    WorkFailed on rank 0 when no rank finished."""
    import tempfile

    key = f"reporter/{index}"
    opts = replace(opts, agree=lambda n: peers.agree(key, n))
    if world.rank != 0:
        with tempfile.TemporaryDirectory() as scratch:
            try:
                run = profile(spec, builder, opts, Path(scratch))
                result = {"status": "ok", "error": None, "run": run.to_dict()}
                traces = trace_files(Path(scratch))
            except ReporterError as exc:
                result, traces = {"status": "failed", "error": str(exc)}, {}
            post(peers.kv, key, world.rank, result, traces)
        return None
    assert stage is not None, "rank 0 profiles into the run's stage"
    own, own_error = None, None
    try:
        own = profile(spec, builder, opts, stage, step)
    except ReporterError as exc:
        own_error = str(exc)
        print(f"reporter: rank 0: {exc.one_line()}", file=sys.stderr, flush=True)
    step(f"waiting for ranks 1-{world.size - 1} (up to {peers.timeout_s:g} s)")
    results = peers.collect(key)
    run = merge(own, own_error, results, stage)
    if run is None:
        why = "; ".join(f"rank {r}: {res.get('error')}" for r, res in sorted(results.items()))
        raise WorkFailed(f"no rank finished profiling {spec}: rank 0: {own_error}; {why}",
                         error_id="ranks-failed")
    for entry in run.ranks:
        if entry["status"] != "ok":
            step(f"rank {entry['rank']} {entry['status']}: {entry['error']}")
    return run
