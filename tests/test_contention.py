"""A busy machine: the disturbance arithmetic, what a run does with disturbed windows,
the peaks' calibration, the report's statement, compare's verdict and the gate; and a
real run beside real CPU hogs."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, cli

from reporter.analyze.efficiency import BUSY, IMPLAUSIBLE, Efficiency, of_section
from reporter.analyze.peaks import MEASURED, Peaks, agreed
from reporter.collect import machine
from reporter.model import contention
from reporter.model.contention import DISTURBED, Counters, Disturbance, between
from reporter.model.run import Throughput
from reporter.store import load

BUSY_RUN = FIXTURES / "runs" / "cpu-transformer-busy"


def counters(wall: float, wait: float | None = 0.0, cpu: float = 0.0, children: float = 0.0,
             steal: float | None = 0.0, total: float | None = 0.0, busy: float | None = None,
             cpus: int | None = 2, nivcsw: int = 0) -> Counters:
    return Counters(wall_s=wall, cpu_s=cpu, wait_s=wait, children_s=children, nivcsw=nivcsw,
                    steal_s=steal, machine_s=total, busy_s=cpu if busy is None else busy,
                    cpus=cpus, pressure_s=None, load1=None)


def quiet(wall: float = 0.25) -> Disturbance:
    return between(counters(0), counters(wall, wait=0.002 * wall), 2)


def loaded(wall: float = 0.25) -> Disturbance:
    return between(counters(0), counters(wall, wait=wall), 2)  # half the thread time


# -- the arithmetic, on counters as /proc gave them ------------------------------------

def test_quiet_and_loaded_windows_recorded_on_the_development_machine():
    # A 25 ms window of 512x512 products, 2 threads, nothing beside it: 0.3 ms of run-queue
    # wait over both threads; and a 74 ms window beside one CPU hog: 44 ms of wait.
    q = between(counters(100.0, wait=1.0000, cpu=10.0, nivcsw=5),
                counters(100.0261, wait=1.0003, cpu=10.0537, nivcsw=8), 2)
    assert q.share == pytest.approx(0.0003 / 0.0522, rel=1e-3) and not q.disturbed
    assert q.cpu == pytest.approx(1.03, abs=0.01) and q.nivcsw == 3
    b = between(counters(100.0, wait=1.0), counters(100.0741, wait=1.0445), 2)
    assert b.share == pytest.approx(0.30, abs=0.01) and b.disturbed


def test_the_threshold_sits_between_quiet_and_loaded():
    assert quiet().share < DISTURBED < loaded().share


def test_children_running_excuse_the_wait_they_caused():
    """DataLoader workers compete with the process's own threads: the workload's wait."""
    own = between(counters(0, children=0.0), counters(1.0, wait=0.6, children=0.5), 2)
    assert own.wait == pytest.approx(0.05) and not own.disturbed
    other = between(counters(0), counters(1.0, wait=0.6), 2)
    assert other.wait == pytest.approx(0.3) and other.disturbed


def test_cpus_that_other_processes_keep_busy_count_without_run_queue_wait():
    """Two vCPUs: the process runs one thread on each with no wait, while another
    process keeps one of them half busy (it ran on a sibling, or between our slices)."""
    d = between(counters(0, busy=100.0), counters(1.0, cpu=1.5, busy=102.0), 2)
    # a tick (10 ms) a CPU is allowed for in /proc/stat's figures: (2 - 0.02 - 1.5) / 2
    assert d.wait == 0.0 and d.others == pytest.approx(0.24) and d.disturbed
    alone = between(counters(0, busy=100.0), counters(1.0, cpu=1.96, busy=101.99), 2)
    assert alone.others == pytest.approx(0.005) and not alone.disturbed
    many = between(counters(0, busy=0.0, cpus=64), counters(1.0, cpu=2.0, busy=40.0, cpus=64), 2)
    assert many.others == 0.0, "38 busy CPUs of 64 leave this process's 2 threads room"


def test_stolen_time_counts_as_disturbance():
    d = between(counters(0, steal=10.0, total=1000.0),
                counters(1.0, steal=10.4, total=1002.0), 2)
    assert d.steal == pytest.approx((0.4 - 0.02) / 2) and d.disturbed
    ticks = between(counters(0, steal=10.0, total=1000.0),
                    counters(0.25, steal=10.02, total=1000.5), 2)
    assert ticks.steal == 0.0, "two ticks of steal in a quarter second: /proc/stat's grain"


def test_a_kernel_without_schedstat_cannot_tell_and_flags_nothing():
    d = between(counters(0, wait=None, steal=None, total=None, busy=None, cpus=None),
                counters(1.0, wait=None, steal=None, total=None, busy=None, cpus=None), 2)
    assert d.share is None and not d.disturbed
    assert contention.disturbed_time([d]) is None


def test_a_thread_that_ended_cannot_make_the_wait_negative():
    d = between(counters(0, wait=5.0), counters(1.0, wait=1.0), 2)
    assert d.share == 0.0


def test_disturbed_time_is_weighted_by_the_windows_wall_time():
    items = [quiet(1.0), loaded(3.0)]
    assert contention.disturbed_time(items) == pytest.approx(0.75)
    assert contention.mean_share(items) == pytest.approx((0.002 + 3 * 0.5) / 4, rel=1e-3)


# -- a throughput with disturbed windows -----------------------------------------------

def test_disturbed_windows_are_kept_but_left_out_of_the_median():
    t = Throughput(windows=[100, 102, 98, 30, 101, 25], steps_per_window=3, profiled=90,
                   disturbance=[quiet(), quiet(), quiet(), loaded(), quiet(), loaded()])
    assert t.reliable and t.disturbed_windows == 2
    assert t.median == 100.5 and t.clean == [100, 102, 98, 101]
    assert t.interval is not None and t.interval.low >= 98
    assert t.spread == pytest.approx(4 / 100.5)


def test_too_few_quiet_windows_make_the_throughput_unreliable_without_an_interval():
    t = Throughput(windows=[1300, 1200, 1300, 6600, 7300], steps_per_window=3, profiled=0,
                   disturbance=[loaded(), loaded(), loaded(), quiet(), quiet()])
    assert not t.reliable and t.interval is None
    assert t.median == 1300  # of every window: a number, printed as unreliable


def test_a_run_stored_before_the_disturbance_reads_as_before():
    t = Throughput(windows=[10, 11, 12, 13, 14], steps_per_window=3, profiled=9)
    assert t.reliable and t.median == 12 and t.disturbed_time is None


# -- the peaks' calibration ------------------------------------------------------------

def peaks(fp32: float, bandwidth: float = 60e9) -> Peaks:
    return Peaks(source=MEASURED, device="cpu", flops={"fp32": fp32, "bf16": fp32 * 2},
                 bandwidth=bandwidth, seconds=0.5, threads=2)


def test_calibration_takes_two_quiet_measurements_that_agree():
    given = iter([(peaks(0.19e9), True), (peaks(200e9), False), (peaks(120e9), False),
                  (peaks(190e9), False)])
    got = agreed(lambda: next(given))
    assert not got.disturbed and got.flops["fp32"] == 200e9  # the first and the last
    assert got.seconds == pytest.approx(1.0)


def test_calibration_that_never_agrees_is_marked_disturbed():
    given = iter([(peaks(0.19e9), True), (peaks(200e9), False), (peaks(50e9), False),
                  (peaks(100e9), True)])
    got = agreed(lambda: next(given))
    assert got.disturbed and got.flops["fp32"] == 200e9
    assert Peaks.from_dict(got.to_dict()).disturbed


# -- the report, the efficiency and the analysis of a busy run ------------------------

def test_a_busy_run_has_no_efficiency_figures_and_unestablished_findings():
    from reporter.analyze.analyzer import analyze_run

    run = load(BUSY_RUN)
    assert all(s.busy for s in run.sections)
    for section, analysis in zip(run.sections, analyze_run(run)):
        assert analysis.efficiency == BUSY and not analysis.established
        t = section.throughput
        assert not t.reliable and t.interval is None and t.disturbed_time > 0.5


@pytest.mark.parametrize("lang, words", [
    ("en", ("The machine was busy", "unreliable, about", "Possible problems")),
    ("ru", ("Машина была занята", "оценка ненадёжна", "Возможные проблемы")),
    ("zh", ("机器繁忙", "结果不可靠", "可能的问题")),
])
def test_the_busy_statement_opens_the_summary_in_every_language(lang, words, stored):
    root, _ = stored("cpu-transformer-busy")
    result = cli("render", "latest", "--runs", root, "--lang", lang)
    assert result.code == 0, result.err
    report = next(root.glob(f"*/report.{lang}.md")).read_text(encoding="utf-8")
    for w in words:
        assert w in report
    assert report.index(words[0]) < report.index(words[1]), "the statement comes first"
    line = next(x for x in report.splitlines() if words[1] in x)
    assert "±" not in line, "no interval for a busy run"


def test_an_mfu_over_100_percent_is_never_printed():
    run = load(FIXTURES / "runs" / "cpu-transformer")
    section = run.sections[0]
    batch = run.target["batch_size"]
    assert isinstance(of_section(section, batch), Efficiency)
    tiny = dict(section.peaks, flops={k: v / 1e4 for k, v in section.peaks["flops"].items()})
    assert of_section(replace(section, peaks=tiny), batch) == IMPLAUSIBLE


# -- compare and the gate ---------------------------------------------------------------

def test_compare_with_a_busy_side_is_inconclusive_and_the_gate_says_so(tmp_path):
    quiet_run = FIXTURES / "runs" / "cpu-transformer"
    result = cli("compare", quiet_run, BUSY_RUN, "--out", tmp_path, "--fail-if-slower", "5")
    assert result.code == 4, result.err
    assert "could not measure" in result.err and result.err.count("\n") == 1
    report = (tmp_path / "compare.en.md").read_text(encoding="utf-8")
    assert "inconclusive: the machine was busy" in report
    data = json.loads(cli("compare", quiet_run, BUSY_RUN, "--json").out)
    assert all(m["busy"] for m in data["modes"])


def test_analyze_json_of_a_busy_run_says_which_figures_were_disturbed():
    data = json.loads(cli("analyze", BUSY_RUN, "--json").out)
    for p in data["profiles"]:
        assert p["disturbance"]["busy"] and not p["disturbance"]["throughput_reliable"]
        assert p["efficiency"]["note"] == "busy"
        assert all(f["established"] is False for f in p["findings"])


RATES = {"mfu", "hfu", "peak_flops", "step_us", "speed_of_light_us", "roofline_us", "peaks"}
OP_RATES = {"time_us", "achieved_flops", "achieved_bandwidth", "roofline_share", "bound",
            "roofline_us"}


def test_a_busy_run_still_states_its_flops_and_bytes_and_withholds_only_the_rates(stored):
    """FLOPs and bytes are counts from the recorded shapes, which other work on the machine
    does not change: a busy run prints them (report and --json); only what rests on a
    disturbed time or peak is withheld. Checked against the sum of the stored costs."""
    from reporter.render.view import Fmt

    run = load(BUSY_RUN)
    data = json.loads(cli("analyze", BUSY_RUN, "--json").out)
    expected = []
    for section, p in zip(run.sections, data["profiles"], strict=True):
        e = p["efficiency"]
        assert not RATES & set(e) and e["ops"]
        assert all(not OP_RATES & set(o) for o in e["ops"])
        costs = section.profile.costs
        steps = e["steps"]
        assert e["flops_per_step"] == pytest.approx(sum(c["flops"] for c in costs) / steps)
        forward = sum(c["flops"] for c in costs if c["phase"] == "forward")
        assert e["model_flops_per_step"] == pytest.approx((3 if e["training"] else 1)
                                                          * forward / steps)
        mm = sum(c["bytes"] for c in costs if c["name"] == e["ops"][0]["name"]) / steps
        assert e["ops"][0]["bytes"] == pytest.approx(mm)
        assert [o["flops"] for o in e["ops"]] == sorted((o["flops"] for o in e["ops"]),
                                                        reverse=True)
        expected.append(e)
    assert expected[0]["model_flops_per_step"] > 0
    root, _ = stored("cpu-transformer-busy")
    for lang in ("en", "ru", "zh"):
        assert cli("render", "latest", "--runs", root, "--lang", lang).code == 0
        report = next(root.glob(f"*/report.{lang}.md")).read_text(encoding="utf-8")
        fmt = Fmt(lang)
        for e in expected:
            top = e["ops"][0]
            assert fmt.si(e["model_flops_per_step"], "FLOP") in report
            assert f"| `{top['name']}` | fp32 | " in report
            assert fmt.si(top["flops"], "FLOP") in report


# -- a real run beside real CPU hogs ---------------------------------------------------

def _profile(name: str, tmp: Path):
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    spec, builder = resolve(name)
    opts = RunOptions(device="cpu", preset="tiny", windows=5, time_budget_s=1.0)
    return profile_target(spec, builder, opts, tmp)


@pytest.mark.serial
@pytest.mark.slow
def test_a_run_beside_cpu_hogs_is_flagged_and_prints_nothing_it_cannot_defend(tmp_path):
    from reporter.analyze.analyzer import analyze_run
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown

    (tmp_path / "q").mkdir()
    (tmp_path / "b").mkdir()
    calm = _profile("transformer-bloat", tmp_path / "q")
    with machine.cpu_hogs(os.cpu_count() or 2, seconds=120):
        busy = _profile("transformer-bloat", tmp_path / "b")
    for after, quiet_a, busy_a in zip(busy.sections, analyze_run(calm), analyze_run(busy)):
        t = after.throughput
        assert t.disturbed_windows > 0, "the hogs took the CPUs: windows are flagged"
        # No false precision: either no interval, or one built from quiet windows only.
        assert t.interval is None or t.disturbed_windows < len(t.windows)
        eff = busy_a.efficiency
        assert isinstance(eff, str) or (eff.mfu <= 1.0 and eff.hfu <= 1.0)
        same = ([f.rule for f, _ in quiet_a.main] == [f.rule for f, _ in busy_a.main])
        assert same or not busy_a.established, "the main problems flipped unannounced"
    assert all(s.busy for s in busy.sections), "hogs on every core for the whole run"
    assert "The machine was busy" in render_markdown(report_view(busy, "en"))


def test_list_marks_a_busy_run(stored):
    root, _ = stored("cpu-transformer-busy")
    result = cli("list", "--runs", root)
    assert result.code == 0 and "~34.5 (busy)" in result.out


def test_the_counts_hold_every_dtype_whether_this_machine_has_its_peak_or_not():
    """A float64 model's products have no peak on the CPU: the efficiency leaves them out,
    and the counts of a busy run left them out too (its table began at layer norm); the
    counts are the recorded shapes' alone."""
    from reporter.analyze.efficiency import count

    profile = load(BUSY_RUN).sections[0].profile
    costs = [dict(c, dtype="fp64") if c["name"] == "aten::mm" else c for c in profile.costs]
    c = count(replace(profile, costs=costs))
    mm = next(o for o in c.ops if o.name == "aten::mm")
    assert mm.dtypes == ["fp64"] and c.ops[0] is mm
    assert mm.flops == pytest.approx(sum(x["flops"] for x in costs
                                         if x["name"] == "aten::mm") / c.steps)
    assert c.flops_per_step == pytest.approx(sum(x["flops"] for x in costs) / c.steps)


# -- a busy machine costs little (issue #68 item 4) ------------------------------------

def _disturbance(share: float) -> "Disturbance":
    from reporter.model.contention import Disturbance

    return Disturbance(wall_s=1.0, threads=1, share=share, wait=share, steal=None,
                       pressure=None, cpu=1.0, nivcsw=0, load1=None)


def test_an_attempt_as_disturbed_as_the_one_before_says_the_machine_stays_busy():
    from reporter.model.contention import DISTURBED, stays_busy

    busy, busier, quieter, quiet = (_disturbance(0.40), _disturbance(0.45),
                                    _disturbance(0.20), _disturbance(DISTURBED / 2))
    assert stays_busy(busy, busier) and stays_busy(busy, _disturbance(0.31))
    assert not stays_busy(busy, quieter)  # quietening: another attempt may be quiet
    assert not stays_busy(busy, quiet) and not stays_busy(None, busy)
    assert not stays_busy(quiet, busy)  # the one before was quiet: not "stays"


def test_calibration_stops_after_two_disturbed_measurements_in_a_row():
    calls = []

    def measure():
        calls.append(1)
        return peaks(100e9 * len(calls)), True
    got = agreed(measure)
    assert len(calls) == 2 and got.disturbed  # not CALIBRATIONS (4) on a busy machine
    given = iter([(peaks(50e9), True), (peaks(200e9), False), (peaks(10e9), True),
                  (peaks(199e9), False)])
    got = agreed(lambda: next(given))  # disturbed, then quiet: it goes on, and agrees
    assert not got.disturbed and got.flops["fp32"] == 200e9
