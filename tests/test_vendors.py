"""The vendor table (reporter.model.vendors): a vendor's kernel, library and collective
names live in its row, and the rules, the profile model and the timeline analyses read
the rows; a name written anywhere else in them fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from reporter.analyze.findings import RULES
from reporter.analyze.peaks import DATASHEETS, lookup
from reporter.analyze.rules.convolutions import LAYOUT_KERNEL
from reporter.analyze.rules.precision import _FP32_GEMM, _TC_ARCH
from reporter.collect.whatif import RECIPES
from reporter.model import device as devices
from reporter.model import vendors
from reporter.model.profile import KIND_KERNEL, KIND_RUNTIME, classify
from reporter.store import _PROCESS_FLAGS

PACKAGE = Path(__file__).resolve().parent.parent / "reporter"
# Where vendor knowledge must not be written: it reads the table instead.
READERS = [*sorted((PACKAGE / "analyze" / "rules").glob("*.py")),
           PACKAGE / "model" / "profile.py",
           PACKAGE / "analyze" / "breakdown.py", PACKAGE / "analyze" / "critical_path.py"]
# A vendor's library, kernel or architecture name: the table's own hints and libraries,
# and the words its patterns are made of.
_VENDOR_WORDS = re.compile(
    "|".join(re.escape(w) for w in (*vendors.names("kernel_hints"), *vendors.names("libraries"),
                                    *vendors.names("collectives")))
    + r"|cudnn|miopen|cublas|hipblas|rocblas|tensile|cijk|nvjet|cutlass|onednn|xmx|scudnn|"
    r"\b(volta|turing|ampere|hopper|blackwell|maxwell|kepler|pascal)(_|\b)|\bsm\d{2,3}_|"
    r"_sm\d|nchwtonhwc|nhwctonchw|nchw2nhwc|V100|\bT4\b|RTX 20",
    re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (prose, not knowledge)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _vendor_literals(paths: list[Path]) -> list[str]:
    # reporter's own names that carry a library's: a rule's id ("cudnn-benchmark-off"),
    # its what-if recipe ("cudnn-benchmark"), the process flag the runner observed
    own = {*RULES, *RECIPES, *_PROCESS_FLAGS}
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in prose and node.value not in own
                    and _VENDOR_WORDS.search(node.value)):
                found.append(f"{path.parent.name}/{path.name}:{node.lineno}: {node.value!r}")
    return found


def test_no_vendor_name_outside_the_vendor_table():
    assert _vendor_literals(READERS) == []


def test_the_vendor_check_sees_a_planted_literal(tmp_path):
    planted = tmp_path / "rule.py"
    planted.write_text('"""cuDNN\'s kernels (prose)."""\n_K = re.compile(r"sm90_xmma|Cijk_")\n'
                       'LEVELS = ("aten::miopen_batch_norm",)\n', encoding="utf-8")
    found = _vendor_literals([planted])
    assert len(found) == 2 and "/rule.py:2:" in found[0] and "/rule.py:3:" in found[1]


def test_every_vendor_of_the_device_record_has_a_row_and_the_cpu_none():
    for kind, record in devices.KINDS.items():
        row = vendors.of(record.vendor)
        assert (row is None) == (kind == "cpu"), kind
        assert row is None or row.name == record.vendor
    assert set(DATASHEETS) <= set(vendors.VENDORS)


@pytest.mark.parametrize("name, vendor", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA"), ("Tesla V100-SXM2-16GB", "NVIDIA"),
    ("AMD Instinct MI250X", "AMD"), ("AMD Radeon Graphics", "AMD"),
    ("Intel(R) Data Center GPU Max 1550", "Intel"), ("A100-PG509-200", None), (None, None)])
def test_a_device_name_names_its_vendor(name, vendor):
    row = vendors.by_device_name(name)
    assert (row.name if row else None) == vendor


@pytest.mark.parametrize("name, kind", [
    ("volta_sgemm_128x64_nn", KIND_KERNEL),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", KIND_KERNEL),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", KIND_KERNEL),
    ("Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1_SN_ISA90a", KIND_KERNEL),
    ("hipExtModuleLaunchKernel", KIND_RUNTIME), ("cudaLaunchKernel", KIND_RUNTIME),
    ("hsa_signal_wait_scacquire", "op"),  # not a runtime call's shape (no capital)
    ("zeCommandListAppendLaunchKernel", KIND_RUNTIME), ("mtiaLaunch", KIND_RUNTIME),
])
def test_the_profile_reads_the_tables_kernel_and_runtime_names(name, kind):
    assert classify(name) == kind


def test_rules_read_every_vendors_row():
    """Kernel names are matched against every row: a HIP build's table calls its columns
    CUDA, yet Tensile's fp32 GEMM is an fp32 GEMM."""
    assert _FP32_GEMM.search("Cijk_Ailk_Bljk_SB_MT64x16x32_MI16x16x1_SN")
    assert _FP32_GEMM.search("volta_sgemm_128x64_nn")
    assert not _FP32_GEMM.search("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32")  # half precision
    assert _TC_ARCH.match("ampere_sgemm_64x32_sliced1x4_nn")[0] == "ampere_"  # type: ignore[index]
    assert LAYOUT_KERNEL.search("void cudnn::ops::nchwToNhwcKernel<float, float, float>")
    assert vendors.pattern("layout_kernels").pattern == vendors.NVIDIA.layout_kernels
    assert vendors.pattern("matrix_archs").pattern == vendors.NVIDIA.matrix_archs


def test_a_new_vendors_row_is_read_without_another_edit(monkeypatch):
    """Adding a vendor is one row: its device names reach the datasheet lookup's choice of
    table, its kernel hints the pattern every reader compiles from the rows."""
    row = vendors.Vendor(**{**vendors.INTEL.__dict__, "name": "Planted",
                            "device_names": ("PLANTED",), "fp32_gemm": r"planted_sgemm"})
    monkeypatch.setitem(vendors.VENDORS, "Planted", row)
    assert vendors.by_device_name("Planted X1") is row
    assert vendors.pattern("fp32_gemm").search("planted_sgemm_128")
    assert lookup("Planted X1") is None  # no datasheet rows: measured instead
    assert "Planted" not in DATASHEETS
