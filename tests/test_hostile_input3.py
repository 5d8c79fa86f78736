"""Untrusted input, third probe (issue 35, reliability-2026-11-23.md): each odd input runs
the real command in a child process under an address-space and a time limit
(resource.setrlimit in preexec_fn), and must end in one line, the right exit code and
bounded time.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

MEMORY_B = 2 << 30


def _limits(memory: int, cpu_s: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    return apply


def reporter(*argv, cwd: Path, timeout: float = 30, memory: int = MEMORY_B,
             env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """The real command in a child process under ``memory`` bytes of address space and
    ``timeout`` seconds (CPU and wall); returns it with its wall time."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "reporter", *map(str, argv)], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=timeout,
                         preexec_fn=_limits(memory, int(timeout)))
    return res, time.monotonic() - start


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def test_help_and_version_load_no_renderer(tmp_path):
    """I6: what `reporter --help` and `--version` import stays light (no Jinja, Babel's
    formatting, matplotlib or the report templates), so start-up is short."""
    code = ("import sys\nfrom reporter import cli\ncli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'jinja2', "
            "'weasyprint', 'torch') or m in ('reporter.render.report', 'reporter.render.view', "
            "'reporter.render.charts', 'reporter.analyze.analyzer')))")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         preexec_fn=_limits(MEMORY_B, 60))
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr
    for flag in ("--help", "--version"):
        res, _ = reporter(flag, cwd=tmp_path)
        assert res.returncode == 0 and res.stderr == "" and "reporter" in res.stdout
