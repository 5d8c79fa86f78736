"""One word for each thing: the glossary of each language (templates/<lang>/glossary.json)
holds the terms the reports use and the variants rejected for them. No rejected variant
may appear in a template of that language, nor in a report rendered in it (every fixture
run, and a comparison). Also: a no-break space before every unit, Chinese typography, and
near-roofline never called a problem."""

from __future__ import annotations

import json
import re
from functools import lru_cache

import pytest

from reporter.analyze.analyzer import RULES, analyze_run
from reporter.compare import compare, load_step
from reporter.render.languages import language
from reporter.render.report import render_markdown
from reporter.render.view import LANGUAGES, Fmt, _finding_view, compare_view
from reporter.pipeline import report_view
from reporter.store import load
from conftest import FIXTURES

RUNS = FIXTURES / "runs"
FIXTURE_RUNS = sorted(p.name for p in RUNS.iterdir() if (p / "run.json").is_file())
GLOSSARY_LANGS = [lang for lang in LANGUAGES if (language(lang).folder / "glossary.json").is_file()]
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # code is the user's, not ours
LOGS = re.compile(r"<details>.*?</details>", re.S)  # the profiler's own tables


def glossary(lang: str) -> dict:
    return json.loads((language(lang).folder / "glossary.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def reports(lang: str) -> tuple[tuple[str, str], ...]:
    """Every fixture run's report and a comparison, rendered in ``lang``: (name, text)."""
    out = [(name, render_markdown(report_view(load(RUNS / name), lang))) for name in FIXTURE_RUNS]
    steps = [load_step(str(RUNS / n), RUNS) for n in
             ("cpu-transformer-bloat", "cpu-transformer-bloat-fixed")]
    out.append(("compare-bloat", render_markdown(compare_view(compare(steps), lang))))
    return tuple(out)


def prose(text: str) -> str:
    """A report without its logs and its code: the words reporter wrote."""
    return CODE.sub("`code`", LOGS.sub("", text))


def templates(lang: str) -> list[tuple[str, str]]:
    folder = language(lang).folder
    return [(str(p.relative_to(folder)), p.read_text(encoding="utf-8"))
            for p in sorted(folder.rglob("*.j2"))]


def hits(pattern: str, named: list[tuple[str, str]]) -> list[str]:
    found = []
    for name, text in named:
        for m in re.finditer(pattern, text):
            line = text[:m.start()].count("\n") + 1
            around = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
            found.append(f"{name}:{line}: …{around}…")
    return found


@pytest.mark.parametrize("lang", GLOSSARY_LANGS)
def test_the_glossary_is_well_formed(lang):
    terms = glossary(lang)["terms"]
    assert terms
    for t in terms:
        assert t["term"] and t["use"] and t["reject"], t
        for pattern in t["reject"]:
            re.compile(pattern)


@pytest.mark.parametrize("lang", GLOSSARY_LANGS)
def test_no_rejected_variant_in_the_templates(lang):
    named = templates(lang)
    bad = [f"{t['term']} (use {t['use']!r}): {h}"
           for t in glossary(lang)["terms"] for p in t["reject"] for h in hits(p, named)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("lang", GLOSSARY_LANGS)
def test_no_rejected_variant_in_the_reports(lang):
    named = [(name, prose(text)) for name, text in reports(lang)]
    bad = [f"{t['term']} (use {t['use']!r}): {h}"
           for t in glossary(lang)["terms"] for p in t["reject"] for h in hits(p, named)]
    assert not bad, "\n".join(bad)


# A number, then an ordinary space, then a unit: the unit may wrap to the next line.
UNITS = ("мкс|мс|с(?!\\s+[а-яё])|Б|КБ|МБ|ГБ|ТБ|Б/с|КБ/с|МБ/с|ГБ/с|ТБ/с|μs|ms|s|B|kB|KB|MB|GB|TB|"
         "[kMGTP]?FLOP(?:s|/s)?|[kMGTP]?B/s|samples/s(?:ec)?|%")
PLAIN_SPACE_UNIT = re.compile(rf"\d (?:{UNITS})(?![\w/])")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_a_unit_is_joined_to_its_number_by_a_no_break_space(lang):
    named = [(name, prose(text)) for name, text in reports(lang)]
    bad = hits(PLAIN_SPACE_UNIT.pattern, named)
    assert not bad, "\n".join(bad)


CJK = "\u4e00-\u9fff"


ZH_TYPOGRAPHY = [
    (rf"(?![年月])[{CJK}][A-Za-z0-9`]|[A-Za-z0-9`](?![年月日])[{CJK}]",
     "a space between Chinese and Latin or digits (dates aside: 2026年11月22日)"),
    (rf"[{CJK}][,;:()!?]|[,;:()!?][{CJK}]", "full-width punctuation next to Chinese"),
    ("：\\*\\* ", "no space after a full-width colon"),
    ("）（", "one parenthesis, not two in a row"),
]


@pytest.mark.parametrize("pattern,why", ZH_TYPOGRAPHY)
def test_chinese_typography(pattern, why):
    named = [(name, prose(text)) for name, text in reports("zh")]
    # Headings quote the user's own text ("第 2 份 profile：“…”"), tables the profiler's.
    named = [(n, "\n".join(line for line in t.splitlines() if not line.startswith("|")))
             for n, t in named]
    bad = hits(pattern, named)
    assert not bad, why + "\n" + "\n".join(bad)


@pytest.mark.parametrize("lang", GLOSSARY_LANGS)
def test_every_finding_holds_to_the_glossary_and_the_typography(lang):
    """The fixtures fire a few rules; every rule's text, on a GPU and on the CPU, is held to
    the glossary (and in Chinese to its typography), as tests/test_findings.py fires them."""
    from test_findings import _finding_for

    fmt = Fmt(lang)
    named = []
    for rule_id in sorted(RULES):
        finding = _finding_for(rule_id)
        for on_gpu in (True, False):
            view = {"lang": lang, "on_gpu": on_gpu, "plural": fmt.plural,
                    "f": _finding_view(finding, fmt)}
            text = render_markdown(view, template=f"findings/{rule_id}.md.j2")
            named.append((f"{rule_id} (on_gpu={on_gpu})", prose(text)))
    bad = [f"{t['term']} (use {t['use']!r}): {h}"
           for t in glossary(lang)["terms"] for p in t["reject"] for h in hits(p, named)]
    if lang == "zh":
        bad += [f"{why}: {h}" for pattern, why in ZH_TYPOGRAPHY for h in hits(pattern, named)]
    assert not bad, "\n".join(bad)


def test_chinese_lists_of_parallel_items_use_the_enumeration_comma():
    text = dict(reports("zh"))["cpu-transformer"]
    line = next(line for line in text.splitlines() if "存活张量峰值" in line)
    assert "、" in line and "MB，" not in line, line


PROBLEM = {"en": re.compile(r"\bproblem", re.I), "ru": re.compile(r"[Пп]роблем"),
           "zh": re.compile("问题")}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_near_roofline_is_never_called_a_problem(lang):
    """Its bullet says the products run as they should; nothing around it may then call
    it a problem (its text, its worth line, the heading above it when it stands alone)."""
    run = load(RUNS / "cpu-transformer")
    fmt = Fmt(lang)
    said = 0
    for analysis in analyze_run(run):
        for f, saving in analysis.main + analysis.minor:
            if f.rule != "near-roofline":
                continue
            view = {"lang": lang, "on_gpu": False, "plural": fmt.plural,
                    "f": _finding_view(f, fmt, saving)}
            text = render_markdown(view, template=f"findings/{f.rule}.md.j2")
            assert not PROBLEM[lang].search(text), text
            said += 1
    assert said
    # In the report: the bullet and its worth line, up to the next bullet or heading.
    report = prose(dict(reports(lang))["cpu-transformer"])
    bullets = [b for b in re.split(r"\n(?=- |#)", report)
               if b.startswith("- ") and "roofline" in b.split("\n")[0]]
    assert bullets
    for b in bullets:
        assert not PROBLEM[lang].search(b), b


def test_russian_sentences_do_not_chain_colons():
    """English stacks colons ("Worth: measured here, a → b: about c"); Russian does not: a
    sentence of a report has one colon at most, past its bold label ("**Выигрыш:**")."""
    bad = []
    for name, text in reports("ru"):
        for line in prose(text).splitlines():
            if line.startswith("|"):
                continue
            line = re.sub(r"\*\*[^*]+:\*\*", "", line)
            for sentence in re.split(r"(?<=[.!?])\s+(?=[А-ЯA-Z])", line):
                if sentence.count(": ") >= 2:
                    bad.append(f"{name}: {sentence}")
    assert not bad, "\n".join(bad)


def test_ru_and_zh_have_their_glossary():
    assert {"ru", "zh"} <= set(GLOSSARY_LANGS)
