"""Findings that generalise (issue #66): five library architectures no other test uses
(tests/models/hf_more.py: ConvNeXt, Swin, ALBERT and ELECTRA in training, a Mistral
decoder in inference), built in code with random weights and profiled live as a user's
targets are. No false alarm: none of the rules whose mistake these models do not make
fires. Each precision worth is the autocast what-if's timing on the model, never the
peaks' ratio; where bf16 was not faster, no precision advice. A finding's share is
checked against the run's raw trace events by hand."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from reporter.analyze.analyzer import analyze_section
from reporter.collect.runner import RunOptions, profile_target
from reporter.collect.target import resolve

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

MODELS = Path(__file__).parent / "models" / "hf_more.py"
NAMES = ("convnext_train", "swin_train", "albert_train", "electra_train", "mistral_inference")
# Mistakes none of these models makes, as built: a rule among these firing is a false alarm
# (their attention is the library's own, fused (SDPA) or not; no loop over samples, no
# float64, no debugging mode, no convolution bias before a BatchNorm, no DataParallel, no
# padding on the host, no loader)
NOT_THEIRS = {"elementwise-blowup", "per-sample-loop", "dispatch-bound", "fp64-compute",
              "debug-mode", "conv-bias-before-bn", "data-parallel", "cpu-side-padding",
              "dataloader-bound", "copy-heavy", "zero-grad-fill", "sync-stall"}


@pytest.fixture(scope="module", params=NAMES)
def profiled(request, tmp_path_factory):
    spec, builder = resolve(f"{MODELS}:{request.param}")
    scratch = tmp_path_factory.mktemp(request.param)
    run = profile_target(spec, builder, RunOptions(
        device="cpu", windows=3, time_budget_s=1.0, warmup_steps=1, threads=1), scratch)
    section = run.sections[0]
    return request.param, section, analyze_section(section, run.target.get("batch_size")), \
        scratch


def test_no_false_alarm_on_library_models(profiled):
    name, _, analysis, _ = profiled
    fired = {f.rule for f in analysis.findings}
    assert not fired & NOT_THEIRS, (name, fired)


def test_a_precision_worth_is_the_autocast_timing_on_the_model(profiled):
    name, section, analysis, _ = profiled
    for f, s in analysis.main + analysis.minor:
        if f.rule != "near-roofline" or not f.evidence.faster_dtype:
            continue
        timed = (section.whatif or {}).get("near-roofline")
        if not timed:  # the machine was busy and the runner dropped its timings
            assert not analysis.established, name
            continue
        assert str(timed["fix"]).startswith("autocast-"), (name, timed)
        measured = statistics.fmean(timed["saved_share"])
        if f.evidence.lever_faster:
            assert s.measured is not None and s.share(s.saving_us) == pytest.approx(
                measured, rel=0.30), (name, s, timed)
        else:  # not faster: no precision advice, and no saving from the peaks
            assert s.saving_us is None or s.saving_us <= 0, (name, s)


def test_a_dominant_operator_share_is_what_the_raw_trace_shows(profiled):
    """The dominant operator's share of the CPU time, by hand from the run's Chrome trace:
    its events' durations less those of the events nested in them, over the own time of
    every operator and annotation event (what torch's "Self CPU time total" counts)."""
    name, section, analysis, scratch = profiled
    found = [f for f in analysis.findings if f.rule == "dominant-operator"]
    if not found:
        return
    f = found[0]
    trace = next(scratch.rglob(section.trace)) if section.trace else None
    assert trace is not None, name
    opener = __import__("gzip").open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    by_tid: dict = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append(e)
    self_us: dict[str, float] = {}
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                parent = stack[-1]["name"]
                self_us[parent] = self_us.get(parent, 0.0) - e["dur"]
            self_us[e["name"]] = self_us.get(e["name"], 0.0) + e["dur"]
            stack.append(e)
    total = sum(self_us.values())
    assert self_us[f.evidence.op] / total == pytest.approx(f.evidence.share, abs=0.005), name
