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
    monkeypatch.delenv("REPORTER_TEMPLATE_CACHE", raising=False)
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
    monkeypatch.setenv("REPORTER_TEMPLATE_CACHE", "0")
    assert report.template_cache() is None
    monkeypatch.delenv("REPORTER_TEMPLATE_CACHE")
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
