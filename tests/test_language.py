"""What the ru and zh reports must say, not only how: meaning fixes of the native-speaker review."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES, SEEDS

from reporter.analyze.analyzer import analyze
from reporter.compare import compare, load_step
from reporter.ingest.tables import _title, parse_tables
from reporter.model.finding import Finding
from reporter.model.profile import Op, Profile
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, Fmt, _finding_view, compare_view
from reporter.pipeline import profiles_view



def _finding_text(finding: Finding, lang: str) -> str:
    fmt = Fmt(lang)
    view = {"lang": lang, "on_gpu": finding.evidence.basis == "device",
            "plural": fmt.plural, "f": _finding_view(finding, fmt)}
    return render_markdown(view, template=f"findings/{finding.rule}.md.j2")


def _gemm_profile(kernel: str) -> Profile:
    return Profile(label="p", device_type="cuda", self_cpu_us=1000, self_device_us=10_000, ops=[
        Op("aten::addmm", calls=10, self_cpu_us=500, cpu_total_us=600, self_device_us=0,
           device_total_us=9000),
        Op(kernel, calls=10, self_device_us=9000, kind="kernel"),
        Op("aten::relu", calls=10, self_cpu_us=100, cpu_total_us=100, self_device_us=1000)])


@pytest.mark.parametrize("kernel,fp16_only", [
    ("volta_sgemm_128x64_nn", True),       # V100: tensor cores in fp16 only
    ("turing_sgemm_128x64_nn", True),      # T4
    ("ampere_sgemm_128x64_nn", False),     # A100: bf16 and TF32
])
def test_fp32_gemm_advice_matches_the_architecture(kernel, fp16_only):
    [finding] = [f for f in analyze(_gemm_profile(kernel)) if f.rule == "fp32-gemm"]
    for lang in LANGUAGES:
        text = _finding_text(finding, lang)
        advice = "bfloat16" in text or "allow_tf32" in text  # what the user is told to do
        assert advice != fp16_only, (lang, text)
        assert "float16" in text


def _rule_finding(rule: str, basis: str) -> Finding:
    # the fields both rules' evidence classes need (their words read them typed)
    evidence = {"basis": basis, "share": 0.5, "threshold": 0.3, "op": "aten::mul",
                "op_share": 0.4, "op_time_us": 100.0, "calls": 3, "softmax_calls": 3,
                "materialisers": [], "materialised_share": 0.0, "others": [],
                "fast_path": False, "fast_path_encoder": False, "mem_per_call_b": 0}
    return Finding(rule, "high", evidence)


@pytest.mark.parametrize("rule", ["elementwise-blowup", "unfused-attention"])
def test_zh_says_gpu_memory_only_on_gpu_profiles(rule):
    assert "显存" not in _finding_text(_rule_finding(rule, "cpu"), "zh")
    assert "显存" in _finding_text(_rule_finding(rule, "device"), "zh")


def test_zh_verdict_says_how_many_times_the_throughput_not_faster_by():
    runs = FIXTURES / "runs"
    steps = [load_step(str(runs / n), runs) for n in
             ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed")]
    comparison = compare(steps)
    speedup = comparison.modes[0].overall.speedup
    text = render_markdown(compare_view(comparison, "zh"))
    fmt = Fmt("zh")
    assert f"吞吐量是第一次的 **{fmt.num(speedup, 2)} 倍**（提升 {fmt.pct(speedup - 1)}" in text
    assert "快 " not in text and "相对上一步" not in text and "各步骤" not in text
    ru = render_markdown(compare_view(comparison, "ru"))
    assert re.search("было \\d+,\\d\u00a0%; главный оператор — `aten::mul`", ru)


def test_units_have_a_no_break_space_and_ru_a_real_minus():
    ru, zh = Fmt("ru"), Fmt("zh")
    assert ru.time(3.89e6) == "3,89\u00a0с" and ru.bytes(3000) == "2,93\u00a0КБ"
    assert ru.num(-12.5) == "−12,5"
    assert zh.time(704_000) == "704\u00a0ms" and zh.time(2.54e6) == "2.54\u00a0s"


def test_the_reviews_number_cases():
    """l10n-2026-11-23 R-11: "от 0,00 мкс", "100,0 мкс", "от 126 до 126", "164,0x", GB/s
    beside МБ in one row."""
    ru, zh, en = Fmt("ru"), Fmt("zh"), Fmt("en")
    assert ru.time(0) == zh.time(0) == "0"  # "от 0 до 435 мс"
    assert ru.time(99.96) == "100\u00a0мкс" and en.bytes(99.97 * 2**20) == "100\u00a0MB"
    assert ru.span(125.87, 126.14) == ("125,9", "126,1")
    assert en.span(126.0, 126.004) == ("126", None)  # said once
    assert en.span(1.23, 1.25, 2) == ("1.23", "1.25")
    assert ru.si(3.35e12, "B/s") == "3,35\u00a0ТБ/с" and ru.si(6.63e9, "B/s") == "6,63\u00a0ГБ/с"
    assert zh.si(3.35e12, "B/s") == "3.35\u00a0TB/s"
    assert ru.si(1.99e11, "FLOP/s") == "199\u00a0GFLOP/s"


@pytest.mark.parametrize("text,title", [
    ("Для сравнения таблица для обычного форварда:", "Для сравнения таблица для обычного форварда"),
    ("First sentence. Second one.", "First sentence."),
    ("word " * 10 + "attention_mask_computation_that_is_long and more words",
     "word " * 10 + "…"),
    ("以下为PyTorch Profiler抓取的Transformer模型进行训练操作的性能分析。其余内容。",
     "以下为PyTorch Profiler抓取的Transformer模型进行训练操作的性能分析。"),
])
def test_a_profile_is_named_by_its_first_sentence_cut_between_words(text, title):
    assert _title(text, width=60) == title.replace(" …", "…")


def test_imported_profiles_are_framed_by_their_number():
    table = ("-------  ---------  ---------\nName     Self CPU   # of Calls\n"
             "-------  ---------  ---------\naten::mm   2.000ms   1\n"
             "-------  ---------  ---------\n"
             "Self CPU time total: 2.000ms\n")
    text = "Первый прогон модели:\n" + table + "\nПосле правок:\n" + table.replace("2.000", "1.000")
    profiles = parse_tables(text)
    md = {lang: render_markdown(profiles_view(profiles, "t.txt", lang)) for lang in LANGUAGES}
    assert "## Профиль 1 — «Первый прогон модели»" in md["ru"]
    assert "## Profile 2: “После правок”" in md["en"]
    assert "## 第 2 份 profile：“После правок”" in md["zh"]


def test_seed_headings_end_at_a_boundary():
    path = next(SEEDS.glob("004_*.txt"))
    labels = [p.label for p in parse_tables(path.read_text(encoding="utf-8"))]
    assert labels and all(label.endswith(("。", "…")) for label in labels), labels
    path = next(SEEDS.glob("000_*.txt"))
    assert not any(p.label.endswith(":") for p in parse_tables(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("device,fp16_only", [
    ("NVIDIA A100-SXM4-80GB", False),  # cuBLAS runs volta_sgemm on an A100 too
    ("NVIDIA H100 80GB HBM3", False),
    ("Tesla V100-SXM2-16GB", True),
    ("Tesla T4", True),
    (None, True),  # unknown device: the kernel's prefix decides
])
def test_fp16_only_advice_is_told_by_the_device_not_the_kernels_prefix(device, fp16_only):
    """cuda review N7: 'volta_sgemm_128x64_nn' on an A100 got the V100's advice."""
    profile = _gemm_profile("volta_sgemm_128x64_nn")
    profile.device_name = device
    [finding] = [f for f in analyze(profile) if f.rule == "fp32-gemm"]
    assert finding.evidence.fp16_only is fp16_only
