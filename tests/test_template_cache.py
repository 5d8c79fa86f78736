"""Compiled templates kept between processes (reporter.render.report.template_cache):
the same report from the cache, and never a failed render because of it."""

from __future__ import annotations

import os

import pytest
from conftest import FIXTURES

from reporter.pipeline import report_view
from reporter.render import report
from reporter.store import load


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("REPORTER_CACHE", raising=False)
    report._environment.cache_clear()  # a fresh process's environment
    yield tmp_path / "reporter" / "templates"
    report._environment.cache_clear()


def _markdown(lang: str = "ru") -> str:
    report._environment.cache_clear()
    view = report_view(load(FIXTURES / "runs" / "cpu-transformer"), lang)
    return report.render_markdown(view)


def test_a_second_process_reads_the_compiled_templates_and_renders_the_same(cache):
    first = _markdown()
    entries = sorted(cache.iterdir())
    assert entries and all(p.name.endswith(".cache") for p in entries)
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    stamps = {p: p.stat().st_mtime_ns for p in entries}
    assert _markdown() == first
    assert {p: p.stat().st_mtime_ns for p in sorted(cache.iterdir())} == stamps  # read, not written


def test_a_damaged_or_stale_entry_compiles_afresh(cache):
    first = _markdown()
    for i, p in enumerate(sorted(cache.iterdir())):  # garbage, a truncation, another checksum
        data = p.read_bytes()
        p.write_bytes([b"\x00garbage", data[:len(data) // 2], data[:20] + b"x" * 40][i % 3])
    assert _markdown() == first


def test_a_cache_folder_others_can_write_is_not_used(cache):
    cache.mkdir(parents=True)
    os.chmod(cache, 0o777)
    assert report.template_cache() is None
    assert _markdown() and not list(cache.iterdir())


def test_no_cache_when_turned_off_or_unwritable(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("REPORTER_CACHE", "0")
    assert report.template_cache() is None
    monkeypatch.delenv("REPORTER_CACHE")
    (tmp_path / "reporter").write_text("a file where the folder would be")
    assert report.template_cache() is None
    assert _markdown()


def test_compiled_ahead_the_first_render_compiles_nothing(cache):
    """scripts/setup.sh compiles every language's templates (compile_templates): a render
    afterwards writes no entry, in any language."""
    assert report.compile_templates() > 0
    entries = {p: p.stat().st_mtime_ns for p in cache.iterdir()}
    for lang in ("en", "ru", "zh"):
        assert _markdown(lang)
    assert {p: p.stat().st_mtime_ns for p in cache.iterdir()} == entries


def test_the_fonts_widths_are_kept_and_a_damaged_entry_is_read_again(cache):
    """reporter.render.columns keeps each font's advance widths beside the templates; a
    damaged entry is read from the font again, to the same widths."""
    from reporter.render import columns

    text = "aten::gelu_backward 650 мкс 每步时间"
    columns.fonts.cache_clear()
    measured = [m(text) for m in columns.fonts("DejaVu Sans", "DejaVu Sans Mono")]
    kept = sorted((cache.parent / "fonts").iterdir())
    assert len(kept) == 3 and all(p.stat().st_size > 1000 for p in kept)
    columns.fonts.cache_clear()
    assert [m(text) for m in columns.fonts("DejaVu Sans", "DejaVu Sans Mono")] == measured
    for p, damage in zip(kept, [b"{", b'{"em": 0, "codes": [], "advances": []}',
                                b'{"em": 2048, "codes": [65], "advances": ["x"]}']):
        p.write_bytes(damage)
    columns.fonts.cache_clear()
    try:
        assert [m(text) for m in columns.fonts("DejaVu Sans", "DejaVu Sans Mono")] == measured
    finally:
        columns.fonts.cache_clear()
    assert all(p.stat().st_size > 1000 for p in kept)  # written again
