"""reporter.analyze.savings: what each finding is worth, and the order of the main problems."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from reporter.analyze.savings import estimate, profiler_call_us, ranked, unprofiled_factor
from reporter.model.finding import IN_OTHERS, MINOR_SHARE, NOT_QUANTIFIABLE, Finding
from reporter.model.profile import Breakdown, Op, Profile


def _profile(**host) -> Profile:
    steps = [10_000.0, 10_000.0]
    return Profile(device_type="cuda", self_cpu_us=20_000, self_device_us=16_000, steps=2,
                   ops=[Op("aten::repeat", calls=2, cpu_total_us=4000, device_total_us=3000)],
                   breakdown=Breakdown(
                       steps_us=steps, host_us={"data": [1000.0, 3000.0]},
                       device_us={"idle_data": [1000.0, 3000.0], "idle_sync": [50.0, 50.0],
                                  "compute": [8950.0, 6950.0]}))


# A blow-up's evidence whole (rules.operators.ElementwiseBlowup), for what the savings
# read of it (its copies: materialisers, materialised_share); the rest is its rule's.
_BLOWUP = {"op": "aten::mul", "op_share": 0.0, "op_time_us": 0.0, "calls": 1,
           "mem_per_call_b": 0, "materialisers": [], "materialised_share": 0.0, "others": []}


def _f(rule, share, basis="device", **evidence):
    ops = evidence.pop("ops", [])
    whole = _BLOWUP if rule == "elementwise-blowup" else {}
    return Finding(rule, "medium", {"basis": basis, "share": share, "threshold": 0.1,
                                    **whole, **evidence}, ops=ops)


def test_waits_come_from_the_breakdown():
    p = _profile()
    s = estimate(_f("dataloader-bound", 0.2, basis="step"), p)
    assert (s.saving_us, s.low_us, s.high_us) == (2000, 1000, 3000)  # device idle for data
    assert s.share(s.saving_us) == pytest.approx(0.2)
    sync = estimate(_f("sync-stall", 0.9, basis="cpu"), p)
    assert sync.saving_us == 50 and sync.minor  # the GPU did not idle: a symptom


def test_a_blow_up_owns_its_copies_and_the_ranking_follows_savings():
    p = _profile()
    blowup = _f("elementwise-blowup", 0.5, materialisers=["aten::repeat"],
                materialised_share=3000 / 16_000)  # repeat's device time
    copies = _f("copy-heavy", 0.25)
    sync = _f("sync-stall", 0.9, basis="cpu")
    memory = Finding("memory-pressure", "high", {"basis": "memory", "share": 0.95})
    main, minor = ranked([copies, sync, memory, blowup], p)
    assert [f.rule for f, _ in main] == ["elementwise-blowup", "copy-heavy", "memory-pressure"]
    (_, b), (_, c), (_, m) = main
    # 50% of 16 ms of device time over 2 steps (the rule's share holds repeat's time).
    assert b.saving_us == pytest.approx(4000)
    assert c.saving_us == pytest.approx(2000 - 1500)  # its copies inside repeat are the blow-up's
    assert m.note == NOT_QUANTIFIABLE and m.saving_us is None
    assert minor == []  # the sync stall is left out, not minor: it would save nothing
    json = b.to_json()
    assert json["saving_ms"] == pytest.approx(4) and json["saving_share"] == pytest.approx(0.4)
    assert {"saving_low", "saving_high", "measured"} <= set(json)
    assert c.note is None
    # Copies that are all the blow-up's save nothing of their own, and say why instead of
    # "(0, 0.0%)" (transformer-bloat, 2026-11-29)
    whole = _f("elementwise-blowup", 0.5, materialisers=["aten::repeat"],
               materialised_share=4000 / 16_000)
    _, minor = ranked([copies, whole], p)
    ((f, s),) = minor
    assert f.rule == "copy-heavy" and s.saving_us == 0 and s.note == IN_OTHERS


def test_no_finding_accounts_for_or_saves_more_than_the_step():
    """A recording whose kernels run past its steps (queued before it began, as a GPU run
    once recorded) has more device time than step time: the figures stop at the step."""
    p = _profile()
    p.self_device_us = 30_000  # 15 ms of kernels per 10 ms step
    s = estimate(_f("copy-heavy", 0.9), p)
    assert s.accounts_us == s.saving_us == s.high_us == 10_000
    assert s.share(s.saving_us) == 1.0


def test_a_timed_replacement_keeps_its_own_time_in_the_step():
    """A chain recorded with the profiler's page faults can read more than the step
    (transformer-bloat: 14.0 ms of a 13.4 ms step); its replacement, timed at 1 ms, still
    runs in the fixed step, so the saving stops 1 ms short of the step, not at it."""
    p = Profile(self_cpu_us=20_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=20_000,
           kind="annotation")])
    timed = {"before_ms": 12.0, "after_ms": 1.0}  # outright, unprofiled: 11 ms of a 10 ms step
    s = estimate(_f("unfused-attention", 0.9, basis="cpu"), p, measured=timed)
    assert s.step_us == 10_000 and s.saving_us == s.high_us == pytest.approx(9000)
    assert s.share(s.saving_us) == pytest.approx(0.9)
    # a replacement that fits keeps its measured saving
    fits = estimate(_f("unfused-attention", 0.5, basis="cpu"), p,
                    measured={"before_ms": 6.0, "after_ms": 1.0})
    assert fits.saving_us == pytest.approx(5000)


def test_the_step_without_the_profiler_bounds_what_idle_time_saves():
    """The profiler slows the host, not the device: a step it lengthens from 9 to 10 ms
    shows 2.05 ms of idle device time per step, of which at most 9 - 7.95 ms remain."""
    p = _profile()
    s = estimate(_f("dataloader-bound", 0.2, basis="step"), p, real_step_us=9000)
    assert s.saving_us == pytest.approx(1050) and s.high_us == pytest.approx(1050)
    assert s.low_us == 1000 and s.unprofiled_step_us == 9000
    assert s.to_json()["bounded_by_unprofiled_step_ms"] == 9
    free = estimate(_f("dataloader-bound", 0.2, basis="step"), p, real_step_us=11_000)
    assert free.saving_us == 2000 and free.unprofiled_step_us is None  # not bounded


def test_on_a_gpu_shares_are_of_the_step_timed_without_the_profiler():
    """Kernel times are what they are without the profiler; host times are scaled from
    the profiled step (10 ms here) to the one timed without it (5 ms)."""
    p = _profile()
    device = estimate(_f("copy-heavy", 0.25), p, real_step_us=5000)
    assert device.saving_us == pytest.approx(2000) and device.step_us == 5000
    assert device.share(device.saving_us) == pytest.approx(0.4)
    host = estimate(_f("copy-heavy", 0.25, basis="cpu"), p, real_step_us=5000)
    assert host.saving_us == pytest.approx(0.25 * 20_000 / 2 / 2)  # 2.5 ms of CPU, halved
    assert host.share(host.saving_us) == pytest.approx(0.25)


def test_an_estimate_and_a_measured_saving_are_of_the_same_step():
    """On the CPU every profiled time is stretched by the profiler (here the profiled step
    is 10 ms and the step timed without it 4 ms): an estimate is scaled to the unprofiled
    step, its share unchanged; a replacement timed outright without the profiler keeps
    its milliseconds and is a share of that same step, not of the stretched one."""
    p = Profile(self_cpu_us=20_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=20_000,
           kind="annotation")])
    copies = estimate(_f("copy-heavy", 0.25, basis="cpu"), p, real_step_us=4000)
    assert copies.step_us == 4000 and copies.saving_us == pytest.approx(0.25 * 4000)
    assert copies.share(copies.saving_us) == pytest.approx(0.25)
    timed = {"before_ms": 2.0, "after_ms": 0.6}  # as the what-if measured, unprofiled
    attention = estimate(_f("unfused-attention", 0.3, basis="cpu"), p, measured=timed,
                         real_step_us=4000)
    assert attention.step_us == 4000 and attention.saving_us == pytest.approx(1400)
    assert attention.share(attention.saving_us) == pytest.approx(0.35)  # not 1.4 / 10 ms
    assert attention.accounts_us == pytest.approx(0.3 * 4000)
    # The blow-up's recipe applies its timed speed-up to the recorded (profiled) times:
    # its milliseconds are scaled with the estimates, and its fix removes all the blow-up
    # accounts for (50% of the step, at least the 1 ms of the operators it timed)
    blowup = estimate(_f("elementwise-blowup", 0.5, basis="cpu"), p,
                      measured={"before_ms": 1.0, "after_ms": 0.2}, real_step_us=4000)
    assert blowup.measured == pytest.approx({"before_ms": 2.0, "after_ms": 0.08})
    assert blowup.saving_us == pytest.approx(1920) and blowup.step_us == 4000
    # Without a quiet timed step, the profiled one stands in
    assert estimate(_f("copy-heavy", 0.25, basis="cpu"), p).step_us == 10_000


def test_a_recorded_chain_longer_than_the_step_keeps_its_timed_ratio():
    """The blow-up's recorded chain, stretched by the profiler past the step timed without
    it (transformer-bloat, 2026-11-28: 14.0 ms against 13.4 ms), is brought down to the
    step with its fixed side, both in proportion: the saving is the timed speed-up's share
    of the step. Taken as it was, a replacement timed at 0.7 of the chain (the machine
    slowed it) left the finding far less than its share, or nothing (NO_ROOM) where
    the chain was stretched further: most likely what failed the CI at 73f6ebb once. The
    worth line then says so, not "measured here" of the step's own length."""
    from reporter.render.sentences import REPORT

    from test_sentences import about, blank

    from reporter.render.choices import FindingChoices, WorthChoices

    pick = REPORT["measured"].pick
    p = _profile()  # 10 ms profiled step
    f = _f("elementwise-blowup", 0.9, basis="cpu", ops=["aten::mul"])
    for ratio in (0.2, 0.7):
        s = estimate(f, p, measured={"before_ms": 12.0, "after_ms": 12.0 * ratio},
                     real_step_us=10_000)
        assert s.step_us == 10_000 and s.note is None
        assert s.measured["before_ms"] <= 10.0 + 1e-9
        assert s.measured["after_ms"] == pytest.approx(s.measured["before_ms"] * ratio)
        assert s.saving_us == pytest.approx(s.measured["before_ms"] * 1e3 * (1 - ratio))
        assert s.share(s.saving_us) > 0.25
        # the report says the chain was recorded longer than the step, and brought down
        assert s.measured["recorded_ms"] > 10.0
        assert pick(about(FindingChoices, worth=blank(
            WorthChoices, recorded=bool(s.measured["recorded_ms"]), before=True))
        ) == "measured_past_the_step"
    # A chain inside the step is left as it was timed
    inside = estimate(_f("elementwise-blowup", 0.3, basis="cpu", ops=["aten::mul"]), p,
                      measured={"before_ms": 5.0, "after_ms": 1.0}, real_step_us=10_000)
    assert inside.measured == pytest.approx({"before_ms": 5.0, "after_ms": 1.0})
    assert inside.saving_us == pytest.approx(4000)
    assert pick(about(FindingChoices, worth=blank(WorthChoices, before=True))
                ) == "measured_before_after"


def test_on_the_cpu_the_profilers_cost_is_taken_per_call():
    """The profiler costs about the same per recorded call, however long the call: a
    profiled step of 10 ms over 1,002 calls that takes 6 ms without it cost 4 us a call.
    Two long multiplies a step keep nearly all their time; a thousand short adds lose
    theirs, down to the step's own ratio (0.6) at most; both are shares of the 6 ms."""
    p = Profile(self_cpu_us=20_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=20_000, kind="annotation"),
        Op("aten::mul", calls=4, self_cpu_us=8000, cpu_total_us=8000),
        Op("aten::add", calls=2000, self_cpu_us=6000, cpu_total_us=6000)])
    per_call = (10_000 - 6000) / 1002
    assert profiler_call_us(p, 10_000, 6000) == pytest.approx(per_call)
    long = estimate(_f("elementwise-blowup", 0.4, basis="cpu", ops=["aten::mul"]), p,
                    real_step_us=6000)
    kept = (8000 - 4 * per_call) / 8000
    assert long.step_us == 6000 and long.saving_us == pytest.approx(4000 * kept)
    assert long.share(long.saving_us) == pytest.approx(4000 * kept / 6000)  # not 40%
    short = estimate(_f("copy-heavy", 0.3, basis="cpu", ops=["aten::add"]), p,
                     real_step_us=6000)
    assert short.saving_us == pytest.approx(3000 * 0.6)  # the floor: the step's ratio
    assert unprofiled_factor(_f("copy-heavy", 0.3, basis="cpu", ops=["aten::add"]), p,
                             10_000, 6000) == pytest.approx(0.6)
    # No per-call cost to take when the profiled step is not the longer
    assert profiler_call_us(p, 10_000, 11_000) == 0.0


def test_the_first_touch_the_profiler_adds_is_taken_off_the_writers():
    """A profile that the profiler's own growth filled with page faults (issue #27: seq2seq's
    copies read 1.03 s of a 1.16 s profiled step whose steps take 0.12 s without it): a
    profiled step of 100 ms over 999 records, 50 ms without the profiler, its measured
    cost 2 us a record. 2 ms of the 50 ms excess is the records'; the other 48 ms is the
    first touch, and lands in the operators that write memory: the copies (60 ms of the
    writers' 65 ms) and a fill. The copy finding keeps its time less its calls' cost and
    its part of the 48 ms, with no floor; a finding of a matrix product keeps the
    per-call model; without the measured cost, the copies keep that model too."""
    from reporter.analyze.savings import WRITERS

    p = Profile(self_cpu_us=100_000, steps=1, ops=[
        Op("ProfilerStep*", calls=1, self_cpu_us=0, cpu_total_us=100_000, kind="annotation"),
        Op("aten::copy_", calls=100, self_cpu_us=60_200, cpu_total_us=60_200),
        Op("aten::fill_", calls=99, self_cpu_us=5198, cpu_total_us=5198),
        Op("aten::mm", calls=800, self_cpu_us=34_602, cpu_total_us=34_602)])
    assert {"aten::copy_", "aten::fill_"} <= WRITERS and "aten::mm" not in WRITERS
    faulted = {"profiled_faults": 100_000, "first_touch": True, "profiler_call_us": 2.0}
    copies = _f("copy-heavy", 0.602, basis="cpu", ops=["aten::copy_"], **faulted)
    kept = (60_000 - 48_002 * 60_000 / 65_000) / 60_200  # 999 records: the mark is none
    assert kept < 0.5  # below the step's own ratio: no floor
    assert unprofiled_factor(copies, p, 100_000, 50_000) == pytest.approx(kept)
    s = estimate(copies, p, real_step_us=50_000)
    assert s.step_us == 50_000 and s.saving_us == pytest.approx(60_200 * kept)
    # Not a writer (profiler_distortion marks it so): the per-call model, as before, where
    # the whole excess counts as the records' (50 us each), down to the step's ratio
    mm = _f("dominant-operator", 0.346, basis="cpu", ops=["aten::mm"],
            **{**faulted, "first_touch": False})
    assert unprofiled_factor(mm, p, 100_000, 50_000) == pytest.approx(0.5)
    # Without the runner's measured cost per call: the per-call model for the copies too
    unmeasured = _f("copy-heavy", 0.602, basis="cpu", ops=["aten::copy_"],
                    profiled_faults=100_000, first_touch=True)
    assert unprofiled_factor(unmeasured, p, 100_000, 50_000) == pytest.approx(
        (60_200 - 100 * 50_000 / 999) / 60_200)


def test_the_writers_keep_at_least_their_roofline_and_their_unprofiled_faults():
    """Where the profiler slows the other operators more than its measured cost per call
    (seq2seq, 2026-11-27: 3-8 us a call against 0.8 us measured), the excess left for the
    writers is too large, and taking it off them left seq2seq's copies 17 ms of an 80 ms
    step whose page faults without the profiler alone took 28 ms (removing the copies
    saved 32 ms). The copies keep at least their roofline time and their part, by time
    among the writers, of the faults measured without the profiler."""
    from reporter.analyze.efficiency import Efficiency, OpEfficiency
    from reporter.analyze.peaks import Peaks
    from reporter.analyze.savings import fault_share, unprofiled_floor

    p = Profile(self_cpu_us=100_000, steps=1, ops=[
        Op("ProfilerStep*", calls=1, self_cpu_us=0, cpu_total_us=100_000, kind="annotation"),
        Op("aten::copy_", calls=100, self_cpu_us=60_200, cpu_total_us=60_200),
        Op("aten::fill_", calls=99, self_cpu_us=5198, cpu_total_us=5198),
        Op("aten::mm", calls=800, self_cpu_us=34_602, cpu_total_us=34_602)])
    copies = _f("copy-heavy", 0.602, basis="cpu", ops=["aten::copy_"], profiled_faults=100_000,
                first_touch=True, profiler_call_us=2.0)
    excess_only = unprofiled_factor(copies, p, 100_000, 50_000)
    faulted = replace(p, host_faults={"faults": 20_000.0, "fault_us": 1.0,
                                      "fault_low_us": 0.6, "step_us": 50_000.0})
    share = 60_200 / (60_200 + 5198)
    assert fault_share(faulted, {"aten::copy_"}) == pytest.approx(share)
    assert unprofiled_floor({"aten::copy_"}, faulted, None) == pytest.approx(20_000 * share)
    floor = 20_000 * share / 60_200
    assert floor > excess_only  # the excess alone left the copies less than their faults
    assert unprofiled_factor(copies, faulted, 100_000, 50_000) == pytest.approx(floor)
    # with the efficiency, their roofline time too (bytes at the measured bandwidth)
    eff = Efficiency(
        peaks=Peaks("measured", "cpu", {"fp32": 1e11}, 1e10), basis="cpu",
        ops=[OpEfficiency("aten::copy_", ["fp32"], 100, 0.0, 4e7, 60_200, 4000, "memory",
                          False)],
        steps=1, training=True, flops_per_step=0, model_flops_per_step=0, peak_dtype="fp32",
        peak_flops=1e11, step_us=50_000, step_timed=True, profiled_step_us=100_000,
        modelled_us=60_200, roof_us=4000, total_us=100_000)
    with_roof = (20_000 * share + 4000) / 60_200
    assert unprofiled_factor(copies, faulted, 100_000, 50_000, eff) == pytest.approx(with_roof)
    s = estimate(copies, faulted, eff, real_step_us=50_000)
    assert s.saving_us == pytest.approx(60_200 * with_roof)
    # never above the profiled time: a floor larger than it leaves the time as profiled
    many = replace(p, host_faults={**faulted.host_faults, "faults": 1e6})
    assert unprofiled_factor(copies, many, 100_000, 50_000) == 1.0
    # a finding of no writer keeps the per-call model: the faults are not its
    mm = _f("dominant-operator", 0.346, basis="cpu", ops=["aten::mm"], profiled_faults=100_000,
            first_touch=False, profiler_call_us=2.0)
    assert unprofiled_factor(mm, faulted, 100_000, 50_000) == unprofiled_factor(
        mm, p, 100_000, 50_000)


def test_page_faults_are_shared_by_the_bytes_each_operator_allocates():
    """A fault lands in the operator that first writes a fresh page: a product or a
    softmax allocates its own output and writes it; what the allocation operators hand out
    (empty, zeros) the writers (copies, fills) write, shared by their time. Without
    recorded memory, the writers' time alone."""
    from reporter.analyze.savings import fault_share

    def o(name, us, mem):
        return Op(name, calls=1, self_cpu_us=us, cpu_total_us=us, self_cpu_mem_b=mem)

    p = Profile(self_cpu_us=10_000, steps=1, ops=[
        o("aten::bmm", 4000, 30 << 20), o("aten::empty", 0, 60 << 20),
        o("aten::mm", 3000, 10 << 20), o("aten::copy_", 1500, 0), o("aten::fill_", 500, 0),
        o("aten::add_", 990, -(5 << 20))])  # a release is no allocation
    assert fault_share(p, {"aten::bmm"}) == pytest.approx(0.3)
    assert fault_share(p, {"aten::copy_"}) == pytest.approx(0.6 * 0.75)
    assert fault_share(p, {"aten::copy_", "aten::fill_", "aten::empty"}) == pytest.approx(0.6)
    assert fault_share(p, {"aten::bmm"}, extra_b=5 << 20) == pytest.approx(0.35)
    assert fault_share(p, {"aten::add_"}) == 0.0
    everything = {"aten::bmm", "aten::mm", "aten::copy_", "aten::fill_"}
    assert fault_share(p, everything) == pytest.approx(1.0)
    bare = Profile(self_cpu_us=10_000, steps=1,
                   ops=[replace(op, self_cpu_mem_b=0) for op in p.ops])
    assert fault_share(bare, {"aten::bmm"}) == 0.0  # no memory: the writers' time
    assert fault_share(bare, {"aten::copy_"}) == pytest.approx(0.75)


def test_a_fix_that_frees_its_tensors_takes_their_pages_at_the_peak_off_the_faults():
    """The faults are the step mapping again the memory its allocator gave back: a fix
    that no longer makes a finding's tensors (Rule.frees) takes their bytes at the peak
    off it, and at least those pages of the faults; a fix that keeps them (the optimizer's
    foreach kernels) only the faults in what its operators allocate."""
    from reporter.analyze.rules.memory import page_faults
    from reporter.analyze.savings import fault_share, faults_us, freed_ops, owned_fault_share

    def o(name, us, mem):
        return Op(name, calls=1, self_cpu_us=us, cpu_total_us=us, self_cpu_mem_b=mem)

    p = Profile(self_cpu_us=20_000, steps=1, ops=[
        o("aten::_softmax", 2000, 10 << 20), o("aten::addmm", 6000, 30 << 20),
        o("aten::copy_", 2000, 0), o("aten::empty", 0, 0)],
        peak_live_b={"aten::_softmax": 2000 * 4096, "aten::addmm": 500 * 4096},
        host_faults={"faults": 4000.0, "fault_us": 1.0, "fault_low_us": 0.5,
                     "step_us": 20_000.0, "page_b": 4096.0})
    assert fault_share(p, {"aten::_softmax"}) == pytest.approx(0.25)  # by bytes allocated
    assert fault_share(p, {"aten::_softmax"}, freed={"aten::_softmax"}) == pytest.approx(0.5)
    # at most every fault; a page size that the run measured
    assert fault_share(replace(p, host_faults={**p.host_faults, "faults": 1000.0}),
                       {"aten::_softmax"}, freed={"aten::_softmax"}) == 1.0
    assert fault_share(replace(p, host_faults={**p.host_faults, "faults": 1000.0,
                                               "page_b": 16384.0}),
                       {"aten::_softmax"}, freed={"aten::_softmax"}) == pytest.approx(0.5)
    # runs stored before the peak was read, or without the runner's count: as before
    assert fault_share(replace(p, peak_live_b={}), {"aten::_softmax"},
                       freed={"aten::_softmax"}) == pytest.approx(0.25)
    assert fault_share(replace(p, host_faults={}), {"aten::_softmax"},
                       freed={"aten::_softmax"}) == pytest.approx(0.25)

    attention = _f("unfused-attention", 0.1, basis="cpu", ops=["aten::_softmax"])
    optimizer = _f("single-tensor-optimizer", 0.1, basis="cpu", ops=["aten::_softmax"])
    assert freed_ops(attention) == {"aten::_softmax"} and freed_ops(optimizer) == set()
    assert faults_us(p, owned_fault_share(p, [attention])) == pytest.approx(2000.0)
    assert faults_us(p, owned_fault_share(p, [optimizer])) == pytest.approx(1000.0)

    # page faults leave the freed pages to the finding whose fix frees them
    f = page_faults(p, {"share": 0.05, "high": 0.25})
    assert f is not None
    alone = estimate(f, p, real_step_us=20_000)
    shared = estimate(f, p, others=[f, attention], real_step_us=20_000)
    assert shared.saving_us == pytest.approx(alone.saving_us / 2)


def test_small_savings_are_minor():
    p = _profile()
    tiny = _f("copy-heavy", MINOR_SHARE / 2 * 20_000 / 16_000)
    main, minor = ranked([tiny], p)
    assert not main and [f.rule for f, _ in minor] == ["copy-heavy"]


def test_golden_reports_show_the_worth():
    gold = Path(__file__).parent / "gold"
    for lang, word in (("en", "**Worth:**"), ("ru", "**Выигрыш:**"), ("zh", "**收益：**")):
        assert word in (gold / f"cpu-transformer-bloat.{lang}.md").read_text(encoding="utf-8")




def test_page_faults_leave_the_faults_in_another_findings_writers_to_it():
    """The faults' time is shared among the operators that write fresh memory by their
    time; a copy finding's copies take theirs with its fix, a dominant operator (work
    that stays) does not; the faults' share is of the step timed without the profiler."""
    from reporter.analyze.rules.memory import page_faults

    p = Profile(label="cpu", self_cpu_us=40_000, steps=1, ops=[
        Op("aten::copy_", calls=100, self_cpu_us=9_000, cpu_total_us=9_000),
        Op("aten::fill_", calls=10, self_cpu_us=3_000, cpu_total_us=3_000),
        Op("aten::mm", calls=10, self_cpu_us=28_000, cpu_total_us=28_000)],
        host_faults={"faults": 5_000.0, "fault_us": 1.0, "fault_low_us": 0.5,
                     "step_us": 20_000.0})
    f = page_faults(p, {"share": 0.05, "high": 0.25})
    assert f is not None and f.evidence.share == pytest.approx(0.25)
    alone = estimate(f, p, real_step_us=20_000)
    assert alone.share(alone.saving_us) == pytest.approx(0.25)
    assert alone.low_us == pytest.approx(alone.saving_us / 2)
    copies = _f("copy-heavy", 0.225, basis="cpu", ops=["aten::copy_"])
    shared = estimate(f, p, others=[f, copies], real_step_us=20_000)
    # copies: 9 of the 12 ms of writers, so 3/4 of the faults go with the copy fix
    assert shared.share(shared.saving_us) == pytest.approx(0.25 / 4)
    assert shared.share(shared.accounts_us) == pytest.approx(0.25)
    dominant = _f("dominant-operator", 0.225, basis="cpu", ops=["aten::copy_"])
    kept = estimate(f, p, others=[f, dominant], real_step_us=20_000)
    assert kept.saving_us == pytest.approx(alone.saving_us)


def _copies_and_a_product(faults: float) -> Profile:
    """A 40 ms profiled step: 30 ms of copies and 10 ms of one product, with ``faults``
    page faults at 1 us each in the 20 ms step timed without the profiler."""
    return Profile(label="cpu", self_cpu_us=40_000, steps=1, ops=[
        Op("aten::copy_", calls=100, self_cpu_us=30_000, cpu_total_us=30_000),
        Op("aten::mm", calls=10, self_cpu_us=10_000, cpu_total_us=10_000)],
        host_faults={"faults": faults, "fault_us": 1.0, "fault_low_us": 0.5,
                     "step_us": 20_000.0})


def test_page_faults_stop_short_of_the_step_by_the_operators_roofline():
    """Fixing the page faults takes no operator away: the fixed step keeps every operator
    at its roofline at the least (first_touch, 2026-11-28: its faults read 100% of the
    step, the twin saved 88-91%). 30,000 faults at 1 us in a 20 ms step: 100% of it
    before; with 2 ms of roofline (the copies' bytes at the measured bandwidth, never more
    than their recorded time), 18 ms."""
    from reporter.analyze.efficiency import Efficiency, OpEfficiency
    from reporter.analyze.peaks import Peaks
    from reporter.analyze.rules.memory import page_faults

    p = _copies_and_a_product(faults=30_000.0)
    f = page_faults(p, {"share": 0.05, "high": 0.25})
    assert f is not None
    bare = estimate(f, p, real_step_us=20_000)
    assert bare.saving_us == pytest.approx(20_000)  # no roofline: the step, as before
    eff = Efficiency(
        peaks=Peaks("measured", "cpu", {"fp32": 1e11}, 1e10), basis="cpu",
        ops=[OpEfficiency("aten::copy_", ["fp32"], 100, 0.0, 2e7, 30_000, 2000, "memory",
                          False),
             OpEfficiency("aten::mm", ["fp32"], 10, 1e6, 0.0, 100, 500, "compute", True)],
        steps=1, training=False, flops_per_step=1e6, model_flops_per_step=1e6,
        peak_dtype="fp32", peak_flops=1e11, step_us=20_000, step_timed=True,
        profiled_step_us=40_000, modelled_us=30_100, roof_us=2500, total_us=40_000)
    s = estimate(f, p, eff, real_step_us=20_000)
    # the copies' 2 ms roof, and the product's 0.1 ms recorded (under its 0.5 ms roof)
    assert s.saving_us == pytest.approx(20_000 - 2100) == s.high_us
    assert s.accounts_us == pytest.approx(20_000)  # what it accounts for is not capped
    # a fix that takes its operators away is not held to their roofline
    copies = estimate(_f("copy-heavy", 0.9, basis="cpu", ops=["aten::copy_"]), p, eff,
                      real_step_us=20_000)
    assert copies.saving_us == pytest.approx(copies.accounts_us)


def test_a_saving_of_nothing_says_why_instead_of_a_bare_zero():
    """A page-fault finding whose faults all land in another finding's operators saves
    nothing of its own (IN_OTHERS), and one whose step the operators at their roofline
    already fill has no saving left to tell (NO_ROOM): the minor list said "(0, 0.0%)"
    for the first (transformer-bloat beside a CPU hog, 2026-11-29). Each note picks its
    own sentence, which tests/test_sentences.py holds every language to word."""
    from reporter.analyze.efficiency import Efficiency, OpEfficiency
    from reporter.analyze.peaks import Peaks
    from reporter.analyze.rules.memory import page_faults
    from reporter.model.finding import IN_OTHERS, NO_ROOM
    from reporter.render.sentences import REPORT

    p = _copies_and_a_product(faults=4_000.0)
    f = page_faults(p, {"share": 0.05, "high": 0.25})
    assert f is not None
    copies = _f("copy-heavy", 0.75, basis="cpu", ops=["aten::copy_"])
    owned = estimate(f, p, others=[f, copies], real_step_us=20_000)
    assert owned.saving_us == 0 and owned.note == IN_OTHERS
    assert estimate(f, p, real_step_us=20_000).note is None  # its own: a saving
    eff = Efficiency(
        peaks=Peaks("measured", "cpu", {"fp32": 1e11}, 1e10), basis="cpu",
        ops=[OpEfficiency("aten::copy_", ["fp32"], 100, 0.0, 2e7, 30_000, 21_000, "memory",
                          False)],
        steps=1, training=False, flops_per_step=0.0, model_flops_per_step=0.0,
        peak_dtype="fp32", peak_flops=1e11, step_us=20_000, step_timed=True,
        profiled_step_us=40_000, modelled_us=30_000, roof_us=21_000, total_us=40_000)
    full = estimate(f, p, eff, real_step_us=20_000)
    assert full.saving_us == 0 and full.note == NO_ROOM
    from test_sentences import about, blank

    from reporter.render.choices import FindingChoices, WorthChoices

    pick = REPORT["minor_worth"].pick
    assert [pick(about(FindingChoices, worth=blank(WorthChoices, note=n)))
            for n in (IN_OTHERS, NO_ROOM, None)] == [
        "time_in_others", "no_room_left", "minor_saving"]


def test_page_faults_are_not_said_of_a_gpu_step():
    """On a GPU the host runs ahead of the device: its faults lengthen the step only where
    the host bounds it, which their count cannot tell."""
    from reporter.analyze.rules.memory import page_faults

    p = Profile(label="gpu", device_type="cuda", self_cpu_us=40_000, self_device_us=30_000,
                steps=1, ops=[Op("aten::mm", calls=10, self_cpu_us=40_000,
                                 self_device_us=30_000)],
                host_faults={"faults": 5_000.0, "fault_us": 1.0, "fault_low_us": 0.5,
                             "step_us": 20_000.0})
    assert page_faults(p, {"share": 0.05, "high": 0.25}) is None
    assert page_faults(replace(p, device_type=None, self_device_us=0.0),
                       {"share": 0.05, "high": 0.25}) is not None


def test_an_operator_that_allocates_large_outputs_writes_fresh_memory():
    """transformer-bloat (2026-12-01): its blow-up's multiplies, 4 MiB a call, read 32.6 ms
    of an 87.5 ms profiled step whose steps take 24.4 ms without the profiler, which added
    4,868 page faults a step (none without it). A multiply is no copy by name, yet it
    writes its fresh output: it is among the writers (``writers``), the first touch comes
    off it as off a copy, and the blow-up is no longer read as the whole step. A small
    output (a product's 64 KiB) keeps the per-call model."""
    from reporter.analyze.analyzer import profiler_distortion
    from reporter.analyze.savings import FRESH_B, WRITERS, first_touch_us, writers

    p = Profile(self_cpu_us=100_000, steps=1, ops=[
        Op("ProfilerStep*", calls=1, self_cpu_us=0, cpu_total_us=100_000, kind="annotation"),
        Op("aten::mul", calls=10, self_cpu_us=60_000, cpu_total_us=60_000,
           self_cpu_mem_b=10 * (4 << 20)),
        Op("aten::mm", calls=989, self_cpu_us=40_000, cpu_total_us=40_000,
           self_cpu_mem_b=989 * (64 << 10))])
    assert "aten::mul" not in WRITERS and 64 << 10 < FRESH_B <= 4 << 20
    assert writers(p) == WRITERS | {"aten::mul"}
    cost = {"steps": 1, "unprofiled_step_us": 50_000.0, "profiled_step_us": 100_000.0,
            "unprofiled_minor_faults": 0.0, "unprofiled_major_faults": 0.0,
            "profiled_minor_faults": 5000.0, "profiled_major_faults": 0.0, "call_us": 2.0}
    blowup = _f("elementwise-blowup", 0.6, basis="cpu", ops=["aten::mul"])
    mm = _f("dominant-operator", 0.4, basis="cpu", ops=["aten::mm"])
    profiler_distortion([blowup, mm], cost, p)
    assert blowup.evidence.first_touch and not mm.evidence.first_touch
    # by name alone (no profile), the multiply is not a writer
    by_name = _f("elementwise-blowup", 0.6, basis="cpu", ops=["aten::mul"])
    profiler_distortion([by_name], cost)
    assert not by_name.evidence.first_touch
    # 999 records at 2 us: 2 ms of the 50 ms excess; the other 48 ms is the multiplies'
    kept = (60_000 - 10 * 2.0 - 48_002) / 60_000
    assert unprofiled_factor(blowup, p, 100_000, 50_000) == pytest.approx(kept)
    assert unprofiled_factor(by_name, p, 100_000, 50_000) > 0.9  # read as the whole step
    faulted = replace(p, host_faults={"faults": 0.0, "fault_us": 1.0, "fault_low_us": 1.0,
                                      "step_us": 50_000.0, "added_faults": 5000.0,
                                      "call_us": 2.0})
    assert first_touch_us(faulted) == pytest.approx(48_002)


def test_an_unpriced_cost_ten_times_a_priced_saving_ranks_above_it():
    """Main problems go by saving; one the profile cannot price goes by a tenth of the
    time it accounts for, ahead of a priced one that saves no more (issue 66: a
    quadratic loop's operator, 87% of the CPU time, ranked below a 5-8% page-fault
    finding)."""
    from reporter.analyze.savings import _rank_key
    from reporter.model.finding import Finding, Saving

    def fs(rule, accounts, saving):
        return Finding(rule, "medium", {}), Saving(accounts, saving, saving, saving, 1000.0)
    small = fs("page-faults", 60.0, 50.0)
    large_unpriced = fs("dominant-operator", 870.0, None)
    equal_unpriced = fs("launch-overhead", 500.0, None)
    small_unpriced = fs("memory-pressure", 300.0, None)
    priced_big = fs("fp32-gemm", 900.0, 400.0)
    order = sorted([small, small_unpriced, equal_unpriced, large_unpriced, priced_big],
                   key=_rank_key)
    assert [f.rule for f, _ in order] == ["fp32-gemm", "dominant-operator",
                                          "launch-overhead", "page-faults",
                                          "memory-pressure"]
