"""A folder of per-rank traces read in parallel: on this machine's cores (a process pool)
or on a Dask distributed cluster (``--scheduler``); and one large trace's chunks read on
this machine's cores (read_trace_in_pool).

Each worker reads one rank's file (read_trace: the decode and what is computed while
reading, the step breakdown, FLOP costs, the critical path) and sends back that rank's
Profile, never its events; this process merges the profiles as the sequential reader does
(traces.merge_ranks: ordered by rank, the stragglers across them), so the result is the
same object, field for field. What crosses to a worker is the file's path and the costs
flag: a Dask worker must see the folder at the same path (a shared filesystem) and have
the same reporter installed. An error in a rank is the error the sequential reader gives:
that of the first failing file in the files' order. No torch import.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Callable

from ..errors import BadInput, ReporterError, WorkFailed, work_begins
from ..model.profile import Profile
from .traces import PROGRESS_FILES, READ_CONSTANT, merge_ranks, rank_files, read_trace

# Below this many bytes of traces in all, an automatic choice reads them in this process:
# starting a worker process (an interpreter and reporter's reader: about 0.3 s) costs more
# than it saves.
SMALL_FOLDER = 16 << 20
# How long a connection to a Dask scheduler may take before it is called unreachable.
CONNECT_TIMEOUT_S = 10
# What a rank's file may cost at the peak of reading it, per byte of the file: about 2-3x
# a plain trace (docs/benchmarks.md), and a gzipped trace inflates about 10x.
_PEAK_PER_BYTE = {False: 3, True: 30}


def cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or taskset
    narrows), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def workers_for(files: list[Path], asked: int | None) -> int:
    """The worker processes for reading ``files``: ``asked`` (--workers) capped by the
    number of files; else as many as the cores, capped by the files, by how many of the
    largest file fit in the memory available at once, and 1 (this process) for a folder
    under SMALL_FOLDER bytes."""
    if asked is not None:
        return max(1, min(asked, len(files)))
    from .. import memory

    sizes = [_size(p) for p in files]
    if sum(sizes) < SMALL_FOLDER:
        return 1
    n = min(cores(), len(files))
    budget = memory.available()
    if budget is not None:
        largest = max(size * _PEAK_PER_BYTE[p.name.endswith(".gz")]
                      for p, size in zip(files, sizes))
        n = min(n, max(1, budget // (largest + READ_CONSTANT)))
    return n


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # read_trace says why, in its turn


def read_ranks(folder: Path, costs: bool = True,
               progress: Callable[[str], None] | None = None, workers: int | None = None,
               scheduler: str | None = None) -> list[Profile]:
    """The profiles of a folder of per-rank traces, as traces.read_trace_folder reads them:
    on a Dask cluster when ``scheduler`` (its address) is given, else in ``workers``
    processes (None: workers_for's choice; 1: in this process, one file after another)."""
    files = rank_files(folder)
    if scheduler is not None:
        return merge_ranks(_on_cluster(files, costs, progress, scheduler))
    n = workers_for(files, workers)
    if n == 1:
        from .traces import read_trace_folder

        return read_trace_folder(folder, costs=costs, progress=progress)
    return merge_ranks(_in_pool(files, costs, progress, n))


def _quiet_worker(parent: int) -> None:
    """A pool worker ignores Ctrl-C (the terminal sends it to the whole process group):
    the parent stops the pool and says so in one line. It starts with SIGINT blocked
    (_sent: a Ctrl-C while it imports would print a traceback), ignored from here on. On
    Linux it is killed when the parent dies, even by SIGKILL, and ends at once if the
    parent died before it could ask (its queues would never close: the workers hold their
    write ends too). A worker only reads: it leaves nothing behind."""
    import ctypes

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: a parent killed with SIGKILL leaves its workers to finish
    if os.getppid() != parent:
        os._exit(1)


def _sent(pool: Any, path: Path, costs: bool) -> Any:
    """``read_trace(path)`` submitted to the pool, SIGINT blocked meanwhile: a submit may
    start a worker, which inherits the blocked signal until _quiet_worker ignores it (a
    Ctrl-C here is delivered to this process as soon as the submit returns)."""
    return _submitted(pool, read_trace, path, costs=costs)


def _in_pool(files: list[Path], costs: bool, progress: Callable[[str], None] | None,
             n: int) -> list[Profile]:
    """Read ``files`` in ``n`` spawned processes, at most ``n`` files in flight, sent in
    the files' order, the next as soon as one is done. After an error no file is sent and
    those before the failing one are waited for: the error raised is the first failing
    file's, as when reading one after another. Spawned, not forked: a process that has
    loaded torch (its thread pools) cannot be forked safely, and the workers need only the
    reader."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    work_begins()  # child processes from here: an interrupt raises, and they are stopped
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_quiet_worker, initargs=(os.getpid(),))
    results: dict[int, Profile] = {}
    errors: dict[int, Exception] = {}
    running: dict[Future[Profile], int] = {}
    sent = 0
    try:
        while sent < len(files) or running:
            while sent < len(files) and len(running) < n and not errors:
                if progress is not None and len(files) > PROGRESS_FILES:
                    progress(f"reading trace {sent + 1}/{len(files)}: {files[sent].name} "
                             f"({n} worker processes)")
                running[_sent(pool, files[sent], costs)] = sent
                sent += 1
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                i = running.pop(future)
                try:
                    results[i] = future.result()
                except BrokenProcessPool as exc:
                    errors[i] = WorkFailed(
                        f"{files[i]}: a worker process stopped without a result while this "
                        "file was being read (killed, or out of memory? --workers 1 reads "
                        "in this process)", error_id="workers")
                    errors[i].__cause__ = exc
                except Exception as exc:  # what read_trace raised, as it raised it
                    errors[i] = exc
            if errors and all(i > min(errors) for i in running.values()):
                break  # every file before the failing one is read
        if errors:
            raise errors[min(errors)]
    finally:
        if running:  # an error or an interrupt: the files still in flight are not waited for
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
    return [results[i] for i in range(len(files))]


# What a worker of read_trace_in_pool holds: its imports and a chunk's decoded events.
_WORKER_PEAK = 256 << 20


def chunk_workers(path: Path, asked: int | None) -> int:
    """The worker processes for reading one trace's chunks: ``asked`` (--workers), as many
    as fit in the memory available beside what reading holds; else 1 (this process).

    Not one per core by default: on 2 cores, 2 workers read the 1.01 M-event trace in the
    same wall time as this process alone (3.33-3.58 s against 3.36-3.58 s, 3 runs), for
    55% more CPU and 2.4 times the memory (docs/benchmarks.md); on more cores it is not
    measured yet."""
    if asked is None or asked <= 1:
        return 1
    from .. import memory

    budget = memory.available()
    if budget is None:
        return asked
    return max(1, min(asked, budget // 2 // _WORKER_PEAK))


def read_trace_in_pool(path: Path, costs: bool, n: int) -> Profile:
    """read_trace's Profile of one trace, its chunks decoded and gathered into columns in
    ``n`` spawned processes (part_of) while this process cuts the file and joins the
    parts in order: at most n + 2 chunks in flight (8 MiB each), so that reading holds
    those and the columns. A worker that stops without a result (killed, out of memory) is said in
    one line."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from .columns import gather
    from .traces import part_of, read_trace_with

    work_begins()  # child processes from here: an interrupt raises, and they are stopped
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_quiet_worker, initargs=(os.getpid(),))
    flight: deque[Future[Any]] = deque()

    def parts(chunks: Any) -> Any:
        try:
            for chunk in chunks:
                if isinstance(chunk, bytes):
                    flight.append(_submitted(pool, part_of, chunk, costs))
                    if len(flight) < n + 2:  # each worker busy, and the next chunks cut
                        continue
                else:  # the last events, decoded here: the parts before them come first
                    while flight:
                        yield flight.popleft().result()
                    yield gather(chunk)
                    continue
                yield flight.popleft().result()
            while flight:
                yield flight.popleft().result()
        except BrokenProcessPool as exc:
            raise WorkFailed(f"{path}: a worker process stopped without a result while the "
                             "trace was being read (killed, or out of memory? --workers 1 "
                             "reads it in this process)", error_id="workers") from exc

    try:
        return read_trace_with(path, costs, parts)
    finally:
        if flight:  # an error or an interrupt: the chunks in flight are not waited for
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _submitted(pool: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``pool.submit(fn, *args, **kwargs)`` with SIGINT blocked meanwhile (_sent)."""
    if not hasattr(signal, "pthread_sigmask"):
        return pool.submit(fn, *args, **kwargs)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(fn, *args, **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


# The settings from the environment that reading a trace reads (traces._max_ratio): a Dask
# worker has its own environment, so the command's go with each task.
SETTINGS = ("REPORTER_MAX_INFLATE_RATIO",)


def _read_remote(path: str, costs: bool, settings: dict[str, str]) -> Profile:
    """A Dask task: one rank's file read on a worker, its Profile returned, with the
    command's SETTINGS. A path the worker cannot see is said as such (the folder must be
    on a filesystem every worker shares, at the same path)."""
    import socket

    if not os.path.exists(path):
        raise BadInput(f"{path}: not found on the Dask worker {socket.gethostname()}: every "
                       "worker must see the folder at the same path (a shared filesystem)",
                       error_id="scheduler")
    for name in SETTINGS:
        if name in settings:
            os.environ[name] = settings[name]
        else:
            os.environ.pop(name, None)
    return read_trace(Path(path), costs=costs)


def _client(address: str) -> Any:
    """A client of the Dask scheduler at ``address``, or a one-line error: dask missing, an
    address it cannot parse, a scheduler that does not answer in CONNECT_TIMEOUT_S, or
    something else answering there. The scheduler is greeted first, on a connection of
    its own: a Client that fails to start is left half made, and says so with a
    traceback when it is collected."""
    try:
        from distributed import Client
        from distributed.comm import connect
    except ImportError as exc:
        raise BadInput("--scheduler needs Dask: pip install 'reporter[dask]' "
                       f"({type(exc).__name__}: {exc})", error_id="scheduler") from exc
    import asyncio
    import logging

    # distributed logs each failed connection attempt with its traceback: the error below
    # says it in one line
    for name in ("distributed", "distributed.client", "distributed.comm"):
        logging.getLogger(name).setLevel(logging.CRITICAL)

    async def greet() -> None:
        comm = await connect(address, timeout=CONNECT_TIMEOUT_S)
        await comm.close()

    def why(exc: BaseException) -> str:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    try:
        asyncio.run(greet())
    except (ValueError, TypeError) as exc:
        raise BadInput(f"--scheduler {address!r}: not a Dask scheduler's address "
                       f"({why(exc)}); give tcp://HOST:8786", error_id="scheduler") from exc
    except (OSError, TimeoutError) as exc:
        raise WorkFailed(f"cannot reach the Dask scheduler at {address} within "
                         f"{CONNECT_TIMEOUT_S} s ({why(exc)}): is 'dask scheduler' running "
                         "there, and its port open?", error_id="scheduler") from exc
    except Exception as exc:  # something answered, not in Dask's protocol
        raise WorkFailed(f"{address} answered, but not as a Dask scheduler ({why(exc)[:120]})",
                         error_id="scheduler") from exc
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except Exception as exc:  # it answered a moment ago
        raise WorkFailed(f"the Dask scheduler at {address} did not take a client "
                         f"({why(exc)})", error_id="scheduler") from exc
    try:  # a scheduler without workers would hold the tasks for ever
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:
        client.close()
        raise WorkFailed(f"the Dask scheduler at {address} has no worker (none joined in "
                         f"{CONNECT_TIMEOUT_S} s): start some with 'dask worker {address}'",
                         error_id="scheduler") from exc
    return client


def _on_cluster(files: list[Path], costs: bool, progress: Callable[[str], None] | None,
                address: str) -> list[Profile]:
    """Read ``files`` on the Dask cluster at ``address``: each file's path goes to a worker
    and its Profile comes back, taken as soon as it is done (the cluster holds no result
    longer). On an error, the files after the failing one are cancelled and those before
    it waited for: the error raised is the first failing file's, in the files' order."""
    work_begins()  # a connection and threads from here: an interrupt raises, they close
    client = _client(address)
    from distributed import as_completed

    try:
        paths = [str(p.resolve()) for p in files]
        settings = {k: os.environ[k] for k in SETTINGS if k in os.environ}
        futures = client.map(_read_remote, paths, costs=costs, settings=settings, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Profile | None] = [None] * len(files)
        errors: dict[int, BaseException] = {}
        finished = 0
        for future in as_completed(futures, loop=client.loop):
            i = index[future.key]
            if future.cancelled():
                continue
            try:
                results[i] = future.result()
            except ReporterError as exc:
                errors[i] = exc
            except Exception as exc:  # a worker's failure (its environment): one line
                text = " ".join(str(exc).split())[:300]
                hint = ("; every worker needs reporter installed, the same version"
                        if isinstance(exc, ImportError) or "serializ" in text else "")
                errors[i] = WorkFailed(f"{files[i]}: a Dask worker failed reading it "
                                       f"({type(exc).__name__}: {text}{hint})",
                                       error_id="scheduler")
            future.release()
            finished += 1
            if i in errors:
                client.cancel([f for j, f in enumerate(futures) if j > min(errors)])
            if progress is not None and len(files) > PROGRESS_FILES:
                progress(f"read trace {finished}/{len(files)} on the cluster: {files[i].name}")
        if errors:
            raise errors[min(errors)]
        return [r for r in results if r is not None]
    finally:
        client.close()
