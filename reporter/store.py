"""runs/<run-id>/: run.json, the gzipped Chrome traces, and rendered reports.

A run folder appears complete or not at all: it is assembled in a hidden
staging folder (``runs/.<id>.partial``) and renamed into place at the end.
Files written later (reports rendered again) go through ``write_atomic``.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import gzip
import hashlib
import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from . import __version__, validate
from .errors import BadInput, WorkFailed, read_error, signals_deferred, work_begins
from .model.run import Run

# Format history of run.json (meta.format):
#   1: first version: meta, run (target, env, sections with profile, tables,
#      throughput, memory, benchmark, trace file name).
#   2: run.ranks for distributed runs; profile.comm_us, comm_overlap_us,
#      peak_device_mem_b, device_mem_capacity_b, device_name. Reads format 1.
#      Since reporter 0.1.0's CUDA fixes, a section may carry ``precision`` (TF32 and
#      autocast in effect on a GPU); readers without it ignore it, so still format 2.
#      A section may also carry ``tensor_memory`` (the memory profile of one
#      step) or ``tensor_memory_note``, and memory.host_held_b/host_net_peak_b:
#      optional, so still format 2.
#    - optional Profile.costs, cost_basis, not_modelled_us, shapes_recorded and
#      Section.peaks (efficiency: FLOPs and bytes of modelled operators, the machine's
#      peaks); runs without them say so in their reports, so still format 2.
#    - optional Throughput.disturbance (per timed window), Section.profile_disturbance and
#      profile_attempts, Peaks.disturbed (reporter.model.contention): runs without them
#      could not tell a busy machine, and read as undisturbed, so still format 2.
FORMAT = 2
RUN_FILE = "run.json"
MAX_RUN_FILE = 256 << 20  # bytes: a run.json holds numbers and a few tables
STAGING_SUFFIX = ".partial"

# Budgets of a stored run: a crafted run.json of a few hundred KB could otherwise keep
# ``render`` busy for minutes or take gigabytes (a chart bar per step, a binomial per
# window). A live run stays far below each: 2 sections, a few hundred windows, tens of
# profiled steps, 200 memory points, thousands of operators. The key of a list (or of
# the object holding lists) sets its limit; any other list or object holds at most
# MAX_ITEMS, any string at most MAX_STRING characters (the longest name a reader takes).
MAX_ITEMS = 200_000
MAX_STRING = 65_536
LIMITS = {"sections": 16, "ranks": 1_024, "windows": 10_000, "disturbance": 10_000,
          "steps_us": 10_000, "host_us": 10_000, "device_us": 10_000,
          "device_notes_us": 10_000, "timeline_ms": 10_000, "timeline_b": 10_000,
          "at_peak_b": 64, "flops": 64, "whatif": 1_000, "benchmark": 10_000,
          "precision": 64}
_UNREAD = {"tables"}  # fields of old runs that nothing reads: not walked


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write a file so that it is either whole or absent: temp file, then rename."""
    path = Path(path)
    work_begins()
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # The temp file's name is chosen before it exists, so that an interrupt at any point,
    # even inside the call that creates it, leaves nothing behind: the cleanup knows the
    # name (with mkstemp, an interrupt between its creating the file and returning its
    # name left a .tmp file, which a fast chart writer met in CI). The mode is the
    # user's umask applied to 0666, as for any file created without one.
    name = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    tmp: Path | None = name  # what to remove if this fails
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            tmp = None  # another's file of that name (48 random bits): not ours to remove
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(name, path)
    except BaseException:
        if tmp is not None:
            with _ignore_missing():
                os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def _ignore_missing() -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        pass


def run_to_json(run: Run) -> str:
    doc = {"meta": {"format": FORMAT, "reporter": __version__, "torch": run.env.get("torch"),
                    "created": run.created, "device": run.device},
           "run": run.to_dict()}
    return json.dumps(doc, ensure_ascii=False, indent=1)


@contextmanager
def staging(root: Path) -> Iterator[Path]:
    """A hidden folder to assemble a run in, with an owner file (OWNER_FILE) that tells
    which process on which machine assembles it; removed if the block fails."""
    root = Path(root)
    work_begins()
    root.mkdir(parents=True, exist_ok=True)
    # the name says who made it too (``_made_here``): a kill between making the folder
    # and writing its owner file leaves an empty folder that only its name can prove gone
    path = Path(tempfile.mkdtemp(prefix=f".{os.getpid()}-{_here_tag()}-",
                                 suffix=STAGING_SUFFIX, dir=root))
    try:
        os.chmod(path, 0o777 & ~_umask())  # mkdtemp makes 0700
        (path / OWNER_FILE).write_text(json.dumps(owner_record()), encoding="utf-8")
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        reserved = _reserved.pop(path, None)
        if reserved is not None:  # the run's folder, still empty unless it was committed
            with contextlib.suppress(OSError):
                os.rmdir(reserved)


# A staging folder's owner: the host, its boot, the pid namespace and the process (with
# its start time, against a reused pid). Another process removes the folder only when it
# can prove the owner gone: same host and boot, same pid namespace, and no process with
# that pid and start time. A folder of another host, boot or container (a runs folder on
# a shared volume), or without an owner file, is left alone unless nothing in it changed
# for STALE_AFTER_S.
OWNER_FILE = ".owner.json"
STALE_AFTER_S = 7 * 24 * 3600
MAX_OWNER_B = 64 << 10  # an owner file is a few hundred bytes
MAX_STALE_ENTRIES = 10_000  # a staging folder holds a few traces


def owner_record(pid: int | None = None) -> dict[str, Any]:
    """Who owns a staging folder made now by ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid_ns": _pid_ns(), "pid": pid,
            "start": _start_time(pid)}


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _boot_id() -> str | None:
    return _first_line("/proc/sys/kernel/random/boot_id")


def _pid_ns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22)."""
    line = _first_line(f"/proc/{pid}/stat")
    if line is None or ")" not in line:
        return None
    fields = line.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def _owner_gone(path: Path) -> bool:
    """Can this process prove that the staging folder's owner is gone?"""
    owner = None
    try:
        info = os.lstat(path / OWNER_FILE)
        if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_OWNER_B:  # no FIFO, no giant
            owner = json.loads((path / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        owner = None
    # Only when host, boot and pid namespace are all this process's can a pid be looked up:
    # two machines may share a host name and the initial pid namespace's number, never a
    # boot id. A folder of another boot (the machine rebooted, or another machine) waits
    # out STALE_AFTER_S like any other.
    if isinstance(owner, dict) and owner.get("host") == socket.gethostname():
        here_boot = _boot_id()
        if (here_boot is not None and owner.get("boot") == here_boot
                and owner.get("pid_ns") == _pid_ns()
                and owner.get("pid_ns") is not None and type(owner.get("pid")) is int):
            pid = owner["pid"]
            return not _alive(pid) or (owner.get("start") is not None
                                       and _start_time(pid) not in (None, owner["start"]))
    if owner is None and _made_here_by_the_dead(path):
        return True  # killed between making the folder and writing its owner file
    return _untouched_for(path, STALE_AFTER_S)  # another host or container, or no owner


def _here_tag() -> str:
    """This boot and pid namespace, in ten hex digits for a staging folder's name (None
    parts: "none", which no folder's name is checked against)."""
    boot, ns = _boot_id(), _pid_ns()
    if boot is None or ns is None:
        return "none"
    return hashlib.sha1(f"{boot}|{ns}".encode()).hexdigest()[:10]


def _made_here_by_the_dead(path: Path) -> bool:
    """An empty staging folder whose name (``staging``: ``.<pid>-<tag>-XXXX.partial``)
    says this boot and pid namespace made it, by a pid not alive here: its maker was
    killed in the instant between making it and writing its owner file (a compare killed
    with SIGKILL as it began, tests/test_crash_consistency.py), or while it wrote the file
    (called only where the owner file could not be read: it holds an empty or cut JSON).
    Holding nothing else, it holds nothing of a run."""
    pid, _, rest = path.name[1:].partition("-")
    tag = rest.partition("-")[0]
    if not pid.isdigit() or tag == "none" or tag != _here_tag():
        return False
    try:
        if any(entry.name != OWNER_FILE for entry in path.iterdir()):
            return False
    except OSError:
        return False
    return not _alive(int(pid))


def _untouched_for(path: Path, seconds: float) -> bool:
    """Did nothing in the folder change for ``seconds``? Not provable (False) past
    MAX_STALE_ENTRIES entries."""
    newest = 0.0
    try:
        newest = path.stat().st_mtime
        for i, entry in enumerate(path.rglob("*")):
            if i >= MAX_STALE_ENTRIES:
                return False
            newest = max(newest, entry.lstat().st_mtime)
    except OSError:
        return False
    return time.time() - newest > seconds


def remove_stale(root: Path) -> int:
    """Remove staging folders whose owner is provably gone (killed with SIGKILL, say): see
    OWNER_FILE. Returns how many."""
    removed = 0
    root = Path(root)
    if not root.is_dir():
        return 0
    for path in root.glob(f".*{STAGING_SUFFIX}"):
        if not path.is_dir() or path.is_symlink() or not _owner_gone(path):
            continue
        work_begins()
        shutil.rmtree(path, ignore_errors=True)
        removed += not path.exists()
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid < 1 << 22  # another user's process (or a number no process has)
    return True


# The run folders reserved for staging folders (reserve), by staging folder.
_reserved: dict[Path, Path] = {}
MAX_SAME_NAME = 1000


def new_folder(root: Path, name: str) -> Path:
    """An empty folder made here and now under ``root`` (made if missing), never one that
    another process made: ``name``, else ``name-2``, ``name-3``, ... (mkdir fails on any
    folder that exists, whoever made it, in the same instant too)."""
    root = Path(root)
    work_begins()
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, MAX_SAME_NAME):
        path = root / (name if n == 1 else f"{name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise WorkFailed(f"{root}: {MAX_SAME_NAME - 1} folders named {name}*: clean some up",
                     error_id="io")


def reserve(run: Run, stage: Path, root: Path) -> Path:
    """The folder the run in ``stage`` will be committed to, made now (empty) so that no
    other run takes its id: a run of the same target in the same second whose id's random
    part is the same (1 in 65,536) gets ``<id>-2``; ``run.id`` is the folder's name. The
    folder is removed with the staging folder unless the run was committed into it."""
    stage = Path(stage)
    if stage in _reserved:
        return _reserved[stage]
    with signals_deferred():  # the folder is known to staging()'s cleanup once made
        final = new_folder(root, run.id)
        _reserved[stage] = final
    run.id = final.name
    return final


def pack_traces(run: Run, stage: Path) -> None:
    """Gzip each section's trace in ``stage`` (trace-train.json -> trace-train.json.gz)
    and name the file that is there in the run, so that a report written before the
    commit names it too; a trace that is missing is named by none. Done once: a trace
    already gzipped stays as it is."""
    for section in run.sections:
        if not section.trace:
            continue
        raw = stage / section.trace
        if section.trace.endswith(".gz") and raw.is_file():
            continue
        if raw.exists():
            with open(raw, "rb") as src, gzip.open(stage / f"{section.trace}.gz", "wb",
                                                   compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)
            raw.unlink()
            section.trace = f"{section.trace}.gz"
        else:
            section.trace = None


def commit(run: Run, stage: Path, root: Path) -> Path:
    """Gzip the traces, write run.json, and move the folder into place: into the folder
    ``reserve`` made (reserved here if it was not), never onto or into another run."""
    final = reserve(run, stage, root)
    pack_traces(run, stage)
    (stage / RUN_FILE).write_text(run_to_json(run), encoding="utf-8")
    with _ignore_missing():
        (stage / OWNER_FILE).unlink()  # a stored run has no owner file
    move_into(stage, final)  # staging()'s cleanup then finds nothing to remove
    return final


def move_into(stage: Path, final: Path) -> None:
    """Rename a finished staging folder onto the empty folder reserved for it (rename(2)
    replaces an empty folder, and fails on one that holds anything: never a merge)."""
    try:
        os.rename(stage, final)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise WorkFailed(f"{final} is no longer the empty folder reserved for this "
                             "output: another process wrote into it; nothing was stored",
                             error_id="io") from exc
        raise


def find(ref: str | Path, root: Path) -> Path:
    """A run folder from a path (folder or run.json), a run id, or 'latest'."""
    root = Path(root)
    candidates = [Path(ref)]
    if str(ref) == "latest":
        runs = [folder for folder, info in list_runs(root) if "error" not in info]
        if not runs:
            raise BadInput(f"no readable stored runs under {root}", error_id="no-run")
        return runs[-1]
    candidates.append(root / str(ref))
    for path in candidates:
        if path.is_file() and path.name == RUN_FILE:
            return path.parent
        if (path / RUN_FILE).is_file():
            return path
    pattern = f"*{glob.escape(str(ref))}*/{RUN_FILE}"
    try:
        matches = sorted(p.parent for p in root.glob(pattern)) if root.is_dir() else []
    except ValueError:  # a reference that is no folder name (a separator of its own, say)
        matches = []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise BadInput(f"run {ref!r} is ambiguous: {len(matches)} runs match under {root}",
                       error_id="no-run")
    raise BadInput(f"no run {ref!r}: not a run folder, a run.json, or a run id under {root}",
                   error_id="no-run")


def load(folder: Path) -> Run:
    """Read and check run.json; refuse what is corrupt or from a newer reporter."""
    path = Path(folder) / RUN_FILE
    try:
        size = path.stat().st_size
        if size > MAX_RUN_FILE:
            raise BadInput(f"{path} is {size:,} bytes, over the limit of {MAX_RUN_FILE:,} for "
                           "a run.json; the run is corrupted", error_id="bad-run")
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except OSError as exc:
        raise read_error(path, exc, "bad-run") from exc
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise BadInput(f"{path} is not valid JSON ({exc}); the run is corrupted",
                       error_id="bad-run") from exc
    except RecursionError as exc:
        raise BadInput(f"{path} is nested too deeply to be a run; the run is corrupted",
                       error_id="bad-run") from exc
    meta = doc.get("meta") if isinstance(doc, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    fmt = meta.get("format")
    if type(fmt) is not int or fmt < 1:
        raise BadInput(f"{path} has no meta.format (a positive integer): not a reporter run",
                       error_id="bad-run")
    if fmt > FORMAT:
        raise BadInput(f"{path} has format {fmt}, newer than this reporter reads ({FORMAT}); "
                       f"upgrade reporter (written by reporter {meta.get('reporter')})",
                       error_id="newer-format")
    try:
        _check_budget(doc.get("run"))
    except ValueError as exc:
        raise BadInput(f"{path} is corrupted or crafted: {exc}", error_id="bad-run") from exc
    try:
        run = Run.from_dict(doc["run"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadInput(f"{path} is corrupted: missing or malformed field {exc}",
                       error_id="bad-run") from exc
    try:
        _check_run(run)
    except ValueError as exc:
        raise BadInput(f"{path} is corrupted: {exc}", error_id="bad-run") from exc
    return run


def _check_budget(data: Any) -> None:
    """Raise ValueError naming the first list, object or string of a run document over its
    limit (LIMITS, MAX_ITEMS, MAX_STRING); linear in the document, before any other work."""
    # Entries: (node, its limit, the entry of its parent, its key there); the path is only
    # spelled out for the error.
    stack: list[tuple[Any, int, Any, Any]] = [(data, MAX_ITEMS, None, "run")]
    while stack:
        entry = stack.pop()
        node, limit = entry[0], entry[1]
        if isinstance(node, str):
            if len(node) > MAX_STRING:
                raise ValueError(f"{_path(entry)} is a string of {len(node):,} characters, "
                                 f"over the limit of {MAX_STRING:,}")
            if not node.isascii() and entry[2] is not None:  # lone surrogates: U+FFFD
                entry[2][0][entry[3]] = validate.well_formed(node)
            continue
        if not isinstance(node, (list, dict)):  # no run, or the run itself a number
            raise ValueError(f"{_path(entry)}: expected an object, got {_describe(node)}")
        if len(node) > limit:
            raise ValueError(f"{_path(entry)} holds {len(node):,} items, over the limit of "
                             f"{limit:,}")
        if isinstance(node, list):  # a list's items start again from the default
            for i, item in enumerate(node):
                if isinstance(item, (str, list, dict)):
                    stack.append((item, MAX_ITEMS, entry, i))
                elif type(item) is not float and type(item) is not int:
                    continue
                elif not _in_range(item):
                    raise ValueError(_out_of_range((item, limit, entry, i)))
            continue
        for key in [k for k in node if not k.isascii() and validate.well_formed(k) != k]:
            node[validate.well_formed(key)] = node.pop(key)
        for key, item in node.items():
            if len(key) > MAX_STRING:
                raise ValueError(f"{_path(entry)} has a key of {len(key):,} characters, over "
                                 f"the limit of {MAX_STRING:,}")
            if key in _UNREAD:
                continue
            if isinstance(item, (str, list, dict)):
                # The lists in a limited object keep its limit (host_us.forward).
                stack.append((item, LIMITS.get(key, limit), entry, key))
            elif (type(item) is float or type(item) is int) and not _in_range(item):
                raise ValueError(_out_of_range((item, limit, entry, key)))


def _in_range(number: int | float) -> bool:
    """A JSON number a run can hold: finite (1e400 reads as inf) and at most MAX_NUMBER
    (10**400 reads as an int no float holds: every sum or share of it would fail)."""
    return -validate.MAX_NUMBER <= number <= validate.MAX_NUMBER


def _out_of_range(entry: Any) -> str:
    return (f"{_path(entry)}: expected a finite number of at most {validate.MAX_NUMBER:g}, "
            f"got {_describe(entry[0])}")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _path(entry: Any) -> str:
    parts = []
    while entry is not None:
        key = entry[3]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key[:40]}")
        entry = entry[2]
    return "".join(reversed(parts)).lstrip(".")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _check_run(run: Run) -> None:
    """Every field of a loaded run has its type; the free-form ones the fields we read."""
    validate.check(run, "run")
    validate.check_fields(run.target, {"name": str, "spec": str, "preset": str,
                                       "batch_size": int | None, "seed": str | None,
                                       "builtin": bool}, "run.target")
    missing = [key for key in ("name", "preset") if key not in run.target]
    if missing:  # what the report and `list` call the run, and the size it ran at
        raise ValueError(f"run.target: no {' and no '.join(missing)}")
    if not run.id.strip():  # a report without it reads as one of an imported profile
        raise ValueError("run.id: empty")
    validate.check_fields(run.env, {k: str | None for k in (
        "torch", "cuda", "hip", "driver", "device_name", "cpu", "python")}
        | {"device_memory_b": int | None, "cpu_count": int | None, "threads": int | None},
        "run.env")
    if not run.sections:
        raise ValueError("run.sections: no section")
    for i, section in enumerate(run.sections):
        _check_efficiency(section, f"run.sections[{i}]")
        _check_consistent(section, f"run.sections[{i}]")
    try:
        datetime.fromisoformat(run.created)
    except ValueError:
        raise ValueError(f"run.created: not a date: {run.created[:40]!r}") from None
    for i, rank in enumerate(run.ranks or []):
        validate.check_fields(rank, {"rank": int, "error": str | None, "main": bool},
                              f"run.ranks[{i}]")
        if rank.get("status") not in ("ok", "failed", "missing") or "rank" not in rank:
            raise ValueError(f"run.ranks[{i}]: no rank number or an unknown status")
    if run.ranks and sum(bool(rank.get("main")) for rank in run.ranks) != 1:
        raise ValueError("run.ranks: not exactly one main rank (the one whose sections the "
                         "run's are)")
    for i, rank in enumerate(run.ranks or []):
        for j, section in enumerate(rank.get("sections") or []):
            validate.check(section, f"run.ranks[{i}].sections[{j}]")
            _check_efficiency(section, f"run.ranks[{i}].sections[{j}]")
            _check_consistent(section, f"run.ranks[{i}].sections[{j}]")


_COST_FIELDS = {"name": str, "dtype": str, "family": str, "phase": str, "calls": int,
                "flops": float, "bytes": float, "time_us": float}
_PEAK_FIELDS = {"source": str, "device": str, "flops": dict[str, float], "bandwidth": float,
                "reference": str, "seconds": float | None, "threads": int | None,
                "disturbed": bool}


_BENCH_FIELDS = {"op": str, "cpu_ms": float, "gpu_ms": float | None}
_TF32_FIELDS = {"matmul": bool | None, "conv": bool | None, "override": bool | None}


def _check_consistent(section: Any, where: str) -> None:
    """What the type check cannot see: rows of the side benchmark, the precision, and lists
    that go together (a value per step, a value per memory-timeline point)."""
    for k, row in enumerate(section.benchmark or []):
        validate.check_fields(row, _BENCH_FIELDS, f"{where}.benchmark[{k}]")
        if not {"op", "cpu_ms"} <= set(row):
            raise ValueError(f"{where}.benchmark[{k}]: no op and cpu_ms")
    validate.check_fields(section.precision, {"tf32": dict[str, Any], "autocast": str | None},
                          f"{where}.precision")
    if "tf32" in section.precision:
        validate.check_fields(section.precision["tf32"], _TF32_FIELDS, f"{where}.precision.tf32")
    _check_process(section.process, f"{where}.process")
    b = section.profile.breakdown
    if b is not None:
        _check_breakdown(b, f"{where}.profile.breakdown")
    if section.profile.stragglers:
        _check_stragglers(section.profile.stragglers, f"{where}.profile.stragglers")
    if b is not None:
        for name in ("host_us", "device_us", "device_notes_us"):
            for key, values in getattr(b, name).items():
                if len(values) != len(b.steps_us):
                    raise ValueError(f"{where}.profile.breakdown.{name}.{key[:40]}: "
                                     f"{len(values)} values for {len(b.steps_us)} steps")
    tm = section.tensor_memory
    if tm is not None:
        for key, values in tm.timeline_b.items():
            if len(values) != len(tm.timeline_ms):
                raise ValueError(f"{where}.tensor_memory.timeline_b.{key[:40]}: {len(values)} "
                                 f"values for {len(tm.timeline_ms)} points")


# What the runner observed of the process around the step (run.Section.process): each
# known key of its type and within its bounds (the report prints them and the rules
# count with them); a key this reporter does not know is left unread.
_PROCESS_FLAGS = ("grad_enabled", "anomaly", "cudnn_benchmark", "deterministic",
                  "runner_threads", "runner_inference_mode", "runner_eval", "probe_grad_fn")
_PROCESS_COUNTS = {"threads": 1 << 16, "training_modules": 1 << 30,
                   "training_layers": 1 << 30, "probe_saved_b": 1 << 60}
_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _check_process(process: dict[str, Any], where: str) -> None:
    validate.check_fields(process, {**{k: bool for k in _PROCESS_FLAGS},
                                    **{k: int for k in _PROCESS_COUNTS},
                                    "default_dtype": str}, where)
    for key, most in _PROCESS_COUNTS.items():
        if key in process and not 0 <= process[key] <= most:
            raise ValueError(f"{where}.{key}: {process[key]} is not between 0 and {most:,}")
    if "default_dtype" in process and process["default_dtype"] not in _DTYPES:
        raise ValueError(f"{where}.default_dtype: {str(process['default_dtype'])[:40]!r} is "
                         f"none of {', '.join(_DTYPES)}")


# The free-form parts of a step breakdown and of the ranks' stragglers, as the analysis
# writes them (analyze.breakdown, analyze.critical_path, analyze.stragglers) and the
# report's view reads them: each field of its type, the keys it indexes present, the
# names it looks up in the templates' own tables among theirs.
_COPY_FIELDS = {"direction": str, "kind": str, "name": str, "copies": int, "bytes": float,
                "time_us": float, "gbps": float, "peak_gbps": float | None,
                "link": str | None, "peak_share": float | None}
_COPY_NEEDED = ("direction", "kind", "copies", "bytes", "time_us", "gbps")
_COPY_CHOICES = {"direction": ("h2d", "d2h", "d2d"),
                 "kind": ("pageable", "pinned", "device", "peer")}
_CRITICAL_FIELDS = {"steps": int, "step_us": float, "device": bool,
                    **{k: dict[str, float] for k in ("host_us", "device_us", "between_us",
                                                     "host_total_us", "device_total_us")}}
_LAUNCH_NEEDED = ("kernels", "delay_median_us", "delay_p90_us", "delay_max_us",
                  "launches_per_step", "steps", "dry_steps")
_QUEUE_NEEDED = ("mean", "max", "full_us")
_CAUSES = ("compute", "communication", "host", "waiting")  # analyze.stragglers.CAUSES
_STRAGGLER_FIELDS = {"ranks": list[dict[str, Any]], "device": bool, "slowest": str | int,
                     "slowest_step_us": float, "reference_step_us": float, "extra_us": float,
                     "extra_share": float, "extra_by_cause_us": dict[str, float], "cause": str}
_RANK_FIELDS = {"rank": str | int, "steps": int, "step_us": float,
                **{cause: float for cause in _CAUSES}}


def _check_row(row: Any, fields: dict[str, Any], needed: tuple[str, ...], where: str,
               choices: dict[str, tuple[str, ...]] | None = None) -> None:
    """A free-form object: each known field of its type, the ``needed`` ones present, and
    the ``choices`` among theirs."""
    validate.check_fields(row, fields, where)
    missing = [key for key in needed if key not in row]
    if missing:
        raise ValueError(f"{where}: no {', '.join(missing)}")
    for key, allowed in (choices or {}).items():
        if key in row and row[key] not in allowed:
            raise ValueError(f"{where}.{key}: {str(row[key])[:40]!r} is none of "
                             f"{', '.join(allowed)}")


def _check_breakdown(b: Any, where: str) -> None:
    for k, row in enumerate(b.copies):
        _check_row(row, _COPY_FIELDS, _COPY_NEEDED, f"{where}.copies[{k}]", _COPY_CHOICES)
    if b.critical:
        _check_row(b.critical, _CRITICAL_FIELDS, ("step_us", "device"), f"{where}.critical")
    if b.launch:
        _check_row(b.launch, {}, _LAUNCH_NEEDED, f"{where}.launch")
    for key, q in b.queue.items():
        _check_row(q, {}, _QUEUE_NEEDED, f"{where}.queue.{key[:40]}")
    for key, pair in b.sync_outside.items():  # [time outside the steps, calls]
        if len(pair) != 2:
            raise ValueError(f"{where}.sync_outside.{key[:40]}: {len(pair)} values, not 2")


def _check_stragglers(s: Any, where: str) -> None:
    _check_row(s, _STRAGGLER_FIELDS, tuple(_STRAGGLER_FIELDS), where, {"cause": _CAUSES})
    for k, row in enumerate(s["ranks"]):
        _check_row(row, _RANK_FIELDS, tuple(_RANK_FIELDS), f"{where}.ranks[{k}]")
    odd = set(s["extra_by_cause_us"]) ^ set(_CAUSES)
    if odd:
        raise ValueError(f"{where}.extra_by_cause_us: not one time per cause "
                         f"({', '.join(_CAUSES)})")


def _check_efficiency(section: Any, where: str) -> None:
    """The free-form rows reporter.analyze.efficiency reads: every field there, of its type."""
    if section.profile.cost_basis not in (None, "device", "cpu"):  # a word the report looks up
        raise ValueError(f"{where}.profile.cost_basis: "
                         f"{str(section.profile.cost_basis)[:40]!r} is neither device nor cpu")
    for k, row in enumerate(section.profile.costs):
        validate.check_fields(row, _COST_FIELDS, f"{where}.profile.costs[{k}]")
        if set(_COST_FIELDS) - set(row):
            raise ValueError(f"{where}.profile.costs[{k}]: missing "
                             f"{', '.join(sorted(set(_COST_FIELDS) - set(row)))}")
    if section.peaks is not None:
        validate.check_fields(section.peaks, _PEAK_FIELDS, f"{where}.peaks")
    for rule, timed in section.whatif.items():
        validate.check_fields(timed, {"before_ms": float, "after_ms": float,
                                      "saved_ms": list[float], "saved_share": list[float],
                                      "whole_step": bool, "fix": str,
                                      "step_is_fixed": bool,
                                      "faults": list[float]},
                              f"{where}.whatif.{rule}")
        if not {"before_ms", "after_ms"} <= set(timed):
            raise ValueError(f"{where}.whatif.{rule}: no before_ms and after_ms")


def list_runs(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Stored runs, oldest first, with a few facts each. Each run.json is loaded whole
    (and checked): a few milliseconds a run."""
    root = Path(root)
    if not root.is_dir():
        return []
    rows: list[tuple[Path, dict[str, Any]]] = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / RUN_FILE).is_file():
            continue
        try:
            run = load(folder)
        except BadInput as exc:
            rows.append((folder, {"error": str(exc)}))
            continue
        first = run.sections[0] if run.sections else None
        rows.append((folder, {
            "id": run.id, "created": run.created, "target": run.target.get("name"),
            "device": run.device, "preset": run.target.get("preset"),
            "samples_per_s": (first.throughput.median if first and first.throughput
                              else None),
            "busy": any(s.busy for s in run.sections),  # the machine's other work disturbed it
            "reports": sorted(p.name for p in folder.glob("report.*")),
        }))
    rows.sort(key=lambda r: (r[1].get("created") or "", r[0].name))
    return rows
