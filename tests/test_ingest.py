"""Reading tables people already have: the seeds, the corpus, round trips, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from reporter.ingest.tables import parse_mem_b, parse_tables, parse_time_us
from conftest import SEEDS, SHARED, cli

CORPUS = SHARED / "corpus" / "tables"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")


def seed(prefix: str) -> Path:
    return next(p for p in SEEDS.glob(f"{prefix}_*.txt") if "decoded" not in p.name)


def analyze_json(path: Path) -> list[dict]:
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)["profiles"]


def rules(profile: dict) -> list[str]:
    return [f["rule"] for f in profile["findings"]]


def test_units():
    assert parse_time_us("29.238s") == pytest.approx(29_238_000)
    assert parse_time_us("506.149ms") == pytest.approx(506_149)
    assert parse_time_us("0.000us") == 0
    assert parse_mem_b("436.30 Gb") == round(436.30 * (1 << 30))
    assert parse_mem_b("-1.27 Gb") == -round(1.27 * (1 << 30))
    assert parse_mem_b("9.57 Kb") == round(9.57 * 1024)
    assert parse_mem_b("2.00 KB") == 2048 and parse_mem_b("0 b") == 0
    assert parse_mem_b("800 B") == 800


def test_seed_001_two_profiles_with_their_totals_and_findings():
    first, second = analyze_json(seed("001"))
    assert first["label"] == "Результаты профайлинга"
    assert second["label"] == "Результат после изменений внутри модели"
    assert first["totals"] == {"self_cpu_us": pytest.approx(29_238_000),
                               "self_device_us": pytest.approx(28_157_000)}
    assert second["totals"]["self_device_us"] == pytest.approx(506_149)
    mul = [o for o in first["ops"] if o["name"] == "aten::mul"]
    assert len(mul) == 1 and mul[0]["calls"] == 3000
    assert mul[0]["self_device_us"] == pytest.approx(17_980_000)
    assert mul[0]["self_device_mem_b"] == round(436.30 * (1 << 30))
    assert "elementwise-blowup" in rules(first)
    assert "elementwise-blowup" not in rules(second)


def test_seed_000_markdown_tables():
    first, second = analyze_json(seed("000"))
    assert first["label"] == "Оптимизация teacher forcing"
    assert second["label"].startswith("Для сравнения")
    assert len(first["ops"]) == 10 and first["ops"][0]["name"] == "aten::copy_"
    assert first["ops"][0]["calls"] == 44166
    # No footer: totals come from a row's time and its share.
    assert first["totals"]["self_cpu_us"] == pytest.approx(5_878_000 / 0.2886, rel=1e-3)
    assert "copy-heavy" in rules(first)
    (f,) = [f for f in first["findings"] if f["rule"] == "copy-heavy"]
    assert "copyslices" in f["kinds"] and "transfer" in f["kinds"]


def test_seed_002_and_004():
    (cnn,) = analyze_json(seed("002"))
    assert "dataloader-bound" in rules(cnn)
    assert cnn["totals"]["self_cpu_us"] == pytest.approx(17_476_000)
    train, infer = analyze_json(seed("004"))
    assert train["totals"]["self_device_us"] == pytest.approx(504_416)
    assert infer["totals"]["self_device_us"] == pytest.approx(2_161_000)
    row = next(o for o in train["ops"] if o["name"] == "model_inference")
    assert row["calls"] == 1 and row["self_cpu_us"] == pytest.approx(76_221)
    assert row["self_device_mem_b"] == -round(34.95 * (1 << 30))


# file -> (profiles, operators in the first, a row checked by hand: name, field, value)
CORPUS_CHECKS = {
    "01_": (1, 15, ("to", "self_cpu_us", 81_588)),
    "03_": (1, 5, ("conv2d", "calls", 1)),
    "05_": (1, 10, ("ProfilerStep*", "calls", 2)),
    "06_": (1, 8, ("is this faster (?)", "calls", 20)),
    "07_": (1, 73, None),
    "09_": (1, 10, ("STUDENT - NAIVE ATTENTION", "self_cpu_us", 229_600)),
    "10_": (1, 9, None),
    "11_": (1, 10, None),
    "12_": (1, 3, None),
    "14_": (1, 10, None),
    "15_": (1, 7, ("aten::square", "calls", 1)),
    "17_": (1, 10, None),
    "18_": (1, 9, ("sm90_xmma_gemm_f32f32_tf...", "self_device_us", 687.139)),
    "21_": (1, 2, None),
}


@needs_corpus
@pytest.mark.parametrize("prefix", sorted(CORPUS_CHECKS))
def test_corpus_tables_parse(prefix):
    path = next(CORPUS.glob(f"{prefix}*.txt"))
    profiles = parse_tables(path.read_text(encoding="utf-8"), path.name)
    n_profiles, n_ops, check = CORPUS_CHECKS[prefix]
    assert len(profiles) == n_profiles
    assert len(profiles[0].ops) == n_ops, [o.name for o in profiles[0].ops]
    if check:
        name, field, value = check
        op = next(o for o in profiles[0].ops if o.name == name)
        assert getattr(op, field) == pytest.approx(value)


def _live_profile(memory: bool = True):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    x = torch.randn(32, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=memory,
                 profile_memory=memory) as prof:
        for _ in range(3):
            model(x).sum().backward()
    return prof


@pytest.mark.parametrize("memory", [True, False])
@pytest.mark.parametrize("kwargs", [
    dict(sort_by="self_cpu_time_total", row_limit=10),
    dict(sort_by="cpu_time_total", row_limit=-1),
    dict(sort_by="count", row_limit=8),
    dict(sort_by="self_cpu_time_total", row_limit=5, max_name_column_width=20),
])
def test_round_trip_of_live_tables(kwargs, memory):
    prof = _live_profile(memory)
    events = prof.key_averages()
    (parsed,) = parse_tables(events.table(**kwargs))
    live = {e.key: e for e in events}
    assert parsed.self_cpu_us == pytest.approx(sum(e.self_cpu_time_total for e in events),
                                               rel=1e-3, abs=2)
    checked = 0
    for op in parsed.ops:
        if op.name.endswith("..."):
            continue
        e = live[op.name]
        assert op.calls == e.count
        assert op.self_cpu_us == pytest.approx(e.self_cpu_time_total, rel=2e-3, abs=1.5)
        assert op.cpu_total_us == pytest.approx(e.cpu_time_total, rel=2e-3, abs=1.5)
        checked += 1
    assert checked >= 3


def test_round_trip_of_a_table_grouped_by_input_shape():
    prof = _live_profile()
    grouped = prof.key_averages(group_by_input_shape=True)
    (parsed,) = parse_tables(grouped.table(sort_by="self_cpu_time_total", row_limit=15,
                                           max_shapes_column_width=200))
    live = {(e.key, str(e.input_shapes)): e for e in grouped}
    assert parsed.ops_by_shape
    checked = 0
    for op in parsed.ops_by_shape:
        if op.name.endswith("..."):
            continue  # names longer than the column are cut
        checked += 1
        e = live[(op.name, op.input_shapes)]
        assert op.calls == e.count
        assert op.self_cpu_us == pytest.approx(e.self_cpu_time_total, rel=2e-3, abs=1.5)
        assert op.self_cpu_mem_b == pytest.approx(e.self_cpu_memory_usage, rel=0.01, abs=8)
    assert checked >= 5


@pytest.mark.parametrize("content,words", [
    (b"", ["empty"]),
    (b"just some prose\nwith no table\n", ["no profiler table"]),
    (b"\x00\x01\x02binary\xff" * 10, ["binary"]),
    (b'{"traceEvents": []}', ["without profiler events"]),
    (b"\x1f\x8b\x08\x00cut-off gzip", ["gzip"]),
    ("---------  ---------\n     Name  Self CPU\n---------  ---------\n".encode(),
     ["no profiler table"]),
    (b"\xff\xfe not utf8 \xc3\x28", ["not UTF-8"]),
])
def test_bad_files_give_one_line_and_exit_2(tmp_path, content, words):
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    res = cli("analyze", path, "--json")
    assert res.code == 2, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), res.err


def test_a_table_cut_mid_row_still_parses_what_is_there(tmp_path):
    text = _live_profile().key_averages().table(row_limit=8)
    cut = text[: text.index("\n", len(text) // 2) + 20]
    path = tmp_path / "cut.txt"
    path.write_text(cut)
    res = cli("analyze", path, "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["profiles"][0]["ops"]


def test_analyze_does_not_import_torch(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(_live_profile().key_averages().table(row_limit=5))
    code = ("import sys; from reporter.cli import main; rc = main(['analyze', sys.argv[1], "
            "'--json']); assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_analyze_writes_a_report_for_a_table_file(tmp_path):
    res = cli("analyze", seed("004"), "--lang", "zh", "--out", tmp_path)
    assert res.code == 0, res.err
    md = Path(res.out.strip()).read_text()
    assert "性能分析报告" in md and "aten::addmm" in md


def test_the_runners_tables_read_back(tmp_path):
    """render.keytable writes key_averages' layout; ingest.tables reads it back."""
    from reporter.render.keytable import format_table
    from reporter.store import load
    from conftest import FIXTURES

    for name in ("cpu-transformer-bloat", "cuda-seed001"):
        profile = load(FIXTURES / "runs" / name).sections[0].profile
        for sort_by in ("self_cpu_time_total", "self_cuda_time_total"):
            (back,) = parse_tables(format_table(profile, sort_by, row_limit=25))
            assert back.self_cpu_us == pytest.approx(profile.self_cpu_us, rel=1e-3)
            assert back.self_device_us == pytest.approx(profile.self_device_us, rel=1e-3)
            for op in back.ops:
                if op.name.endswith("..."):
                    continue  # cut to the name column's width
                # a name can have two rows (an annotation's CPU row and its device row)
                assert any(o.name == op.name and o.calls == op.calls
                           and op.self_cpu_us == pytest.approx(o.self_cpu_us, rel=1e-3, abs=1e-3)
                           and op.self_device_us == pytest.approx(o.self_device_us, rel=1e-3,
                                                                  abs=1e-3)
                           and op.self_cpu_mem_b == pytest.approx(o.self_cpu_mem_b, rel=0.01,
                                                                  abs=8)
                           for o in profile.ops), op


# The forms of the corpus's tables, written here from Op rows (tests/profiler_tables.py):
# what each column says is read into its field, in a clean clone too.
def _expected(op, form, field: str) -> float:
    """What the table shows of ``op``'s ``field`` in ``form``: the value, or 0 where no
    column holds it."""
    from profiler_tables import CALLS

    d = form.device
    columns = {c.replace("{D}", d) for c in form.columns}
    shown = {"calls": bool(columns & {*CALLS, "Number of Calls"}),
             "self_cpu_us": bool(columns & {"Self CPU", "Self CPU total"}),
             "cpu_total_us": "CPU total" in columns,
             "self_device_us": f"Self {d}" in columns,
             "device_total_us": f"{d} total" in columns,
             "cpu_mem_b": "CPU Mem" in columns, "self_cpu_mem_b": "Self CPU Mem" in columns}
    return getattr(op, field) if shown[field] else 0


@pytest.mark.parametrize("cut", [None, 5], ids=["whole", "cut"])
@pytest.mark.parametrize("form_name", sorted(__import__("profiler_tables").FORMS))
def test_each_form_of_table_the_corpus_shows_reads_row_by_row(form_name, cut):
    from profiler_tables import FORMS, ROWS, shown_name, write_table

    form = FORMS[form_name]
    (p,) = parse_tables(write_table(ROWS, form, cut_after=cut), form_name)
    rows = ROWS[:cut] if cut else ROWS
    assert [o.name for o in p.ops] == [shown_name(o.name, form) for o in rows]
    for mine, op in zip(p.ops, rows):
        assert mine.calls == _expected(op, form, "calls"), mine
        for field in ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us"):
            # torch prints three decimals of us, ms or s
            assert getattr(mine, field) == pytest.approx(_expected(op, form, field),
                                                         rel=1e-3, abs=1e-3), (field, mine)
        for field in ("cpu_mem_b", "self_cpu_mem_b"):  # two decimals of Kb, Mb or Gb
            assert getattr(mine, field) == pytest.approx(_expected(op, form, field),
                                                         rel=5e-3, abs=1), (field, mine)
    # the totals and the device: the footer's, or (none, or a table cut before it) from a
    # row's share of its column
    d = form.device
    columns = [c.replace("{D}", d) for c in form.columns]
    footer = form.footer and not cut
    cpu_share = "Self CPU %" in columns or "Self CPU total %" in columns
    device_share = f"Self {d} %" in columns
    if footer or cpu_share:
        assert p.self_cpu_us == pytest.approx(sum(o.self_cpu_us for o in ROWS), rel=1e-3)
    if f"Self {d}" in columns and (footer or device_share):
        assert p.self_device_us == pytest.approx(sum(o.self_device_us for o in ROWS),
                                                 rel=1e-3)
    on_device = any(d in c for c in columns)
    if footer or device_share or not on_device:
        assert p.device_type == (d.lower() if on_device else None)
