"""The analyzer on live runs, on the seeds, and on the corpus; the findings' texts."""

from __future__ import annotations

import json

import pytest

from reporter.analyze.analyzer import RULES, Finding, analyze
from reporter.ingest.tables import parse_tables
from reporter.analyze.profile import Op, Profile
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, Fmt, _finding_view
from conftest import SHARED, cli

SEEDS = SHARED / "seeds"
CORPUS = SHARED / "corpus" / "tables"


@pytest.fixture
def live(live_run):
    """The rules that fire in each profiled mode of a built-in target's live run."""
    return lambda name: [{f.rule for f in analyze(s.profile)} for s in live_run(name).sections]


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


@pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared/seeds is absent")
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


@pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared is absent")
def test_no_finding_below_its_threshold():
    checked = 0
    for name, profile in _all_real_profiles():
        for f in analyze(profile):
            share, limit = f.evidence["share"], f.evidence["threshold"]
            if f.rule == "low-device-utilization":
                assert share < limit, (name, f)
            elif f.rule == "launch-overhead":
                assert (share >= limit
                        or f.evidence["mean_kernel_us"] < f.evidence["short_kernel_us"])
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


SYNTHETIC = {
    "per-sample-loop": Profile(label="inference", self_cpu_us=10_000, steps=2, ops=[
        Op("ProfilerStep*", calls=2, self_cpu_us=100, cpu_total_us=10_000, kind="annotation"),
        Op("module::mlp", calls=128, self_cpu_us=3000, cpu_total_us=9000, kind="annotation"),
        Op("aten::addmm", calls=384, self_cpu_us=3000, cpu_total_us=4000),
        Op("aten::relu", calls=256, self_cpu_us=1000, cpu_total_us=1000)]),
    "dropout-cost": Profile(label="train", self_cpu_us=10_000, ops=[
        Op("aten::dropout", calls=6, self_cpu_us=200, cpu_total_us=2500),
        Op("aten::bernoulli_", calls=6, self_cpu_us=1800, cpu_total_us=1800),
        Op("aten::mul", calls=12, self_cpu_us=500, cpu_total_us=500),
        Op("aten::addmm", calls=6, self_cpu_us=7500, cpu_total_us=7500)]),
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
}


def _finding_for(rule_id: str) -> Finding:
    if RULES[rule_id].derive is not None:  # a statement: made from a run's efficiency
        from reporter import store
        from reporter.analyze.analyzer import analyze_section
        from conftest import FIXTURES

        run = store.load(FIXTURES / "runs" / "cpu-transformer")
        anywhere = {rule_id: {k: 0.0 for k in RULES[rule_id].limits}}
        for section in run.sections:
            for f in analyze_section(section, run.target.get("batch_size"), anywhere).findings:
                if f.rule == rule_id:
                    return f
        raise AssertionError(f"no run makes {rule_id}")
    if rule_id in SYNTHETIC:
        profiles = [SYNTHETIC[rule_id]]
    else:
        profiles = [p for _, p in _all_real_profiles()]
        profiles.append(Profile(label="conv", self_cpu_us=1000, ops=[
            Op("aten::conv2d", calls=4, self_cpu_us=800, cpu_total_us=800),
            Op("aten::relu", calls=4, self_cpu_us=200, cpu_total_us=200)]))
    for p in profiles:
        for f in analyze(p):
            if f.rule == rule_id:
                return f
    raise AssertionError(f"no input triggers {rule_id}")


@pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared is absent")
@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_rule_can_fire_and_reads_in_every_language(rule_id):
    finding = _finding_for(rule_id)
    words = {"en": "What to change", "ru": "Что сделать", "zh": "优化建议"}
    for lang in LANGUAGES:
        fmt = Fmt(lang)
        view = {"lang": lang, "on_gpu": True, "plural": fmt.plural,
                "f": _finding_view(finding, fmt)}
        text = render_markdown(view, template=f"findings/{rule_id}.md.j2")
        assert RULES[rule_id].func is None or words[lang] in text, text  # statements: no advice
        assert fmt.pct(finding.evidence["share"]) in text, (lang, text)  # the evidence, in numbers
        assert "{{" not in text and "None" not in text, text


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
    assert f.evidence["convolutions"] and not f.evidence["products"]
    opening = {"en": "Convolutions run in full fp32", "ru": "Свёртки считаются в полном fp32",
               "zh": "卷积以完整 fp32 计算"}
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


def test_short_kernels_alone_are_no_launch_overhead_when_the_queue_kept_the_device_busy():
    """cuda review 2026-11-22 #8 (partly fixed): the rule fired on a mean kernel under
    10 us alone; with a device breakdown it asks whether the device waited for launches."""
    from reporter.analyze.profile import Breakdown
    from reporter.analyze.rules import launch_overhead

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
