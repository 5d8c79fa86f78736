"""The analyzer on live runs, on the seeds, and on the corpus; the findings' texts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import SEEDS, SHARED, cli, render_finding

from reporter.analyze.analyzer import RULES, analyze
from reporter.ingest.tables import parse_tables
from reporter.model.finding import Finding
from reporter.model.profile import Op, Profile
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, Fmt, _finding_view

CORPUS = SHARED / "corpus" / "tables"


@pytest.fixture
def live(live_run):
    """The rules that fire in each profiled mode of a built-in target's live run."""
    return lambda name: [{f.rule for f in analyze(s.profile)} for s in live_run(name).sections]


@pytest.mark.slow
@pytest.mark.parametrize("baseline,rule", [
    ("transformer-bloat", "elementwise-blowup"),
    ("cnn", "dataloader-bound"),
    ("seq2seq", "copy-heavy"),
    ("transformer", "unfused-attention"),
])
def test_baseline_triggers_its_seed_rule_and_the_fixed_twin_does_not(live, baseline, rule):
    assert rule in live(baseline)[0], live(baseline)
    for section in live(f"{baseline}-fixed"):
        assert rule not in section


def _seed_profiles(prefix: str) -> list[dict]:
    path = next(p for p in SEEDS.glob(f"{prefix}_*.txt") if "decoded" not in p.name)
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)["profiles"]


def test_the_seeds_authors_diagnoses():
    rules = lambda p: {f["rule"] for f in p["findings"]}  # noqa: E731
    first, optimised = _seed_profiles("001")
    # The blow-up first, its repeat named as part of it; the host's waits in
    # cudaStreamSynchronize while the GPU is busy 96% of the step are its symptom: no
    # advice to remove synchronisations, which would save nothing.
    top = first["findings"][0]
    assert top["rule"] == "elementwise-blowup" and top["materialisers"] == ["aten::repeat"]
    assert top["saving_share"] > 0.5 and not top["minor"]
    assert "sync-stall" not in rules(first)
    assert "elementwise-blowup" not in rules(optimised)
    assert "dataloader-bound" in rules(_seed_profiles("002")[0])
    assert "fp32-gemm" in rules(_seed_profiles("004")[0])
    assert "copy-heavy" in rules(_seed_profiles("000")[0])


def _all_real_profiles() -> list[tuple[str, Profile]]:
    out = []
    for folder in (SEEDS, CORPUS):
        for path in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
            if "003_" in path.name:
                continue  # seed 003 holds no profiler table
            for p in parse_tables(path.read_text(encoding="utf-8"), path.name):
                out.append((path.name, p))
    return out


def test_no_finding_below_its_threshold():
    checked = 0
    for name, profile in _all_real_profiles():
        for f in analyze(profile):
            share, limit = f.evidence.share, f.evidence.threshold
            if f.rule == "low-device-utilization":
                assert share < limit, (name, f)
            elif f.rule == "launch-overhead":
                assert (share >= limit
                        or f.evidence.mean_kernel_us < f.evidence.short_kernel_us)
            else:
                assert share > limit, (name, f)
            assert f.severity in ("high", "medium", "low")
            checked += 1
    assert checked >= 10


def test_tiny_profiles_give_no_findings():
    tiny = Profile(self_cpu_us=40, ops=[Op("aten::mul", calls=1, self_cpu_us=30, cpu_total_us=30),
                                        Op("aten::copy_", calls=1, self_cpu_us=10,
                                           cpu_total_us=10)])
    assert analyze(tiny) == []
    assert analyze(Profile()) == []


# One profile per rule, small and hand-made, for the rules no seed shows.
def _gpu(ops, cpu_total=None, **extra) -> Profile:
    p = Profile(label="gpu", device_type="cuda", ops=ops, **extra)
    p.self_cpu_us = cpu_total or sum(o.self_cpu_us for o in ops)
    p.self_device_us = sum(o.self_device_us for o in ops if o.kind == "kernel")
    return p


def _with_copies(copies: list[dict], steps: int = 2, step_us: float = 10_000.0) -> Profile:
    from reporter.model.profile import Breakdown
    p = _gpu([Op("aten::copy_", calls=10, self_cpu_us=500, self_device_us=1000),
              Op("Memcpy HtoD (Pageable -> Device)", calls=10, self_device_us=1000,
                 kind="kernel")])
    p.breakdown = Breakdown(steps_us=[step_us] * steps, host_us={},
                            device_us={"copy_h2d": [600.0] * steps}, copies=copies)
    return p


# 20 copies of 8 MB in 16 ms over 2 steps: 10 GB/s, 31.7% of PCIe 4.0's 31.5 GB/s, 80% of
# the step
_PAGEABLE_H2D = {"direction": "h2d", "kind": "pageable",
                 "name": "Memcpy HtoD (Pageable -> Device)", "copies": 20, "bytes": 20 * 8e6,
                 "time_us": 16_000.0, "gbps": 10.0, "peak_gbps": 31.5, "link": "PCIe 4.0 x16",
                 "peak_share": 10.0 / 31.5}


SYNTHETIC = {
    "recompilation": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep#1", calls=2, self_cpu_us=100, cpu_total_us=10_000,
           kind="annotation"),
        Op("Torch-Compiled Region: 0/1", calls=2, self_cpu_us=100, cpu_total_us=6000),
        Op("entire_frame_compile", calls=1, self_cpu_us=100, cpu_total_us=2500),
        Op("entire_frame_compile_data: fn_name=_compile.compile_inner, compile_id=0/1",
           calls=1, kind="annotation"),
        Op("aten::addmm", calls=6, self_cpu_us=3000, cpu_total_us=3000)]),
    # Two calls split by a graph break, as a trace records them (Profile.compiled).
    "graph-break": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep#1", calls=2, self_cpu_us=100, cpu_total_us=10_000,
           kind="annotation"),
        Op("Torch-Compiled Region: 0/0", calls=2, self_cpu_us=100, cpu_total_us=6000),
        Op("Torch-Compiled Region: 1/0", calls=2, self_cpu_us=100, cpu_total_us=2000),
        Op("aten::addmm", calls=6, self_cpu_us=3000, cpu_total_us=3000)],
        compiled={"kernels": [], "breaks": 2, "break_us": 1500.0, "break_lookup_us": 100.0,
                  "break_pairs": {"0/0 → 1/0": 2}}),
    "slow-copies": _with_copies([_PAGEABLE_H2D]),
    "straggler-rank": _gpu([Op("void k", calls=10, self_device_us=900, kind="kernel")],
                           stragglers={
        "ranks": [{"rank": "rank 0", "steps": 2, "step_us": 1000.0, "compute": 600.0,
                   "communication": 200.0, "host": 100.0, "waiting": 100.0},
                  {"rank": "rank 1", "steps": 2, "step_us": 1300.0, "compute": 600.0,
                   "communication": 150.0, "host": 450.0, "waiting": 100.0}],
        "slowest": "rank 1", "slowest_step_us": 1300.0, "reference_step_us": 1000.0,
        "extra_us": 300.0, "extra_share": 0.3, "cause": "host",
        "extra_by_cause_us": {"compute": 0.0, "communication": -50.0, "host": 350.0,
                              "waiting": 0.0}}),
    "per-sample-loop": Profile(label="inference", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=10_000, kind="annotation"),
        Op("module::mlp", calls=128, self_cpu_us=3000, cpu_total_us=9000, kind="annotation"),
        Op("aten::addmm", calls=384, self_cpu_us=3000, cpu_total_us=4000),
        Op("aten::relu", calls=256, self_cpu_us=1000, cpu_total_us=1000)]),
    "dispatch-bound": Profile(label="inference", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=10_000, kind="annotation"),
        Op("aten::view", calls=1024, self_cpu_us=2048, cpu_total_us=2048),
        Op("aten::select", calls=128, self_cpu_us=256, cpu_total_us=256),
        Op("aten::addmm", calls=384, self_cpu_us=3000, cpu_total_us=3000)],
        ops_by_shape=[Op("aten::select", calls=128, self_cpu_us=256, cpu_total_us=256,
                         input_shapes="[[64, 32], [], []]")]),
    "dropout-cost": Profile(label="train", self_cpu_us=10_000, ops=[
        Op("aten::dropout", calls=6, self_cpu_us=200, cpu_total_us=2500),
        Op("aten::bernoulli_", calls=6, self_cpu_us=1800, cpu_total_us=1800),
        Op("aten::mul", calls=12, self_cpu_us=500, cpu_total_us=500),
        Op("aten::addmm", calls=6, self_cpu_us=7500, cpu_total_us=7500)],
        ops_by_shape=[Op("aten::dropout", calls=6, self_cpu_us=200, cpu_total_us=2500,
                         input_shapes="[[64, 256], [], []]"),
                      Op("aten::mul", calls=12, self_cpu_us=500, cpu_total_us=500,
                         input_shapes="[[64, 256], [64, 256]]")]),
    "communication-bound": Profile(label="rank 0", self_cpu_us=2000, comm_us=600,
                                   comm_overlap_us=150, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=1800, kind="annotation"),
        Op("aten::mm", calls=4, self_cpu_us=1500, cpu_total_us=1500),
        Op("c10d::allreduce_", calls=4, self_cpu_us=400, cpu_total_us=400)]),
    "launch-overhead": _gpu([
        Op("cudaLaunchKernel", calls=5000, self_cpu_us=40_000, cpu_total_us=40_000, kind="runtime"),
        Op("aten::add", calls=5000, self_cpu_us=30_000, self_device_us=20_000),
        Op("void vectorized_elementwise_kernel", calls=5000, self_device_us=20_000, kind="kernel"),
        Op("ProfilerStep*", calls=1, self_cpu_us=100, cpu_total_us=30_000, kind="annotation")]),
    "memory-pressure": _gpu([
        Op("aten::mul", calls=2, self_cpu_us=500, self_device_us=900, self_device_mem_b=30 << 30),
        Op("aten::mm", calls=2, self_cpu_us=500, self_device_us=1000),
        Op("ampere_sgemm", calls=2, self_device_us=1000, kind="kernel"),
        Op("elementwise_kernel", calls=2, self_device_us=900, kind="kernel")],
        peak_device_mem_b=76 << 30, device_mem_capacity_b=80 << 30),
    "host-copy-blocked": _gpu([
        Op("cudaMemcpyAsync", calls=300, self_cpu_us=6000, cpu_total_us=6000, kind="runtime"),
        Op("aten::copy_", calls=300, self_cpu_us=1000, self_device_us=900),
        Op("Memcpy HtoD (Pageable -> Device)", calls=300, self_device_us=900, kind="kernel"),
        Op("aten::mm", calls=10, self_cpu_us=3000, self_device_us=5000),
        Op("ampere_sgemm", calls=10, self_device_us=5000, kind="kernel")]),
    "single-tensor-optimizer": _gpu([
        Op("Optimizer.step#Adam.step", calls=3, self_cpu_us=3000, cpu_total_us=9000,
           kind="annotation"),
        Op("aten::addcdiv_", calls=600, self_cpu_us=3000, self_device_us=600),
        Op("aten::mul_", calls=600, self_cpu_us=3000, self_device_us=600),
        Op("void multi_kernel", calls=1200, self_device_us=1200, kind="kernel"),
        Op("ProfilerStep*", calls=3, self_cpu_us=100, cpu_total_us=20_000, kind="annotation")]),
    # the FLOP model's rows: the recorded input types say float64
    "fp64-compute": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("aten::mm", calls=12, self_cpu_us=6_000, cpu_total_us=6_000),
        Op("aten::add", calls=12, self_cpu_us=1_000, cpu_total_us=1_000)],
        costs=[{"name": "aten::mm", "dtype": "fp64", "family": "matmul", "phase": "forward",
                "calls": 12, "flops": 1e9, "bytes": 1e7, "time_us": 6_000.0},
               {"name": "aten::add", "dtype": "fp64", "family": "elementwise",
                "phase": "forward", "calls": 12, "flops": 1e6, "bytes": 1e7,
                "time_us": 1_000.0}], shapes_recorded=True),
    # the runner's counts without the profiler (Section.profiler_cost, via host_faults)
    "page-faults": Profile(label="cpu", self_cpu_us=28_000, steps=1, ops=[
        Op("aten::mm", calls=40, self_cpu_us=20_000, cpu_total_us=20_000),
        Op("aten::fill_", calls=10, self_cpu_us=8_000, cpu_total_us=8_000)],
        host_faults={"faults": 3077.0, "fault_us": 0.98, "step_us": 28_560.0}),
    # anomaly detection's NaN checks in the backward (isnan, _is_any_true, item per output)
    "debug-mode": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("aten::mm", calls=26, self_cpu_us=6_000, cpu_total_us=6_000),
        Op("aten::isnan", calls=106, self_cpu_us=100, cpu_total_us=1_000),
        Op("aten::_is_any_true", calls=106, self_cpu_us=100, cpu_total_us=700),
        Op("aten::item", calls=108, self_cpu_us=100, cpu_total_us=300)]),
    # a user's loop zeroing its gradients in place (tests/models/planted_zero_grad.py,
    # profiled 2026-12-05): the fills under zero_grad, the additions under AccumulateGrad
    "zero-grad-fill": Profile(label="train", self_cpu_us=13_766, steps=4, ops=[
        Op("ProfilerStep*", calls=4, self_cpu_us=1459, cpu_total_us=13_766,
           kind="annotation"),
        Op("Optimizer.zero_grad#SGD.zero_grad", calls=4, self_cpu_us=164, cpu_total_us=737,
           kind="annotation"),
        Op("aten::zero_", calls=64, self_cpu_us=31, cpu_total_us=572),
        Op("aten::fill_", calls=72, self_cpu_us=565, cpu_total_us=565),
        Op("torch::autograd::AccumulateGrad", calls=64, self_cpu_us=87, cpu_total_us=1254),
        Op("aten::add_", calls=128, self_cpu_us=2351, cpu_total_us=2351),
        Op("aten::mm", calls=60, self_cpu_us=4582, cpu_total_us=4591)]),
    # what the runner observed: the user's own inference forward built a graph
    "inference-autograd": Profile(label="inference", self_cpu_us=10_000, steps=2, ops=[
        Op("aten::addmm", calls=6, self_cpu_us=10_000, cpu_total_us=10_000)],
        process={"runner_inference_mode": True, "runner_eval": True, "grad_enabled": True,
                 "probe_grad_fn": True, "probe_saved_b": 12_400_000,
                 "training_modules": 9, "training_layers": 2}),
}

# The rules the seeds show (tests/fixtures/seeds, the corpus's tables), each on a profile
# of its own written here: every rule fires, and reads in every language, in a clean clone.
SYNTHETIC.update({
    # a training step's copies: aten::to's time holds its copy_, a transfer
    "copy-heavy": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=10_000, kind="annotation"),
        Op("aten::copy_", calls=400, self_cpu_us=3000, cpu_total_us=3000),
        Op("aten::to", calls=400, self_cpu_us=200, cpu_total_us=3200),
        Op("aten::mm", calls=20, self_cpu_us=6700, cpu_total_us=6700)]),
    "cpu-side-padding": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=10_000, kind="annotation"),
        Op("aten::pad_sequence", calls=8, self_cpu_us=500, cpu_total_us=2500),
        Op("aten::copy_", calls=64, self_cpu_us=2000, cpu_total_us=2000),
        Op("aten::mm", calls=20, self_cpu_us=7400, cpu_total_us=7400)]),
    "dataloader-bound": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=10_000, kind="annotation"),
        Op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", calls=2,
           self_cpu_us=3000, cpu_total_us=4000, kind="dataloader"),
        Op("aten::stack", calls=2, self_cpu_us=1000, cpu_total_us=1000),
        Op("aten::mm", calls=20, self_cpu_us=5900, cpu_total_us=5900)]),
    # a product's operand repeated before an element-wise multiply (seed 001's shape)
    "elementwise-blowup": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("aten::mul", calls=40, self_cpu_us=5000, cpu_total_us=5000),
        Op("aten::repeat", calls=20, self_cpu_us=500, cpu_total_us=2000),
        Op("aten::copy_", calls=20, self_cpu_us=1500, cpu_total_us=1500),
        Op("aten::mm", calls=20, self_cpu_us=3000, cpu_total_us=3000)]),
    "fp32-gemm": _gpu([
        Op("aten::mm", calls=20, self_cpu_us=400, self_device_us=8000),
        Op("ampere_sgemm_128x64_nn", calls=20, self_device_us=8000, kind="kernel"),
        Op("aten::add", calls=20, self_cpu_us=200, self_device_us=2000),
        Op("void vectorized_elementwise_kernel", calls=20, self_device_us=2000,
           kind="kernel")]),
    "low-device-utilization": _gpu([
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=20_000, kind="annotation"),
        Op("aten::mm", calls=20, self_cpu_us=15_000, self_device_us=3000),
        Op("ampere_sgemm_128x64_nn", calls=20, self_device_us=3000, kind="kernel")],
        cpu_total=20_000),
    "sync-stall": _gpu([
        Op("cudaStreamSynchronize", calls=20, self_cpu_us=4000, cpu_total_us=4000,
           kind="runtime"),
        Op("aten::item", calls=20, self_cpu_us=100, cpu_total_us=4200),
        Op("aten::mm", calls=20, self_cpu_us=5900, self_device_us=9000),
        Op("ampere_sgemm_128x64_nn", calls=20, self_device_us=9000, kind="kernel")]),
    "unfused-attention": Profile(label="train", self_cpu_us=10_000, steps=2, ops=[
        Op("aten::bmm", calls=24, self_cpu_us=2500, cpu_total_us=2500),
        Op("aten::_softmax", calls=12, self_cpu_us=1500, cpu_total_us=1500),
        Op("aten::masked_fill", calls=12, self_cpu_us=500, cpu_total_us=500),
        Op("aten::addmm", calls=24, self_cpu_us=5500, cpu_total_us=5500)]),
    "dominant-operator": Profile(label="conv", self_cpu_us=1000, ops=[
        Op("aten::conv2d", calls=4, self_cpu_us=800, cpu_total_us=800),
        Op("aten::relu", calls=4, self_cpu_us=200, cpu_total_us=200)]),
})

# the convolution rules' and data-parallel's inputs (issue 66), beside their own tests
from test_generalise_h4 import SYNTHETIC_H4  # noqa: E402

SYNTHETIC.update(SYNTHETIC_H4)


def _finding_for(rule_id: str) -> Finding:
    if RULES[rule_id].derive is not None:  # a statement: made from a run's efficiency
        from conftest import FIXTURES

        from reporter import store
        from reporter.analyze.analyzer import analyze_section

        run = store.load(FIXTURES / "runs" / "cpu-transformer")
        anywhere = {rule_id: {k: 0.0 for k in RULES[rule_id].limits}}
        for section in run.sections:
            for f in analyze_section(section, run.target.get("batch_size"), anywhere).findings:
                if f.rule == rule_id:
                    return f
        raise AssertionError(f"no run makes {rule_id}")
    assert rule_id in SYNTHETIC, f"{rule_id}: no profile written here fires it"
    for f in analyze(SYNTHETIC[rule_id]):
        if f.rule == rule_id:
            return f
    raise AssertionError(f"SYNTHETIC[{rule_id!r}] does not fire {rule_id}")


def test_every_rule_has_a_profile_written_here():
    """Each rule in the registry fires on a profile this file writes (SYNTHETIC), or, a
    statement made from a run's efficiency, on the stored run: none needs ../shared."""
    derived = {r for r in RULES if RULES[r].derive is not None}
    assert set(SYNTHETIC) | derived == set(RULES), set(RULES) ^ (set(SYNTHETIC) | derived)
    assert not set(SYNTHETIC) & derived


# Three Latin words in a row in Russian or Chinese prose are English left untranslated,
# but for these names (a guide's title, nn.DataParallel's functions, a glossary term kept
# in English in Chinese).
LATIN_RUN = re.compile(r"[A-Za-z][A-Za-z'-]*(?:[ ,]+[A-Za-z][A-Za-z'-]*){2,}")
KEPT_IN_ENGLISH = {"Performance Tuning Guide", "Broadcast, Scatter, Gather",
                   "Tensor Core kernel"}
# a sentence choice's key (and_a_kernel_launch, the_gpu_idles) printed for its words
SENTENCE_KEY = re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b")


def _reads(finding: Finding, lang: str, on_gpu: bool = True) -> str:
    """The finding's bullet in ``lang``, with what every bullet must hold asserted."""
    from test_glossary import prose

    fmt = Fmt(lang)
    text = render_markdown({"lang": lang, "on_gpu": on_gpu, "plural": fmt.plural,
                            "f": _finding_view(finding, fmt)},
                           template=f"findings/{finding.rule}.md.j2")
    assert text.strip() and "{{" not in text and "{%" not in text, text
    assert "None" not in text and "Undefined" not in text, text
    words = prose(text)
    assert not SENTENCE_KEY.findall(words), (lang, SENTENCE_KEY.findall(words), text)
    if lang != "en":
        left = set(LATIN_RUN.findall(words)) - KEPT_IN_ENGLISH
        assert not left, (lang, left, text)
    return text


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_rule_can_fire_and_reads_in_every_language(rule_id):
    finding = _finding_for(rule_id)
    words = {"en": "What to change", "ru": "Что сделать", "zh": "优化建议"}
    texts = {}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = texts[lang] = _reads(finding, lang)
        assert RULES[rule_id].func is None or words[lang] in text, text  # statements: no advice
        # the evidence, in numbers: its share, or (a finding of what the runner observed
        # outside the profile: inference-autograd) the memory it states
        ev = finding.evidence.as_dict()
        number = fmt.pct(ev["share"]) if "share" in ev else next(
            fmt.bytes(v) for k, v in ev.items() if k.endswith("_b"))
        assert number in text, (lang, text)
        _reads(finding, lang, on_gpu=False)
    # each language its own words: no two bullets alike
    assert len(set(texts.values())) == len(texts), texts


def test_every_finding_of_the_real_tables_reads_in_every_language():
    """The layer on real data: each finding the seeds' tables (and ../shared/corpus's,
    where present) give reads in each language as the written profiles' do."""
    found = set()
    for name, profile in _all_real_profiles():
        for f in analyze(profile):
            found.add(f.rule)
            for lang in LANGUAGES:
                assert Fmt(lang).pct(f.evidence.share) in _reads(f, lang), (name, lang)
    assert len(found) >= 8, found


OVER_STEPS = {"en": "over 4 steps", "ru": "за 4 шага", "zh": "4 步"}  # zh: 4 步合计, 4 步内


# Findings whose op_time is per step already (the copies' and a rank's time per step).
PER_STEP_TIMES = {"slow-copies", "straggler-rank"}


@pytest.mark.parametrize("rule_id", sorted(r for r in RULES if r not in PER_STEP_TIMES and (
    "f.op_time" in (Path(__file__).resolve().parent.parent / "templates" / "en" / "findings"
                    / f"{r}.md.j2").read_text(encoding="utf-8"))))
def test_a_total_over_several_profiled_steps_says_how_many(rule_id):
    """A time summed over the profiled steps is not a step's: each bullet that prints one
    says "over N steps" (a 13.5 ms optimizer in a 4.98 ms step read as one step's)."""
    finding = _finding_for(rule_id)
    finding.evidence.steps = 4
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                "f": _finding_view(finding, fmt)},
                               template=f"findings/{rule_id}.md.j2")
        assert OVER_STEPS[lang] in text, (lang, text)
        finding.evidence.steps = 1
        text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                "f": _finding_view(finding, fmt)},
                               template=f"findings/{rule_id}.md.j2")
        assert OVER_STEPS[lang].replace("4", "1") not in text, (lang, text)
        finding.evidence.steps = 4


def test_fp32_convolutions_are_tensor_core_eligible_work_by_kernel_name():
    """cuDNN's fp32 implicit GEMMs (as an H100 names them) count as fp32 matrix work and
    the finding names convolutions; the same kernels with TF32 on do not count."""
    fp32 = "sm90_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nhwc_tilesize128x64x32"
    tf32 = ("sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_"
            "tilesize128x64x32_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn")
    conv = _gpu([Op("aten::cudnn_convolution", calls=10, self_cpu_us=500, self_device_us=9000),
                 Op(fp32, calls=10, self_device_us=9000, kind="kernel"),
                 Op("elementwise_kernel", calls=10, self_device_us=1000, kind="kernel")])
    f = next(f for f in analyze(conv) if f.rule == "fp32-gemm")
    assert f.evidence.convolutions and not f.evidence.products
    opening = {"en": "Convolutions run in full fp32", "ru": "Свёртки считаются в полном fp32",
               "zh": "卷积以 fp32 全精度计算"}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                "f": _finding_view(f, fmt)}, template="findings/fp32-gemm.md.j2")
        assert opening[lang] in text and "cudnn.allow_tf32" in text, text
        # cuda review N13: TF32 is advised through the API that sets torch's legacy flag and
        # its new one alike, and cuDNN's TF32 (on by default) is not said to be "off here"
        assert "matmul.allow_tf32" not in text and 'conv.fp32_precision = "tf32"' in text
        assert not any(w in text for w in ("turned off here", "здесь это выключено",
                                           "这里被关掉了")), text
    tensor_cores = _gpu([Op("aten::cudnn_convolution", calls=10, self_device_us=9000),
                         Op(tf32, calls=10, self_device_us=9000, kind="kernel")])
    assert "fp32-gemm" not in {f.rule for f in analyze(tensor_cores)}


# Kernel names as torch and cuDNN record them (the corpus traces 06 and 11, torch 2.x's
# memory-efficient attention, cuDNN 7-8 on a V100): fp32 convolutions and attention are
# fp32 matrix work; their fp16, bf16 and tensor-core forms are not.
@pytest.mark.parametrize("name,fp32,what", [
    ("volta_scudnn_128x64_relu_interior_nn_v1", True, "convolutions"),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", True, "convolutions"),
    ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", True, "convolutions"),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, "
     "false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, "
     "unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
     True, "convolutions"),
    ("void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(int, int, int, float "
     "const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, "
     "unsigned long long, int, float, int, int, int)", True, "convolutions"),
    ("void cudnn::detail::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, true, 512>(int, int, int, "
     "float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, "
     "float, int, int, int, int)", True, "convolutions"),
    ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, "
     "int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)", True,
     "convolutions"),
    ("ampere_gcgemm_64x64_nt", True, "convolutions"),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nchw_tilesize128x128x8_stage3_"
     "warpsize2x2x1_g1_ffma_aligna4_alignc4_execute_kernel_trt", True, "convolutions"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", True, "attention"),
    ("fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel"
     "<cutlass::arch::Sm80, float, true, false, false, 64, 64, 64, false>::Params)", True,
     "attention"),
    ("void attention_kernel_batched_impl<AttentionKernel<float, cutlass::arch::Sm75, true, 64, "
     "64, true, true, true> >(AttentionKernel<float, cutlass::arch::Sm75, true, 64, 64, true, "
     "true, true>::Params)", True, "attention"),
    # not fp32 work: tensor cores, half precision, TF32
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
     "_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn", False, None),
    ("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1", False, None),
    ("volta_fp16_scudnn_fp16_128x64_relu_interior_nn_v1", False, None),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
     "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", False,
     None),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, "
     "4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
     "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
     "(pytorch_flash::Flash_fwd_params)", False, None),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
     "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
     False, None),
])
def test_fp32_convolutions_and_attention_count_by_their_recorded_names(name, fp32, what):
    profile = _gpu([Op("aten::conv_or_attention", calls=10, self_cpu_us=500, self_device_us=9000),
                    Op(name, calls=10, self_device_us=9000, kind="kernel"),
                    Op("elementwise_kernel", calls=10, self_device_us=1000, kind="kernel")])
    found = [f for f in analyze(profile) if f.rule == "fp32-gemm"]
    assert bool(found) is fp32, name
    if found:
        ev = found[0].evidence.as_dict()
        assert ev[what] and not ev["products"], ev
        assert not ({"convolutions", "attention"} - {what}) & {k for k in ev if ev[k] is True}


def test_fp32_attention_on_a_v100_is_told_and_advised_in_each_language():
    """The hold-out case: a V100 model whose fp32 attention and convolutions hold the time.
    The fmha kernel's sm70 suffix (no arch prefix) says the tensor cores do fp16 only."""
    att = "fmha_cutlassF_f32_aligned_64x64_rf_sm70(PyTorchMemEffAttention::AttentionKernel<" \
          "float, cutlass::arch::Sm70, true, 64, 64, 64, true, true>::Params)"
    conv = "volta_scudnn_128x64_relu_interior_nn_v1"
    profile = _gpu([Op("aten::_efficient_attention_forward", calls=10, self_device_us=5000),
                    Op(att, calls=10, self_device_us=5000, kind="kernel"),
                    Op(conv, calls=10, self_device_us=4000, kind="kernel"),
                    Op("elementwise_kernel", calls=10, self_device_us=1000, kind="kernel")])
    f = next(f for f in analyze(profile) if f.rule == "fp32-gemm")
    assert f.evidence.attention and f.evidence.convolutions and f.evidence.fp16_only
    assert f.evidence.share == pytest.approx(0.9)
    words = {"en": ("the fused attention kernels too", "memory-efficient kernel in fp16"),
             "ru": ("как и fused-ядра attention", "memory-efficient-ядром в fp16"),
             "zh": ("融合 Attention kernel 也是如此", "以 fp16 运行 memory-efficient kernel")}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                "f": _finding_view(f, fmt)}, template="findings/fp32-gemm.md.j2")
        assert all(w in text for w in words[lang]), text
        assert "{{" not in text and "None" not in text, text
    alone = _gpu([Op(att, calls=10, self_device_us=9000, kind="kernel"),
                  Op("elementwise_kernel", calls=10, self_device_us=1000, kind="kernel")])
    f = next(f for f in analyze(alone) if f.rule == "fp32-gemm")
    text = render_markdown({"lang": "en", "on_gpu": True, "plural": Fmt("en").plural,
                            "f": _finding_view(f, Fmt("en"))}, template="findings/fp32-gemm.md.j2")
    assert "Attention runs in full fp32 (the memory-efficient fused kernel)" in text, text



@pytest.mark.parametrize("cls, call", [
    ("Adam", "torch.optim.Adam(params, lr=..., fused=True)"),
    ("RMSprop", "torch.optim.RMSprop(params, lr=..., foreach=True)"),
    ("MyOptimizer", "torch.optim.AdamW(params, lr=..., fused=True)")])
def test_the_optimizer_advice_names_the_users_own_class(cls, call):
    """An Adam user is told about Adam(..., fused=True), not AdamW; a class torch.optim
    does not have gets the general advice."""
    p = SYNTHETIC["single-tensor-optimizer"]
    ops = [Op(o.name.replace("Adam", cls), calls=o.calls, self_cpu_us=o.self_cpu_us,
              cpu_total_us=o.cpu_total_us, self_device_us=o.self_device_us, kind=o.kind)
           for o in p.ops]
    finding = next(f for f in analyze(_gpu(ops, cpu_total=p.self_cpu_us))
                   if f.rule == "single-tensor-optimizer")
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                "f": _finding_view(finding, fmt)},
                               template="findings/single-tensor-optimizer.md.j2")
        assert f"`{call}`" in text, (lang, text)


@pytest.mark.parametrize("rule_id", sorted(r for r in RULES if "torch.compile" in (
    Path(__file__).resolve().parent.parent / "templates" / "en" / "findings" / f"{r}.md.j2"
).read_text(encoding="utf-8") and r not in ("recompilation", "graph-break")))
def test_a_compiled_model_is_not_told_to_compile(rule_id):
    """Advice that says "compile it" (`torch.compile`) is not given to a model that is
    compiled already (reporter.analyze.compiled marks its findings); the rest stays."""
    finding = _finding_for(rule_id)
    words = {"en": "What to change", "ru": "Что сделать", "zh": "优化建议"}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        texts = {}
        for compiled in (False, True):
            finding.evidence.compiled = compiled
            texts[compiled] = render_markdown(
                {"lang": lang, "on_gpu": True, "plural": fmt.plural,
                 "f": _finding_view(finding, fmt)}, template=f"findings/{rule_id}.md.j2")
        assert "`torch.compile`" in texts[False] or "torch.compile(model)" in texts[False]
        assert "`torch.compile`" not in texts[True] and "torch.compile(model)`" not in texts[True]
        assert words[lang] in texts[True], (lang, texts[True])
        assert "{{" not in texts[True] and "None" not in texts[True]
    finding.evidence.compiled = None


def test_launch_overhead_reads_the_launch_statistics_of_a_trace():
    """With a trace's launch statistics, launch-overhead needs the queue to have run dry
    in some step (else the host stayed ahead and the launches cost nothing), and says the
    delay, the launches per step and the dry steps in each language."""
    from reporter.model.profile import Breakdown

    def with_launch(dry: int) -> Profile:
        p = _gpu(list(SYNTHETIC["launch-overhead"].ops))
        p.breakdown = Breakdown(steps_us=[30_000.0] * 4, host_us={}, launch={
            "kernels": 5000, "delay_median_us": 12.5, "delay_p90_us": 40.0,
            "delay_max_us": 90.0, "launches_per_step": 1250.0, "steps": 4, "dry_steps": dry,
            "dry_share": dry / 4})
        return p
    assert "launch-overhead" not in {f.rule for f in analyze(with_launch(0))}
    f = next(f for f in analyze(with_launch(3)) if f.rule == "launch-overhead")
    assert f.evidence.dry_steps == 3 and f.evidence.launches_per_step == 1250.0
    words = {"en": "ran out of queued work in 3 of 4 steps",
             "ru": "очередь GPU пустела в 3 шагах из 4",
             "zh": "4 个单步中有 3 个出现过 GPU 队列排空"}
    for lang in LANGUAGES:
        text = render_finding(f, lang)
        assert words[lang] in text and Fmt(lang).time(12.5) in text, text
        assert "\n\n    **" in text, text  # the advice stays its own paragraph
    # dry in every step: said so, not "in 4 of 4 steps" (review l10n-2026-12-03 ZC-5)
    f = next(f for f in analyze(with_launch(4)) if f.rule == "launch-overhead")
    for lang, said in (("en", "ran out of queued work in every step"),
                       ("zh", "每个单步都出现过 GPU 队列排空")):
        text = render_finding(f, lang)
        assert said in text and "4 of 4" not in text and "中有 4 个" not in text, text


def test_slow_copies_reads_the_copies_against_their_link_and_is_worth_the_gap():
    """slow-copies: host-device copies under half their link's peak taking over 5% of the
    step; worth at most their time less bytes over the peak, at least that part of their
    exposed time; pinned copies far below the link get other advice than pageable ones."""
    from reporter.analyze.savings import estimate
    p = SYNTHETIC["slow-copies"]
    f = next(f for f in analyze(p) if f.rule == "slow-copies")
    ev = f.evidence.as_dict()
    assert ev["share"] == pytest.approx(0.8) and ev["pageable"] and not ev["small"]
    assert ev["achieved_gbps"] == 10.0 and ev["peak_share"] == pytest.approx(10 / 31.5)
    saving = estimate(f, p)
    slower = 1 - 10 / 31.5
    assert saving.high_us == pytest.approx(8000 * slower)
    assert saving.low_us == pytest.approx(600 * slower)  # the copies' exposed time
    pinned_fast = _with_copies([{**_PAGEABLE_H2D, "kind": "pinned", "gbps": 20.0,
                                 "peak_share": 20 / 31.5}])
    assert "slow-copies" not in {f.rule for f in analyze(pinned_fast)}  # 63%: not slow
    brief = _with_copies([{**_PAGEABLE_H2D, "time_us": 800.0}])  # 4% of the step
    assert "slow-copies" not in {f.rule for f in analyze(brief)}
    small = _with_copies([{**_PAGEABLE_H2D, "kind": "pinned", "bytes": 20 * 4096.0}])
    g = next(f for f in analyze(small) if f.rule == "slow-copies")
    assert g.evidence.small and not g.evidence.pageable
    advice = {"en": ("pin_memory=True", "fewer, larger buffers"),
              "ru": ("pin_memory=True", "реже и крупнее"),
              "zh": ("pin_memory=True", "减少拷贝次数")}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        for finding, words in ((f, advice[lang][0]), (g, advice[lang][1])):
            text = render_markdown({"lang": lang, "on_gpu": True, "plural": fmt.plural,
                                    "f": _finding_view(finding, fmt)},
                                   template="findings/slow-copies.md.j2")
            assert words in text and "PCIe 4.0 x16" in text and fmt.pct(0.5) in text, text
            assert "{{" not in text and "None" not in text, text


def test_short_kernels_alone_are_no_launch_overhead_when_the_queue_kept_the_device_busy():
    """cuda review 2026-11-22 #8 (partly fixed): the rule fired on a mean kernel under
    10 us alone; with a device breakdown it asks whether the device waited for launches."""
    from reporter.analyze.rules.waits import launch_overhead
    from reporter.model.profile import Breakdown

    def profile(idle_host_us: float) -> Profile:
        p = _gpu([Op("cudaLaunchKernel", calls=5000, self_cpu_us=5000, cpu_total_us=5000,
                     kind="runtime"),
                  Op("void vectorized_elementwise_kernel", calls=5000, self_device_us=20_000,
                     kind="kernel")])
        p.breakdown = Breakdown(steps_us=[25_000.0], host_us={}, device_us={
            "compute": [20_000.0], "idle_host": [idle_host_us],
            "idle_queued": [5000.0 - idle_host_us]})
        return p
    limits = {"ratio": 0.5, "short_kernel_us": 10.0, "min_launches": 100, "host_idle": 0.10}
    assert launch_overhead(profile(0.0), limits) is None  # 4 us kernels, always queued
    assert launch_overhead(profile(5000.0), limits) is not None  # 20% waiting for launches


@pytest.mark.parametrize("lang", ["en", "ru", "zh"])
def test_lower_precision_on_a_cpu_matrix_product_is_advice_to_time_first(lang):
    """#27: a CPU run whose time is one matrix product was told to try lower precision;
    on the development machine BART's training step under bf16 autocast took 15 times as
    long. On a CPU the advice for a matrix product now says to time it both ways; on a
    GPU, and for an operator that is no matrix product, it is as it was."""
    from reporter.render.report import render_markdown
    from reporter.analyze.rules.operators import dominant_operator
    from reporter.render.view import Fmt, _finding_view

    caveat = {"en": "many times slower", "ru": "в разы медленнее", "zh": "慢好几倍"}[lang]
    plain = {"en": "in lower precision", "ru": "в пониженной точности",
             "zh": "用更低的精度"}[lang]

    def text(op: str, on_gpu: bool) -> str:
        p = Profile(label="cpu", self_cpu_us=10_000, steps=1, ops=[
            Op(op, calls=40, self_cpu_us=6000, cpu_total_us=6000),
            Op("aten::add", calls=40, self_cpu_us=4000, cpu_total_us=4000)])
        f = dominant_operator(p, {"share": 0.5})
        assert f is not None and f.evidence.op == op
        f.evidence.steps = 1
        fmt = Fmt(lang)
        return render_markdown({"lang": lang, "on_gpu": on_gpu, "plural": fmt.plural,
                                "f": _finding_view(f, fmt)},
                               template="findings/dominant-operator.md.j2")

    for op in ("aten::mm", "aten::mkldnn_convolution"):  # a CPU conv's self time is mkldnn's
        cpu = text(op, False)
        assert plain in cpu and caveat in cpu and "bf16" in cpu, op
    for other in (text("aten::mm", True), text("aten::cumsum", False),
                  text("aten::_convert_indices_from_coo_to_csr", False)):
        assert plain in other and caveat not in other and "bf16" not in other


def test_the_optimizer_advice_drops_foreach_where_it_timed_no_faster(tmp_path):
    """#27: the advice said `fused=True` "(or `foreach=True`)"; on the development
    machine T5's Adam took 16.5 ms a step one parameter at a time, 14-22 ms with
    foreach=True and 6.0 ms fused, and the T5 step with foreach=True saved 0.9% against
    a predicted 5.2% (the fused figure). Where the what-if timed foreach no faster, each
    language says so instead of offering it; where it was faster, the advice is as it
    was."""
    import json
    import shutil

    from conftest import FIXTURES

    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown
    from reporter.store import load

    said = {"en": "no faster than updating one parameter at a time",
            "ru": "не быстрее, чем по одному параметру",
            "zh": "并不比逐个参数更新更快"}
    offered = {"en": "(or `foreach=True`)", "ru": "`foreach=True`", "zh": "（或 `foreach=True`）"}
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "cpu-transformer-bloat", folder)
    doc = json.loads((folder / "run.json").read_text())
    (train,) = [s for s in doc["run"]["sections"] if s["label"] == "train"]
    # a step whose optimizer is worth a main finding: 8 ms one parameter at a time
    for foreach_ms, slower in ((9.0, True), (5.0, False)):
        train["whatif"]["single-tensor-optimizer"].update(
            {"before_ms": 8.0, "after_ms": 2.0, "foreach_ms": foreach_ms, "fused_ms": 2.0,
             "variant": "fused"})
        (folder / "run.json").write_text(json.dumps(doc))
        run = load(folder)
        for lang in said:
            text = render_markdown(report_view(run, lang))
            assert (said[lang] in text) is slower, (lang, foreach_ms)
            if not slower:
                assert offered[lang] in text, lang
    en = render_markdown(report_view(run, "en"))
    assert "torch.optim.AdamW(params, lr=..., fused=True)" in en


WORTH = {"en": "    **Worth:**", "ru": "    **Выигрыш:**", "zh": "    **收益：**"}


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_finding_and_its_worth_are_paragraphs_of_their_own(rule_id):
    """In a whole report, a finding's last paragraph ("What to change") and its "Worth"
    are two paragraphs, whether or not the finding's template ends with a newline
    (dropout-cost's did not: the two ran into one paragraph in every language)."""
    from dataclasses import replace

    from conftest import FIXTURES

    from reporter import store
    from reporter.pipeline import report_view

    finding = _finding_for(rule_id)
    run = store.load(FIXTURES / "runs" / "cpu-transformer-bloat")
    for lang in LANGUAGES:
        view = report_view(run, lang)
        section = view.sections[0]
        worth = next(f["worth"] for f in section.findings if f.get("worth"))
        mine = {**_finding_view(finding, Fmt(lang)), "worth": worth}
        text = render_markdown(replace(view, sections=[replace(section, findings=[mine])]))
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(WORTH[lang]))
        assert lines[at - 1] == "" and lines[at - 2].strip(), (lang, lines[at - 3:at + 1])


@pytest.mark.parametrize("queued, words", [
    (True, {"en": "waits on a dependency or an event", "ru": "а зависимости или события",
            "zh": "等待依赖或事件"}),
    (False, {"en": "waits for the CPU", "ru": "ждёт CPU", "zh": "等 CPU"})])
def test_an_idle_gpu_is_said_to_wait_for_what_its_idle_time_waited_for(queued, words):
    """Issue 65: trace 14's GPU idles mostly with work queued behind a dependency, and
    low-device-utilization said "the rest of the time it waits for the CPU". Its sentence
    and advice follow the breakdown's largest idle cause."""
    from reporter.model.profile import Breakdown

    p = _gpu([Op("void k", calls=10, self_device_us=4000, kind="kernel")])
    big, small = ("idle_queued", "idle_host") if queued else ("idle_host", "idle_queued")
    p.breakdown = Breakdown(steps_us=[10_000.0] * 2, host_us={},
                            device_us={"compute": [2000.0] * 2, big: [6000.0] * 2,
                                       small: [2000.0] * 2})
    (f,) = [f for f in analyze(p) if f.rule == "low-device-utilization"]
    assert f.evidence.queued_most is queued
    for lang, said in words.items():
        text = render_finding(f, lang)
        assert said in text
        assert ("queued" in text or "очеред" in text or "队列" in text) == queued, text
