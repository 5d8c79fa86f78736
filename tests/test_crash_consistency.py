"""Crash consistency (issue 70): an interrupt or an error at any moment leaves every report
whole (its charts, its Markdown, its PDF together) or absent, never loses a run, and leaves
no litter; an interrupt at any moment of `reporter` gives one line and 130 (143 for
SIGTERM)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import pytest

from conftest import FIXTURES, ROOT, cli
from reporter.errors import install_signal_handlers
from reporter.render.report import RENDERERS, Renderer, write_reports

OLD = "<!-- old -->"
INTERRUPTED = "reporter: interrupted; nothing half-written was kept"


def _links(md: Path) -> list[str]:
    """The relative link targets of a Markdown report's charts, as file names."""
    return [unquote(x) for x in re.findall(r"\]\(([^)\s]+\.svg)\)", md.read_text("utf-8"))]


def _is_old(path: Path) -> bool:
    return path.read_bytes().rstrip().endswith(OLD.encode())


def _check_whole(folder: Path, stem: str, lang: str, had_old: bool) -> str:
    """The report in ``folder`` is the old set or the new one, whole: every chart its
    Markdown links is there and of the same set as the Markdown, the PDF too, and no PDF
    without its Markdown. Returns "old", "new" or "none"."""
    md, pdf = folder / f"{stem}.{lang}.md", folder / f"{stem}.{lang}.pdf"
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers
    if not md.exists():
        assert not had_old, "the earlier report was lost"
        assert not pdf.exists(), "a PDF without its Markdown"
        assert not list(folder.glob(f"*.{lang}.svg")), "charts without their report"
        return "none"
    state = _is_old(md)
    links = _links(md)
    assert links, "a report without charts: the test needs some"
    for name in links:
        assert (folder / name).is_file(), f"a dangling chart link: {name}"
        assert _is_old(folder / name) == state, f"{name} is of the other set than the md"
    if pdf.exists():
        assert _is_old(pdf) == state, "the PDF is of the other set than the md"
    else:
        assert not had_old and not state
    return "old" if state else "new"


@pytest.fixture(scope="module")
def zh_set(tmp_path_factory):
    """A run's zh report rendered once for real (md, pdf), and its view."""
    from reporter.pipeline import report_view
    from reporter.store import load

    where = tmp_path_factory.mktemp("zh") / "cpu-transformer"
    shutil.copytree(FIXTURES / "runs" / "cpu-transformer", where)
    view = report_view(load(where), "zh")
    paths = write_reports(view, where, ["md", "pdf"])
    return view, where, paths[1].read_bytes()


def _pdf_as_rendered(monkeypatch, pdf: bytes) -> None:
    """The PDF renderer returns the bytes it rendered once (WeasyPrint takes most of a
    second a call; what is tested here is how the files are published)."""
    monkeypatch.setitem(RENDERERS, "pdf", Renderer("pdf", "pdf", lambda view, o, c: pdf))


def _start(tmp_path: Path, zh_set, old: bool) -> Path:
    """A copy of the run; with ``old``, it holds an earlier complete zh set, marked."""
    _, where, _ = zh_set
    folder = tmp_path / "run"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(where, folder)
    for path in folder.iterdir():
        if ".zh." in path.name:
            if old:
                with open(path, "ab") as f:
                    f.write(b"\n" + OLD.encode() + b"\n")
            else:
                path.unlink()
    return folder


@pytest.mark.parametrize("how", ["raise", "term-before", "term-after"])
@pytest.mark.parametrize("old", [False, True], ids=["fresh", "over-an-old-set"])
def test_an_interruption_at_each_rename_keeps_a_whole_report(tmp_path, monkeypatch, zh_set,
                                                             how, old):
    """S2: an exception (KeyboardInterrupt) out of the k-th os.replace, or a SIGTERM just
    before or after it, for every k: the folder holds the old whole set or the new whole
    set, every chart link resolves, no PDF without its Markdown."""
    view, _, pdf = zh_set
    _pdf_as_rendered(monkeypatch, pdf)
    real = os.replace
    seen = {"new": 0, "old": 0, "none": 0}
    restore = install_signal_handlers()
    try:
        for k in range(1, 60):
            folder = _start(tmp_path, zh_set, old)
            calls = [0]

            def replace(src, dst, *args, k=k, calls=calls, **kwargs):
                calls[0] += 1
                if calls[0] != k:
                    return real(src, dst, *args, **kwargs)
                if how == "raise":
                    raise KeyboardInterrupt
                if how == "term-before":
                    os.kill(os.getpid(), signal.SIGTERM)
                real(src, dst, *args, **kwargs)
                if how == "term-after":
                    os.kill(os.getpid(), signal.SIGTERM)

            monkeypatch.setattr(os, "replace", replace)
            try:
                write_reports(view, folder, ["md", "pdf"])
            except KeyboardInterrupt:  # Terminated too
                assert calls[0] >= k
            finally:
                monkeypatch.setattr(os, "replace", real)
            seen[_check_whole(folder, "report", "zh", old)] += 1
            if calls[0] < k:  # ran to its end without meeting the k-th call
                break
        else:
            pytest.fail("write_reports made more than 60 renames")
    finally:
        restore()
    assert seen["new"] >= 1 and seen["old" if old else "none"] >= 1, seen


@pytest.mark.slow
def test_sigterm_at_each_rename_of_a_real_pdf_render(tmp_path, zh_set):
    """S2 as the review reproduced it (strace's SIGTERM at the N-th rename of `render
    --format md,pdf --lang zh` on a run without zh files), with the real PDF renderer."""
    view = zh_set[0]
    real = os.replace
    restore = install_signal_handlers()
    try:
        for k in range(1, 40):
            folder = _start(tmp_path, zh_set, old=False)
            calls = [0]

            def replace(src, dst, *args, k=k, calls=calls, **kwargs):
                calls[0] += 1
                real(src, dst, *args, **kwargs)
                if calls[0] == k:
                    os.kill(os.getpid(), signal.SIGTERM)

            os.replace = replace
            try:
                write_reports(view, folder, ["md", "pdf"])
            except KeyboardInterrupt:
                pass
            finally:
                os.replace = real
            _check_whole(folder, "report", "zh", had_old=False)
            if calls[0] < k:
                break
    finally:
        os.replace = real
        restore()


def _table(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    shutil.copy(FIXTURES / "seeds" / "000_747724d4cec14701.txt", path)
    return path


@pytest.mark.parametrize("name", ["x[1].txt", "x*.txt", "x?.txt"])
def test_an_interrupted_rerender_keeps_the_earlier_reports_charts(tmp_path, monkeypatch,
                                                                  name):
    """S5: `analyze 'x[1].txt' --out o`, then the same with --format md,pdf interrupted
    while the PDF renders: the earlier report keeps its charts (its name is a glob
    pattern nowhere)."""
    table = _table(tmp_path, name)
    out = tmp_path / "o"
    assert cli("analyze", table, "--out", out).code == 0
    md = out / f"{name[:-4]}.report.en.md"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert _links(md), "the test needs a report with a chart"

    def interrupted(view, options, charts):
        raise KeyboardInterrupt
    monkeypatch.setitem(RENDERERS, "pdf", Renderer("pdf", "pdf", interrupted))
    res = cli("analyze", table, "--out", out, "--format", "md,pdf")
    assert res.code == 130 and res.err.strip() == INTERRUPTED, res.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    for link in _links(md):
        assert (out / link).is_file()


def test_a_rerender_removes_only_its_own_stale_charts(tmp_path):
    """The charts an earlier render of a report linked and the new one does not are
    removed; the charts of a report whose name the first's would match as a glob pattern
    (`a*` and `ab`) stay."""
    out = tmp_path / "o"
    for name in ("ab.txt", "a*.txt"):
        assert cli("analyze", _table(tmp_path, name), "--out", out).code == 0
    theirs = {p.name: p.read_bytes() for p in out.glob("ab.*")}
    stale = out / "a*.report-chart-9-profile.en.svg"
    md = out / "a*.report.en.md"
    stale.write_text("<svg/>")
    md.write_text(md.read_text() + "\n![old](a%2A.report-chart-9-profile.en.svg)\n")
    assert cli("analyze", _table(tmp_path, "a*.txt"), "--out", out).code == 0
    assert not stale.exists()
    assert {p.name: p.read_bytes() for p in out.glob("ab.*")} == theirs
    for link in _links(md):
        assert (out / link).is_file()


def test_runs_whose_ids_collide_are_both_kept(tmp_path):
    """C4: two runs given the same id (its random part collides), stored at the same time:
    both are kept, each under its own id, and run.json says the folder's name."""
    from reporter.store import commit, load, staging

    first, second = (load(FIXTURES / "runs" / "cpu-tensor-ops") for _ in range(2))
    assert first.id == second.id
    for run in (first, second):
        run.sections[0].trace = None
    with staging(tmp_path) as a, staging(tmp_path) as b:
        one = commit(first, a, tmp_path)
        two = commit(second, b, tmp_path)
    assert one != two and one.is_dir() and two.is_dir()
    assert {p.name for p in tmp_path.iterdir()} == {one.name, two.name}
    for folder in (one, two):
        assert json.loads((folder / "run.json").read_text())["run"]["id"] == folder.name
    assert load(one).id == one.name and load(two).id == two.name


@pytest.mark.slow
def test_a_live_run_whose_id_collides_is_kept_with_its_own_report(tmp_path, monkeypatch):
    """C4 through `reporter run`: new_run_id forced to give the same id twice; both runs
    are stored, and the second's report names the id it was stored under."""
    from reporter.collect import runner

    fixed = "20261204-000000-tensor-ops-cpu-2a9v"
    monkeypatch.setattr(runner, "new_run_id", lambda name, device, now: fixed)
    runs = tmp_path / "runs"
    res = cli("run", "--target", "tensor-ops", "--target", "tensor-ops", "--device", "cpu",
              "--preset", "tiny", "--time-budget", "0.2", "--out", runs, "--quiet")
    assert res.code == 0, res.err
    folders = sorted(p for p in runs.iterdir())
    assert [p.name for p in folders] == [fixed, f"{fixed}-2"], folders
    for folder in folders:
        assert json.loads((folder / "run.json").read_text())["run"]["id"] == folder.name
        md = (folder / "report.en.md").read_text()
        assert f"{folder.name}`" in md  # the report names its run by the folder's name


def _two_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    for name in ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed"):
        shutil.copytree(FIXTURES / "runs" / name, runs / name)
    return runs


def test_an_interrupted_compare_leaves_no_folder(tmp_path, monkeypatch):
    """K4/S3: a comparison interrupted while it is written leaves no compare-* folder."""
    runs = _two_runs(tmp_path)

    def interrupted(view, options, charts):
        raise KeyboardInterrupt
    monkeypatch.setitem(RENDERERS, "md", Renderer("md", "md", interrupted))
    res = cli("compare", "cpu-transformer-bloat", "cpu-transformer-bloat-fixed",
              "--runs", runs)
    assert res.code == 130 and res.err.strip() == INTERRUPTED, res.err
    assert sorted(p.name for p in runs.iterdir()) == ["cpu-transformer-bloat",
                                                      "cpu-transformer-bloat-fixed"]
    monkeypatch.undo()
    res = cli("compare", "cpu-transformer-bloat", "cpu-transformer-bloat-fixed",
              "--runs", runs)
    assert res.code == 0, res.err
    made = [p for p in runs.iterdir() if p.name.startswith("compare-")]
    assert len(made) == 1 and Path(res.out.strip()) == made[0] / "compare.en.md"
    assert all((made[0] / link).is_file() for link in _links(made[0] / "compare.en.md"))


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_compare_killed_while_it_writes_leaves_no_litter(tmp_path, sig):
    """K4: kill -9 (or SIGTERM) as soon as the comparison writes anything under --runs;
    what is left is a complete compare-* folder or, after the next `list`, nothing."""
    runs = _two_runs(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "reporter", "compare",
                             "cpu-transformer-bloat", "cpu-transformer-bloat-fixed", "--runs",
                             str(runs)], env=_child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and len(list(runs.iterdir())) < 3:
        time.sleep(0.005)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert cli("list", "--runs", runs).code == 0
    for folder in runs.iterdir():
        if folder.name.startswith("cpu-"):
            continue
        assert folder.name.startswith("compare-"), folder.name
        md = folder / "compare.en.md"
        assert md.is_file() and all((folder / link).is_file() for link in _links(md))


SWALLOWING_TARGET = """
import os, signal, time
# As torch's import does with numpy's (its C++ clears whatever numpy's import raised):
# the interrupt comes while code that loses the KeyboardInterrupt runs.
try:
    os.kill(os.getpid(), signal.{sig})
    time.sleep(1.0)
except BaseException:
    pass

def build():
    raise SystemExit("the target was built: the interrupt was lost")
"""


@pytest.mark.parametrize("sig,code,word", [("SIGINT", 130, "interrupted"),
                                           ("SIGTERM", 143, "terminated")])
def test_an_interrupt_that_an_import_would_lose_still_ends_the_run(tmp_path, sig, code, word):
    """S4: the interrupt comes while an import that swallows the KeyboardInterrupt runs
    (torch's of numpy, 5 of about 112 Ctrl-Cs in the review): nothing is written yet, so
    reporter ends at once, with one line and 130 (143)."""
    (tmp_path / "swallow.py").write_text(SWALLOWING_TARGET.format(sig=sig))
    res = subprocess.run([sys.executable, "-m", "reporter", "run", "--target",
                          "swallow.py:build", "--out", "runs", "--quiet"], cwd=tmp_path,
                         env=_child_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == code, res.stderr[-2000:]
    assert res.stderr.splitlines() == [f"reporter: {word}; nothing half-written was kept"]
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.2, 0.5, 0.8, 1.2])
def test_ctrl_c_while_torch_imports_is_130_and_one_line(tmp_path, delay):
    """S4: Ctrl-C 0.2-1.2 s after reporter's first module loaded (while torch imports:
    about 1.2 s here): exit 130, one line, no run folder. The delay counts from the
    import of reporter.errors (-X importtime), not from the start: in Python's own
    start-up the interpreter, not reporter, answers a Ctrl-C (README, "Interrupts")."""
    import threading

    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "reporter", "run",
                             "--target", "tensor-ops", "--device", "cpu", "--preset", "tiny",
                             "--out", "runs", "--quiet"], cwd=tmp_path, env=_child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    loaded = threading.Event()

    def read() -> None:  # all of it, so that the child never waits on a full pipe
        for line in proc.stderr:
            lines.append(line)
            if line.rstrip().endswith("| reporter.errors"):
                loaded.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert loaded.wait(30), "".join(lines)[-2000:]
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out = proc.stdout.read()
    proc.wait(timeout=60)
    reader.join(timeout=10)
    said = [x for x in "".join(lines).splitlines() if not x.startswith("import time:")]
    assert proc.returncode == 130, said[-20:]
    assert said == [INTERRUPTED] and out == ""
    runs = tmp_path / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []
