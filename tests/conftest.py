"""Shared helpers: run the CLI in-process, find fixtures, scrub volatile text."""

from __future__ import annotations

import io
import shutil
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from reporter.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = ROOT.parent / "shared"
SEEDS = FIXTURES / "seeds"  # the five seed reports (../shared/seeds), whose tables are data


@dataclass
class Result:
    code: int
    out: str
    err: str


def cli(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture(autouse=True, scope="session")
def _cpu_isa():
    """Tests that time products themselves get the runner's guard against CPUs that list
    AMX and trap it (reporter.collect.isa)."""
    from reporter.collect.isa import guard

    guard()


@pytest.fixture(autouse=True, scope="session")
def _own_cache(tmp_path_factory):
    """The compiled templates the tests' renders keep (reporter.render.report.template_cache)
    go to a folder of the session's, not the user's ~/.cache; subprocesses inherit it."""
    import os

    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def stored(tmp_path: Path):
    """Copy a fixture run into a fresh runs folder; returns (runs root, run folder)."""
    def copy(name: str) -> tuple[Path, Path]:
        root = tmp_path / "stored"
        dest = root / name
        shutil.copytree(FIXTURES / "runs" / name, dest)
        return root, dest
    return copy


@pytest.fixture(scope="session")
def live_run():
    """Profile a built-in target once per test session (default size, CPU) and share the Run.

    Each target is profiled in a fresh process, as ``reporter run`` profiles it: what the
    allocator hands out, and so the page faults a step takes, depends on what the process
    ran before (the pairwise share of transformer-bloat's step that elementwise-blowup
    weighs against its 30% read 52-88% in six fresh processes, and 30-87% after other
    profiles in the same process, under 30% in 3 of 27 such profiles)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cache = {}

    def get(name: str):
        if name not in cache:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                cache[name] = pool.submit(_profile_in_a_fresh_process, name).result()
        return cache[name]
    return get


def _profile_in_a_fresh_process(name: str):
    """A built-in target's Run at its default size on the CPU (live_run's child)."""
    import tempfile

    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    spec, builder = resolve(name)
    with tempfile.TemporaryDirectory() as scratch:
        return profile_target(spec, builder, RunOptions(device="cpu", windows=3), Path(scratch))


def render_finding(finding, lang: str) -> str:
    """One finding's bullet in a language, as a GPU report prints it."""
    from reporter.render.report import render_markdown
    from reporter.render.view import Fmt, _finding_view

    fmt = Fmt(lang)
    return render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                            "f": _finding_view(finding, fmt)},
                           template=f"findings/{finding.rule}.md.j2")


def with_a_slower_rank(run, factor: float = 1.3, comm_us: float = 2000.0):
    """The stored ``run`` (changed in place) as rank 0 beside a copy of its sections whose
    steps take ``factor`` times as long, with ``comm_us`` of communication a step and none
    of it overlapped, as rank 1: the copy's sections."""
    import copy

    other = copy.deepcopy(run.sections)
    for s in other:
        b = s.profile.breakdown
        b.steps_us = [us * factor for us in b.steps_us]
        s.profile.comm_us, s.profile.comm_overlap_us = comm_us * len(b.steps_us), 0.0
    run.ranks = [{"rank": 0, "status": "ok", "error": None, "main": True, "sections": None},
                 {"rank": 1, "status": "ok", "error": None, "main": False, "sections": other}]
    return other
