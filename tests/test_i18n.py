"""Three languages are equal: the same templates, the same terms, Babel formats."""

from __future__ import annotations

import pytest

from reporter.analyze.analyzer import RULES, finding_ids
from reporter.collect.target import BUILTINS
from reporter.render.languages import default_language, language
from reporter.render.report import environment
from reporter.render.view import LANGUAGES, Fmt


def _files(lang: str) -> set[str]:
    root = language(lang).folder
    return {str(p.relative_to(root)) for p in root.rglob("*.j2")}


def test_every_language_has_every_template():
    files = {lang: _files(lang) for lang in LANGUAGES}
    union = set().union(*files.values())
    for lang in LANGUAGES:
        assert files[lang] == union, f"{lang} lacks {sorted(union - files[lang])}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_rule_has_its_text(lang):
    """From the rule registry: every rule's finding text, and its name in the comparison's
    table of which findings stayed and which went (terms.j2: rule)."""
    terms = environment(lang).get_template("terms.j2").module
    assert "near-roofline" in RULES and set(RULES) == set(finding_ids())  # statements too
    for rule_id in finding_ids():
        assert (language(lang).folder / "findings" / f"{rule_id}.md.j2").is_file(), (lang,
                                                                                    rule_id)
        assert terms.rule.get(rule_id), (lang, rule_id)
    assert set(terms.rule) == set(finding_ids()), "a name for a rule that does not exist"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_builtin_target_is_described(lang):
    words = environment(lang).get_template("targets.j2").module.summary
    assert set(words) == set(BUILTINS)
    assert all(words[name].strip() for name in BUILTINS)


def test_terms_have_the_same_keys_in_every_language():
    keys = {}
    for lang in LANGUAGES:
        module = environment(lang).get_template("terms.j2").module
        keys[lang] = {name: set(getattr(module, name)) for name in dir(module)
                      if not name.startswith("_") and isinstance(getattr(module, name), dict)}
    assert keys["ru"] == keys["en"] == keys["zh"]


@pytest.mark.parametrize("n,word", [(1, "вызов"), (2, "вызова"), (5, "вызовов"), (21, "вызов"),
                                    (11, "вызовов"), (22, "вызова")])
def test_russian_plurals(n, word):
    assert Fmt("ru").plural(n, one="вызов", few="вызова", many="вызовов") == word


def test_english_plurals():
    assert Fmt("en").plural(1, one="step", other="steps") == "step"
    assert Fmt("en").plural(2, one="step", other="steps") == "steps"


def test_numbers_follow_the_locale():
    assert Fmt("ru").num(4.9, 1) == "4,9"
    assert Fmt("en").num(4.9, 1) == "4.9"
    assert Fmt("ru").pct(0.6386) == "63,9\u00a0%"
    assert Fmt("zh").pct(0.6386) == "63.9%"
    assert Fmt("ru").time(29_238_000) == "29,2\u00a0с"  # a no-break space before units
    assert Fmt("zh").time(506_149) == "506\u00a0ms"  # ASCII time units, as seed 004 writes
    assert Fmt("en").num(1234.5, 1) == "1,234.5"


def test_default_language_follows_the_environment(monkeypatch):
    for var in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", "ru_RU.UTF-8")
    assert default_language() == "ru"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert default_language() == "zh"
    monkeypatch.setenv("LANG", "fr_FR.UTF-8")
    monkeypatch.setenv("LC_ALL", "C")
    assert default_language() == "en"


@pytest.mark.parametrize("name", ["report.md.j2", "compare.md.j2"])
@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_language_words_every_block_of_the_layout(lang, name):
    """The structure is written once (templates/layout/); a language folder holds the
    words of each block. A block a language lacks would print nothing, silently."""
    env = environment(lang)
    layout, words = env.get_template(f"layout/{name}"), env.get_template(name)
    assert len(layout.blocks) > 20
    assert set(words.blocks) == set(layout.blocks)
