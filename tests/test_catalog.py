"""Translations kept current: each language records the English each sentence was
translated from (templates/<code>/catalog.json, reporter.render.catalog), and a sentence
whose English changed since is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reporter.render.catalog import record, sentences, stale

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


@pytest.mark.parametrize("code", ["ru", "zh"])
def test_every_translation_is_of_the_current_english(code):
    """Fails naming each sentence whose English changed since it was translated; once the
    translation is updated, `python -m reporter.render.catalog CODE` records it."""
    assert stale(TEMPLATES, code) == []


def test_a_changed_english_sentence_names_its_stale_translations(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates)
    assert stale(templates, "ru") == [] and stale(templates, "zh") == []
    findings = templates / "en" / "findings"
    path = findings / "cpu-side-padding.md.j2"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("one batch at a time", "a batch at a time"), encoding="utf-8")
    macro = findings / "sync-stall.md.j2"
    macro.write_text(macro.read_text(encoding="utf-8")
                     + '{% macro brand_new() %}A new sentence.{% endmacro %}\n', encoding="utf-8")
    terms = templates / "en" / "terms.j2"
    terms.write_text(terms.read_text(encoding="utf-8").replace(
        '"train": "Training step"', '"train": "Training"'), encoding="utf-8")
    for code in ("ru", "zh"):
        assert stale(templates, code) == [
            "findings/cpu-side-padding.md.j2::text: the English changed since it was translated",
            "terms.j2::mode.train: the English changed since it was translated",
            "findings/sync-stall.md.j2::macro brand_new: new in English, not yet translated"]
    # a whitespace-only change is no change
    path.write_text(text.replace("\n", "\n\n"), encoding="utf-8")
    assert not any("cpu-side-padding" in line for line in stale(templates, "ru"))
    # the translator updates ru and records it: ru is current, zh still stale
    record(templates, "ru")
    assert stale(templates, "ru") == []
    assert len(stale(templates, "zh")) == 2


def test_the_sentences_are_the_units_a_translator_words():
    units = sentences(TEMPLATES / "en")
    assert "findings/copy-heavy.md.j2::macro from_pageable_memory" in units
    assert "report.md.j2::block summary_heading" in units or any(
        k.startswith("report.md.j2::block ") for k in units)
    assert units["terms.j2::mode.train"] == "Training step"
    assert "findings/copy-heavy.md.j2::text" in units  # the bullet outside its macros
