"""Reliability set 4 (issue 70): the caches trust no entry they did not write themselves,
nothing in them hangs or fails a render, a stored run's fields are checked where a view
reads them, and what `list`, a report and a trace's table say is true."""

from __future__ import annotations

import json
import marshal
import os
import pickle
import shutil
import stat
import threading
from hashlib import sha1
from pathlib import Path

import pytest
from conftest import FIXTURES, cli

from reporter.pipeline import report_view
from reporter.render import report
from reporter.store import load

# ---- the template cache (K6, K7, K9) ------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache under a scratch XDG_CACHE_HOME; its templates folder."""
    base = tmp_path / "xdg"
    base.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    monkeypatch.delenv("REPORTER_CACHE", raising=False)
    report._environment.cache_clear()
    yield base / "reporter" / "templates"
    report._environment.cache_clear()


def _markdown(lang: str = "ru", fresh: bool = True) -> str:
    if fresh:
        report._environment.cache_clear()
    view = report_view(load(FIXTURES / "runs" / "cpu-tensor-ops"), lang)
    return report.render_markdown(view)


PLANTED = "PLANTED: code from the cache ran"


def _planted_entry(lang: str = "ru", name: str = "report.md.j2") -> tuple[str, bytes]:
    """The file name and bytes of a cache entry for ``lang``'s ``name`` that Jinja takes
    for that template compiled (the right key and checksum) but that prints PLANTED: what
    a user who could write the cache would put there."""
    import jinja2
    from jinja2.bccache import bc_magic

    env = report.environment(lang)
    source, filename, _ = env.loader.get_source(env, name)
    key = jinja2.BytecodeCache().get_cache_key(name, filename)
    code = env.compile(PLANTED + "\n", name, filename)
    checksum = sha1(source.encode("utf-8")).hexdigest()
    return f"__jinja2_{key}.cache", bc_magic + pickle.dumps(checksum, 2) + marshal.dumps(code)


def test_a_planted_entry_runs_only_through_the_cache_itself(cache):
    """The yardstick of the tests below: the entry they plant is one Jinja loads, when it
    is a plain file of the user's in the user's 0700 folder (K1: by design)."""
    real = _markdown()
    name, data = _planted_entry()
    (cache / name).write_bytes(data)
    assert _markdown().strip() == PLANTED
    (cache / name).unlink()
    assert _markdown() == real


def test_a_hard_linked_entry_is_refused(cache, tmp_path):
    """K7: an entry with a second link (another user kept one while the folder was open
    to them, and can still rewrite it) is not loaded: the template compiles afresh."""
    real = _markdown()
    name, data = _planted_entry()
    (cache / name).write_bytes(data)
    os.link(cache / name, tmp_path / "kept-by-another")
    assert os.stat(cache / name).st_nlink == 2
    assert _markdown() == real


def test_an_entry_others_could_write_is_refused(cache):
    """K7: an entry whose mode lets others write it (planted while the folder was 0777,
    an open descriptor kept) is not loaded."""
    real = _markdown()
    name, data = _planted_entry()
    (cache / name).write_bytes(data)
    os.chmod(cache / name, 0o666)
    assert _markdown() == real


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="making a file of another user needs root")
@pytest.mark.parametrize("owned", ["entry", "folder"])
def test_an_entry_or_folder_of_another_user_is_refused(cache, owned):
    """K7: an entry owned by another user, in the user's own 0700 folder, is not loaded;
    K6: nor is any entry of a reporter/ folder another user made (who can swap what is in
    it): the cache is off."""
    real = _markdown()
    name, data = _planted_entry()
    (cache / name).write_bytes(data)
    os.chown(cache / name if owned == "entry" else cache.parent, 12002, 12002)
    if owned == "folder":
        assert report.template_cache() is None
    assert _markdown() == real


def test_a_symlinked_entry_is_refused(cache, tmp_path):
    real = _markdown()
    name, data = _planted_entry()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / name).write_bytes(data)
    (cache / name).unlink(missing_ok=True)
    (cache / name).symlink_to(elsewhere / name)
    assert _markdown() == real


def test_the_folder_swapped_for_a_symlink_after_the_check_is_not_read(cache, tmp_path):
    """K6: the folder is checked at each entry's open, not once when the environment is
    made: swapped for a link to a folder of planted entries after that (another user who
    owns a parent can), the planted entries are not loaded."""
    real = _markdown()
    report._environment.cache_clear()
    report.environment("ru")  # a new environment, the folder checked: as a render starts
    name, data = _planted_entry()
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    for entry in cache.iterdir():  # every entry of the report's templates, planted
        shutil.copy(entry, planted / entry.name)
    (planted / name).write_bytes(data)
    cache.rename(cache.with_name("templates.real"))
    cache.symlink_to(planted)
    assert _markdown(fresh=False) == real


@pytest.mark.parametrize("parent", ["xdg", "reporter"])
def test_a_parent_folder_others_can_write_turns_the_cache_off(cache, parent):
    """K6: a folder above the cache that others can write (and is not sticky) lets them
    swap the cache folder: the cache is not used, and the render works."""
    real = _markdown()
    name, data = _planted_entry()
    (cache / name).write_bytes(data)
    folder = cache.parent.parent if parent == "xdg" else cache.parent
    os.chmod(folder, 0o777)
    try:
        assert report.template_cache() is None
        assert _markdown() == real
    finally:
        os.chmod(folder, 0o700)


def test_a_sticky_parent_like_tmp_is_fine(cache):
    """A world-writable parent with the sticky bit, as /tmp (others cannot rename what is
    not theirs), keeps the cache."""
    _markdown()
    base = cache.parent.parent
    os.chmod(base, 0o1777)
    try:
        if any(os.stat(p).st_uid not in (0, os.geteuid())
               for p in [base, *base.parents]):
            pytest.skip("a parent of the scratch folder belongs to another user")
        assert report.template_cache() is not None
    finally:
        os.chmod(base, 0o700)


def _finishes(work, fifos: list[Path], seconds: float = 30.0):
    """``work()``'s result, or a failure when it does not finish in ``seconds`` (then each
    FIFO is opened for writing, so that a reader stuck in its open returns)."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(10)
        pytest.fail(f"hung on a FIFO in the cache ({seconds:.0f} s)")
    assert result, "the render failed"
    return result[0]


def test_a_fifo_in_the_template_cache_does_not_hang_the_render(cache):
    """K9: every entry replaced by a FIFO: the render compiles afresh, at once."""
    real = _markdown()
    fifos = []
    for entry in cache.iterdir():
        entry.unlink()
        os.mkfifo(entry)
        fifos.append(entry)
    assert _finishes(_markdown, fifos) == real


# ---- the fonts' cache (K10, K11) ----------------------------------------------------------

TEXT = "aten::gelu_backward 650 мкс 每步时间"


def _widths(first: bool = False) -> list[float]:
    """The widths of TEXT in DejaVu Sans, its bold and DejaVu Sans Mono, measured afresh
    (``first``: skip the test where these fonts cannot be measured at all)."""
    from reporter.render import columns

    columns.fonts.cache_clear()
    measures = columns.fonts("DejaVu Sans", "DejaVu Sans Mono")
    if measures is None and first:
        pytest.skip("fontconfig or DejaVu fonts are not installed")
    assert measures is not None, "the fonts could not be measured"
    return [m(TEXT) for m in measures]


@pytest.fixture
def font_entries(cache):
    """The fonts' cache, filled by a first measurement: (its entries, the widths)."""
    from reporter.render import columns

    measured = _widths(first=True)
    entries = sorted((cache.parent / "fonts").iterdir())
    assert len(entries) == 3
    yield entries, measured
    columns.fonts.cache_clear()


@pytest.mark.parametrize("entry", [
    {"em": 2048, "codes": [97], "advances": [10**400]},
    {"em": 10**400, "codes": [97], "advances": [1000]},
    {"em": 1, "codes": [97], "advances": [-10**6]},
    {"em": 2048, "codes": [10**400], "advances": [1000]},
    {"em": 2048.0, "codes": [97], "advances": [1000]},
    ["em", 2048],
], ids=["advance-10e400", "em-10e400", "negative", "code-10e400", "float-em", "a-list"])
def test_a_malformed_font_entry_is_a_miss(font_entries, entry):
    """K10: an entry out of range (10**400 is valid JSON) is read from the font again, to
    the same widths: never an OverflowError."""
    entries, measured = font_entries
    for p in entries:
        p.write_text(json.dumps(entry))
    assert _widths() == measured


def test_a_fifo_in_the_font_cache_does_not_hang(font_entries):
    """K11: each entry a FIFO: the widths are read from the fonts, at once."""
    entries, measured = font_entries
    for p in entries:
        p.unlink()
        os.mkfifo(p)
    assert _finishes(_widths, entries) == measured
    assert all(stat.S_ISREG(os.stat(p).st_mode) for p in entries)  # written again


@pytest.mark.slow
def test_a_pdf_renders_with_font_entries_out_of_range(font_entries, stored):
    """K10 end to end: `render --format pdf` with every font entry 10**400."""
    entries, _ = font_entries
    for p in entries:
        p.write_text(json.dumps({"em": 2048, "codes": list(range(32, 127)),
                                 "advances": [10**400] * 95}))
    from reporter.render import columns

    columns.fonts.cache_clear()  # a fresh process: the widths from the cache
    root, folder = stored("cpu-tensor-ops")
    res = cli("render", folder, "--format", "pdf", "--lang", "en", "--runs", root)
    assert res.code == 0 and res.err == "", res.err
    assert (folder / "report.en.pdf").stat().st_size > 10_000


# ---- stored runs: every field a view reads is checked on load --------------------------

def _edit(folder: Path, change) -> None:
    path = folder / "run.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc["run"])
    path.write_text(json.dumps(doc), encoding="utf-8")


def _breakdown(run):
    return run["sections"][0]["profile"]["breakdown"]


def _set_critical_host(run):
    _breakdown(run)["critical"]["host_us"] = 3


def _set_critical_forward(run):
    _breakdown(run)["critical"]["host_us"]["forward"] = "x"


def _set_copy_peak(run):
    _breakdown(run)["copies"][0]["peak_gbps"] = "device"


def _set_copy_kind(run):
    _breakdown(run)["copies"][0]["kind"] = "DEVICE"


def _drop_copy_bytes(run):
    del _breakdown(run)["copies"][1]["bytes"]


def _set_launch(run):
    del _breakdown(run)["launch"]["kernels"]


def _huge_disturbance(run):
    run["sections"][0]["profile_disturbance"] = {"share": 10**400}


def _dict_for_list(run):
    _breakdown(run)["steps_us"][0] = {"x": 1}


def _odd_cost_basis(run):
    run["sections"][0]["profile"]["cost_basis"] = "graph_1_cpp_fused_add"


def _no_target_name(run):
    del run["target"]["name"]


def _no_preset(run):
    run["target"]["preset"] = None


def _empty_id(run):
    run["id"] = ""


def _straggler_cause(run):
    _breakdown(run)  # a run of one rank stores none: one made as a two-rank run's would be
    run["sections"][0]["profile"]["stragglers"] = {
        "ranks": [], "device": True, "slowest": "rank 1", "slowest_step_us": 2.0,
        "reference_step_us": 1.0, "extra_us": 1.0, "extra_share": 1.0,
        "extra_by_cause_us": {"compute": 1.0}, "cause": "DEVICE"}


@pytest.mark.parametrize("change,field", [
    (_set_critical_host, "breakdown.critical.host_us"),
    (_set_critical_forward, "breakdown.critical.host_us.forward"),
    (_set_copy_peak, "breakdown.copies[0].peak_gbps"),
    (_set_copy_kind, "breakdown.copies[0].kind"),
    (_drop_copy_bytes, "breakdown.copies[1]"),
    (_set_launch, "breakdown.launch"),
    (_huge_disturbance, "profile_disturbance.share"),
    (_dict_for_list, "breakdown.steps_us[0]"),
    (_odd_cost_basis, "profile.cost_basis"),
    (_no_target_name, "run.target"),
    (_straggler_cause, "profile.stragglers.cause"),
    (_empty_id, "run.id"),
    (_no_preset, "run.target.preset"),
], ids=["critical-host", "critical-str", "copy-gbps", "copy-kind", "copy-no-bytes",
        "launch-no-kernels", "huge-int", "dict-for-number", "cost-basis", "no-target-name",
        "straggler-cause", "empty-id", "no-preset"])
def test_a_bad_stored_field_is_one_line_that_names_it(stored, change, field):
    """The fuzzed run.json cases (render failed with an internal error or blamed the
    template; analyze --json and compare passed): every command refuses the run in one
    line, `[bad-run]`, naming the field."""
    root, folder = stored("cuda-h200-transformer")
    _edit(folder, change)
    for argv in (["render", folder, "--lang", "en"], ["analyze", folder, "--json"],
                 ["compare", folder, folder, "--json"]):
        res = cli(*argv, "--runs", root)
        lines = res.err.strip().splitlines()
        assert res.code == 2 and len(lines) == 1, (argv, res.err)
        assert "[bad-run]" in lines[0] and field in lines[0], (argv, lines[0])
    assert not list(folder.glob("report.*"))


# ---- a template's TypeError (L3b) -------------------------------------------------------

def test_a_template_type_error_is_a_template_error(tmp_path, monkeypatch, stored):
    """L3b: `{{ 1 + 'a' }}` in a language's report is `[template]`, not an internal error."""
    from reporter.render.languages import language

    folder = tmp_path / "langs" / "xx"
    shutil.copytree(language("en").folder, folder)
    monkeypatch.setenv("REPORTER_TEMPLATES", str(folder.parent))
    text = (folder / "report.md.j2").read_text(encoding="utf-8")
    block = "{% block summary_heading %}"
    (folder / "report.md.j2").write_text(text.replace(block, block + "{{ 1 + 'a' }}"),
                                         encoding="utf-8")
    root, run = stored("cpu-tensor-ops")
    res = cli("render", run, "--lang", "xx", "--runs", root)
    lines = res.err.strip().splitlines()
    assert res.code == 1 and len(lines) == 1, res.err
    assert "[template]" in lines[0] and "TypeError" in lines[0], lines[0]
    assert "internal error" not in lines[0]


# ---- `list` (T1) ------------------------------------------------------------------------

def test_list_escapes_control_characters_and_shows_the_folder_name(stored):
    """T1: a copied run whose id and target hold terminal escapes: `list` prints no control
    character, and names the run by its folder (the id inside could pose as another)."""
    root, folder = stored("cpu-tensor-ops")

    def hostile(run):
        run["id"] = "\x1b]0;pwned-title\x07\x1b[2J\x1b[1;1Hfake-run-id"
        run["target"]["name"] = "ok\r\x1b[31mRED"
        run["env"]["device_name"] = "\x9b31m"
    _edit(folder, hostile)
    res = cli("list", "--runs", root)
    assert res.code == 0, res.err
    printed = res.out + res.err
    assert not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in printed), \
        repr(printed)
    assert folder.name in res.out and "fake-run-id" not in res.out
    assert "RED" in res.out  # the target, its escapes made harmless


def test_list_a_run_without_a_target_name(stored):
    """A run.json whose target has no name: `list` printed None.__format__'s TypeError as
    an internal error; now its row says why the run is unreadable."""
    root, folder = stored("cpu-tensor-ops")
    _edit(folder, lambda run: run["target"].pop("name"))
    res = cli("list", "--runs", root)
    assert res.code == 0 and res.err == "", res.err
    assert folder.name in res.out and "run.target: no name" in res.out


def test_list_escapes_a_folder_name_and_an_error(stored):
    """An unreadable run in a folder whose name holds escapes: its row, escaped."""
    root, folder = stored("cpu-tensor-ops")
    odd = folder.rename(root / "run\x1b[2J")
    (odd / "run.json").write_text("{", encoding="utf-8")
    res = cli("list", "--runs", root)
    assert res.code == 0, res.err
    assert "\x1b" not in res.out and "unreadable" in res.out


# ---- a device event without a stream ("stream None") ----------------------------------

def _x(name, ts, dur, cat="cpu_op", tid=1, pid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def test_a_kernel_without_a_stream_is_no_stream_none(tmp_path):
    """A kernel whose tid is null (a fuzzed trace) is on no known stream: it counts in the
    device's time, but makes no "stream None" row in the per-stream or queue tables."""
    from reporter.ingest.traces import read_trace

    def launch(ts, corr):
        return _x("cudaLaunchKernel", ts, 1, cat="cuda_runtime", correlation=corr)

    def kernel(ts, dur, corr, tid=7):
        return _x(f"void k{corr}", ts, dur, cat="kernel", pid=0, tid=tid, correlation=corr)
    events = [_x("ProfilerStep#1", 0, 200, cat="user_annotation"),
              _x("forward", 0, 200, cat="user_annotation"),
              launch(0, 1), kernel(0, 50, 1), launch(1, 2), kernel(54, 40, 2),
              launch(2, 3), kernel(120, 30, 3, tid=None), launch(3, 4), kernel(160, 20, 4)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    b = read_trace(path).breakdown
    assert b.device_us["compute"][0] == 50 + 40 + 30 + 20
    assert not any("None" in k for k in [*b.stream_us, *b.queue]), (b.stream_us, b.queue)
    for lang in ("en", "ru", "zh"):
        res = cli("analyze", path, "--out", tmp_path / "out", "--lang", lang)
        assert res.code == 0, res.err
        text = (tmp_path / "out" / f"t.json.report.{lang}.md").read_text(encoding="utf-8")
        assert "None" not in text


# ---- the trace a live run's report names ------------------------------------------------

TINY_TARGET = """\
import torch
from reporter import Target


def build(device="cpu", preset="default"):
    model = torch.nn.Linear(8, 2).to(device)
    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,)))]
    return Target(model=model, batches=data, batch_size=4,
                  loss=lambda out, b: torch.nn.functional.cross_entropy(out, b[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
"""


@pytest.mark.slow
def test_a_live_runs_report_names_the_trace_file_that_is_there(tmp_path, runs):
    """TN: the report `run` writes names the trace as stored (gzipped), as a later
    `render` of the same run does."""
    import re

    script = tmp_path / "tiny.py"
    script.write_text(TINY_TARGET)
    res = cli("run", "--target", f"{script}:build", "--device", "cpu", "--lang", "en",
              "--out", runs, "--quiet", "--time-budget", "0.2")
    assert res.code == 0, res.err
    md = Path(next(line for line in res.out.splitlines() if line.endswith(".md")))
    def named_in(text: str) -> list[str]:  # "Chrome trace: `a`", "Chrome traces: `a`, `b`"
        said = re.search(r"Chrome traces?: ((?:`[^`]+`(?:, )?)+)", text)
        return re.findall(r"`([^`]+)`", said.group(1)) if said else []

    named = named_in(md.read_text(encoding="utf-8"))
    assert named and all((md.parent / name).is_file() for name in named), named
    assert cli("render", md.parent, "--lang", "en", "--runs", runs).code == 0
    assert named_in(md.read_text(encoding="utf-8")) == named


def test_a_device_id_of_10_to_the_400_is_named_not_an_overflow(tmp_path):
    """Found by tests/test_fuzz_runs.py: a kernel whose pid is 10**400 (valid JSON), beside
    kernels of another device: its streams sort by name, not by a float of it."""
    events = [_x("ProfilerStep#1", 0, 200, cat="user_annotation"),
              _x("void a", 0, 50, cat="kernel", pid=0, tid=7),
              _x("void b", 60, 50, cat="kernel", pid=0, tid=9)]
    text = json.dumps({"traceEvents": events}).replace('"pid": 0, "tid": 9', '"pid": '
                                                       + "1" + "0" * 400 + ', "tid": 9')
    (tmp_path / "t.json").write_text(text)
    res = cli("analyze", tmp_path / "t.json", "--json")
    assert res.code == 0 and res.err == "", res.err


def test_a_duration_of_10_to_the_400_leaves_its_event_out(tmp_path):
    """Found by bench/fuzz.py: an event whose dur is 10**400 (an integer no float holds)
    among others on its thread: left out, the rest analyzed, in every language. The trace
    is long enough (300 kB) to be read in chunks, as a real one is."""
    events = [_x("ProfilerStep#1", 0, 200, cat="user_annotation"),
              _x("aten::mm", 10, 50), _x("cudaLaunchKernel", 70, 7, cat="cuda_runtime"),
              _x("aten::add", 100, 20)]
    events += [_x("aten::add", 300 + 10 * i, 5) for i in range(3000)]
    text = json.dumps({"traceEvents": events}).replace('"dur": 7', '"dur": 1' + "0" * 400)
    (tmp_path / "t.json").write_text(text)
    res = cli("analyze", tmp_path / "t.json", "--json")
    assert res.code == 0 and res.err == "", res.err
    names = {op["name"] for op in json.loads(res.out)["profiles"][0]["ops"]}
    assert {"aten::mm", "aten::add"} <= names and "cudaLaunchKernel" not in names
    for lang in ("en", "ru", "zh"):
        res = cli("analyze", tmp_path / "t.json", "--out", tmp_path, "--lang", lang)
        assert res.code == 0 and res.err == "", res.err


@pytest.mark.parametrize("doc", [{"meta": {"format": 2}}, {"meta": {"format": 2}, "run": 5},
                                 {"meta": {"format": 2}, "run": None}],
                         ids=["no-run", "a-number", "null"])
def test_a_run_json_without_a_run_object_is_one_line(stored, doc):
    """Found by bench/fuzz.py: run.json's "run" missing or not an object was an internal
    error (TypeError: object of type 'NoneType' has no len())."""
    root, folder = stored("cpu-tensor-ops")
    (folder / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    res = cli("render", folder, "--runs", root)
    lines = res.err.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and "[bad-run]" in lines[0], res.err
    assert "run: expected an object" in lines[0]
