"""The device record (reporter.model.device): what kind of device a run or a trace ran on,
decided once, with its vendor's tables; an AMD trace reads with AMD's names and peaks."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from reporter.analyze.peaks import copy_peak, lookup
from reporter.model import device as devices
from reporter.model.profile import KIND_KERNEL, KIND_RUNTIME, Op, Profile
from reporter.model.run import Run
from reporter.pipeline import profiles_view, report_view
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES
from reporter.store import load
from conftest import FIXTURES, SHARED, cli

TRACE_04 = SHARED / "corpus" / "traces" / "04_hta-amd-mi250-rocm62.json.gz"


@pytest.mark.parametrize("device, name, hip, calls, kind", [
    ("cpu", None, False, (), "cpu"),
    ("cuda", "NVIDIA H100 80GB HBM3", False, (), "cuda"),
    ("cuda:1", None, False, ("cudaLaunchKernel",), "cuda"),
    ("cuda", "AMD Instinct MI250X", False, (), "rocm"),
    ("cuda", None, True, (), "rocm"),  # a HIP build of torch names its GPUs cuda too
    ("cuda", "AMD Radeon Graphics", False, (), "rocm"),
    ("cuda", None, False, ("hipLaunchKernel", "aten::mm"), "rocm"),
    ("xpu:0", None, False, (), "xpu"),
])
def test_the_record_tells_the_vendor_the_device_string_cannot(device, name, hip, calls, kind):
    record = devices.of(device, name, hip=hip, runtime_calls=calls)
    assert record.kind == kind
    assert record.is_gpu == (kind != "cpu") == devices.is_gpu(device)
    assert record.runtime == {"cpu": "", "cuda": "CUDA", "rocm": "ROCm", "xpu": "XPU"}[kind]
    # torch.cuda's calls apply to NVIDIA's GPUs and to AMD's under a HIP build, not to XPU
    assert devices.cuda_api(device) == (kind in ("cuda", "rocm"))


@pytest.mark.parametrize("name, memory_gb, table_name, fp32_t, bf16_t, bandwidth_gbps, link", [
    ("AMD Instinct MI250X", 64, "MI250X GCD", 47.85, 191.5, 1600, "PCIe 4.0 x16"),
    ("AMD Instinct MI250", 64, "MI250 GCD / MI210", 45.25, 181.0, 1600, "PCIe 4.0 x16"),
    ("AMD Instinct MI210", 64, "MI250 GCD / MI210", 45.25, 181.0, 1600, "PCIe 4.0 x16"),
    ("AMD Radeon Graphics (compute 9.0, 104 CUs)", 64, "MI250 GCD / MI210", 45.25, 181.0,
     1600, "PCIe 4.0 x16"),
    ("AMD Instinct MI300X", 192, "MI300X", 163.4, 1307.4, 5300, "PCIe 5.0 x16"),
])
def test_amd_datasheet_rows(name, memory_gb, table_name, fp32_t, bf16_t, bandwidth_gbps, link):
    peaks = lookup(name, memory_gb << 30)
    assert peaks is not None and peaks.device == table_name
    assert peaks.flops["fp32"] == pytest.approx(fp32_t * 1e12)
    assert peaks.flops["bf16"] == pytest.approx(bf16_t * 1e12)
    assert peaks.bandwidth == pytest.approx(bandwidth_gbps * 1e9)
    assert "tf32" not in peaks.flops  # no TF32 switch counted on AMD
    assert copy_peak("h2d", name) == (link, {"PCIe 4.0 x16": 31.5, "PCIe 5.0 x16": 63.0}[link])


def test_a_generic_amd_name_or_another_vendor_gets_no_datasheet():
    assert lookup("AMD Radeon Graphics", 64 << 30) is None  # which part: unknown
    assert lookup("Intel(R) Data Center GPU Max 1550", 128 << 30) is None
    assert lookup("Radeon RX 7900 XTX", 24 << 30) is None  # not in the table: measured


def _trace_04_facts() -> tuple[dict, list[dict]]:
    with gzip.open(TRACE_04, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    return data["deviceProperties"][0], data["traceEvents"]


@pytest.mark.skipif(not TRACE_04.is_file(), reason="../shared/corpus is absent")
def test_corpus_trace_04_reads_as_an_amd_mi250_gcd(tmp_path: Path):
    """HTA's MI250 trace (ROCm 6.2) names its device "AMD Radeon Graphics": its properties
    (compute 9.0, 104 CUs, 64 GiB) and its runtime calls (hip*) say what it is."""
    props, events = _trace_04_facts()
    assert props["name"] == "AMD Radeon Graphics" and props["numSms"] == 104
    assert any(e.get("name", "").startswith("hip") for e in events
               if e.get("cat") == "cuda_runtime")
    res = cli("analyze", TRACE_04, "--json")
    assert res.code == 0, res.err
    profile = json.loads(res.out)["profiles"][0]
    assert profile["device_type"] == "rocm"
    peaks = profile["efficiency"]["peaks"]
    assert peaks["device"] == "MI250 GCD / MI210" and peaks["source"] == "datasheet"
    assert peaks["flops"]["bf16"] == pytest.approx(181.0e12)
    res = cli("analyze", TRACE_04, "--lang", "en", "--out", tmp_path)
    assert res.code == 0, res.err
    text = next(tmp_path.glob("*.en.md")).read_text(encoding="utf-8")
    assert "# Profiling report: `04_hta-amd-mi250-rocm62.json.gz` on ROCm" in text
    assert "Peaks (datasheet, MI250 GCD / MI210)" in text


def _x(name, ts, dur, cat, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def test_a_hip_trace_in_kinetos_format_reads_with_amds_names_and_peaks(tmp_path: Path):
    """Written as a ROCm 6 build of torch writes it (corpus trace 04's shape): the HIP
    runtime's calls under the cuda_runtime category, Tensile's fp32 GEMM kernels, and a
    device named generically with its compute capability and compute units."""
    gemm = ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_ISA90a_"
            "WS64_WG64_4_1")
    events = [_x("ProfilerStep#1", 0, 1000, "user_annotation")]
    for i in range(8):  # eight products, each launched then run on stream 0
        t = 10 + 120 * i
        events += [_x("aten::mm", t, 30, "cpu_op", **{
                       "External id": i, "Input Dims": [[256, 512], [512, 512]],
                       "Input type": ["float", "float"]}),
                   _x("hipExtModuleLaunchKernel", t + 5, 20, "cuda_runtime", correlation=i),
                   _x(gemm, t + 40, 70, "kernel", pid=2, tid=0, correlation=i, stream=0,
                      device=0)]
    path = tmp_path / "hip.json"
    path.write_text(json.dumps({"deviceProperties": [{
        "id": 0, "name": "AMD Radeon Graphics", "totalGlobalMem": 68702699520,
        "computeMajor": 9, "computeMinor": 0, "warpSize": 64, "numSms": 104}],
        "traceEvents": events}), encoding="utf-8")
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    profile = json.loads(res.out)["profiles"][0]
    assert profile["device_type"] == "rocm"
    assert profile["efficiency"]["peaks"]["device"] == "MI250 GCD / MI210"
    # Tensile's fp32 kernels hold the device time: the lever is bf16 on the matrix cores
    assert [f["rule"] for f in profile["findings"]][:1] == ["fp32-gemm"]
    res = cli("analyze", path, "--lang", "en", "--out", tmp_path)
    assert res.code == 0, res.err
    text = (tmp_path / "hip.json.report.en.md").read_text(encoding="utf-8")
    assert "on ROCm" in text.splitlines()[1]
    assert "Peaks (datasheet, MI250 GCD / MI210): fp32 45.2" in text


# Where a report names the device's runtime: "CUDA" anywhere but torch's feature of that
# name (CUDA graphs, which a HIP build runs as HIP graphs through torch.cuda.graphs) and
# torch's own code (`torch.cuda...`, "cuda" device strings, in lower case) and kernels'
# names ("at::native::CUDAFunctor_add<float>": what ran).
_RUNTIME_CUDA = re.compile(r"\bCUDA\b(?! [Gg]raph)")
_ROCM_PHRASES = {
    "en": ("Self ROCm time total", "Top operators by self ROCm time", "Top ROCm kernels",
           "| Kernel | Self ROCm | Self ROCm % |"),
    "ru": ("Self ROCm time total", "Топ операторов по Self ROCm", "Топ ядер ROCm",
           "| Ядро | Self ROCm | Self ROCm % |"),
    "zh": ("Self ROCm time total", "按 Self ROCm 时间排序的算子", "耗时最多的 ROCm kernel",
           "| Kernel | Self ROCm | Self ROCm % |"),
}


@pytest.mark.skipif(not TRACE_04.is_file(), reason="../shared/corpus is absent")
@pytest.mark.parametrize("lang", LANGUAGES)
def test_corpus_trace_04_names_rocm_where_a_report_names_the_runtime(tmp_path: Path, lang):
    res = cli("analyze", TRACE_04, "--lang", lang, "--out", tmp_path)
    assert res.code == 0, res.err
    text = next(tmp_path.glob(f"*.{lang}.md")).read_text(encoding="utf-8")
    assert _RUNTIME_CUDA.findall(text) == []
    for phrase in _ROCM_PHRASES[lang]:
        assert phrase in text, phrase


def _as_rocm(run: Run, kernels: bool = True) -> Run:
    """A stored H100 run as a ROCm build on an MI250X would have stored it: HIP's version
    instead of CUDA's, AMD's device, each profile's device record rocm (and, without
    ``kernels``, no device time recorded: the tracer was taken)."""
    run.env.update(cuda=None, hip="6.2.41133-dd7f95766", device_name="AMD Instinct MI250X",
                   driver=None)
    for s in run.sections:
        s.profile.device_type = devices.ROCM.kind
        if not kernels:
            s.profile.self_device_us = 0.0
    return run


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_rocm_run_names_rocm_and_its_tracer_in_every_language(lang):
    """No corpus needed: a run's profiles with the ROCm device record, rendered in en, ru
    and zh, print ROCm (and HIP's version) where the text names the runtime, roctracer
    where it names the tracer, and never CUDA there; the CUDA run it came from says CUDA."""
    cuda = render_markdown(report_view(load(FIXTURES / "runs" / "cuda-h100-transformer"), lang))
    assert len(_RUNTIME_CUDA.findall(cuda)) >= 5
    text = render_markdown(report_view(_as_rocm(load(FIXTURES / "runs" /
                                                     "cuda-h100-transformer")), lang))
    assert _RUNTIME_CUDA.findall(text) == []
    assert " · ROCm 6.2.41133-dd7f95766" in text
    for phrase in _ROCM_PHRASES[lang]:
        assert phrase in text, phrase
    assert {"en": "TOP device ops", "ru": "TOP ROCm ops (self ROCm time)",
            "zh": "按 Self ROCm 时间排序的算子："}[lang] in text  # the logs' titles
    bare = render_markdown(report_view(_as_rocm(load(FIXTURES / "runs" / "cuda-h100-transformer"),
                                                kernels=False), lang))
    assert _RUNTIME_CUDA.findall(bare) == []
    assert {"en": "No ROCm kernels were recorded (roctracer unavailable",
            "ru": "Ядра ROCm не записаны (roctracer недоступен",
            "zh": "没有记录到 ROCm kernel（roctracer 不可用"}[lang] in bare


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_rocm_profile_built_in_code_reads_rocm_in_every_language(lang):
    """An imported profile whose device record is rocm (a HIP trace, a HIP build's table)."""
    gemm = "Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1_SN_ISA90a"
    profile = Profile(label="profile 1", device_type=devices.ROCM.kind, self_cpu_us=4000.0,
                      self_device_us=3000.0, steps=1, device_name="AMD Instinct MI250X", ops=[
                          Op("aten::mm", calls=8, self_cpu_us=800.0, cpu_total_us=1200.0,
                             device_total_us=3000.0),
                          Op(gemm, calls=8, self_device_us=3000.0, device_total_us=3000.0,
                             kind=KIND_KERNEL),
                          Op("hipExtModuleLaunchKernel", calls=8, self_cpu_us=400.0,
                             cpu_total_us=400.0, kind=KIND_RUNTIME)])
    text = render_markdown(profiles_view([profile], "hip.json", lang))
    assert _RUNTIME_CUDA.findall(text) == []
    assert "ROCm" in text.splitlines()[1]  # the title: the device is its runtime
    for phrase in _ROCM_PHRASES[lang]:
        assert phrase in text, phrase


def test_a_hip_builds_table_says_cuda_but_its_kernels_are_amds():
    """torch's table under ROCm names its GPU columns CUDA; Tensile's kernels ("Cijk_",
    AMD's row of the vendor table) say whose GPU it was. NVIDIA's kernels leave it CUDA."""
    from reporter.ingest.tables import parse_tables
    from reporter.render.keytable import format_table

    def table(kernel: str) -> str:
        return format_table(Profile(device_type="cuda", self_cpu_us=900.0, self_device_us=600.0,
                                    ops=[Op("aten::mm", calls=2, self_cpu_us=900.0,
                                            cpu_total_us=900.0, device_total_us=600.0),
                                         Op(kernel, calls=2, self_device_us=600.0,
                                            device_total_us=600.0, kind=KIND_KERNEL)]),
                            "self_cuda_time_total")

    amd = table("Cijk_Alik_Bljk_SB_MT64x64x32_MI32x32x2x1_SE_1LDSB0")
    assert "Self CUDA time total" in amd
    assert [p.device_type for p in parse_tables(amd)] == ["rocm"]
    nvidia = table("volta_sgemm_128x64_nn")
    assert [p.device_type for p in parse_tables(nvidia)] == ["cuda"]
    assert devices.of("cuda", kernels=["Cijk_Ailk_Bljk_S"]) is devices.ROCM


TABLE_11 = SHARED / "corpus" / "tables" / "11_rocm-blog-mi210-simplenet.txt"


@pytest.mark.skipif(not TABLE_11.is_file(), reason="../shared/corpus is absent")
def test_corpus_table_11_a_rocm_blogs_mi210_table_reads_as_rocm(tmp_path: Path):
    res = cli("analyze", TABLE_11, "--lang", "en", "--out", tmp_path)
    assert res.code == 0, res.err
    text = next(tmp_path.glob("*.en.md")).read_text(encoding="utf-8")
    assert "on ROCm" in text.splitlines()[1]
    assert _RUNTIME_CUDA.findall(text) == []
    assert "Self ROCm time total" in text and "Top ROCm kernels" in text
