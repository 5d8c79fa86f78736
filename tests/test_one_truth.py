"""One fact, one figure (issue 65 item 4): a report that states a fact twice states the same
value both times, and a ratio never rounds to "1.0×" or "±0.0%" where it is not exactly
that. Read from the rendered reports themselves, in every language: the goldens (every
built-in workload's report, CPU and GPU) and, where ../shared/corpus is present, the
corpus traces' reports (slow).

The facts checked, in each profiled mode (a "## " part of a report, or the whole report):
- the profiled step: the step breakdown's mean step, the critical path's, the summary's
  speed-of-light line and the efficiency paragraph name one value, over one step count;
- MFU: the summary's and the efficiency paragraph's;
- the speed of light and its share of the step: the summary's and the efficiency's;
- the GPU's busy and idle shares: they add up to the step, and the idle rows of the GPU
  activity table add up to the idle share (within their rounding).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GOLD = Path(__file__).resolve().parent / "gold"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "traces"
LANGS = ("en", "ru", "zh")

_TIME = r"\d[\d.,\u00a0\u202f]*?\u00a0(?:ms|μs|s|мс|мкс|с)"
_PCT = r"\d[\d.,]*\u00a0?%"
_N = r"\d[\d,\u00a0]*"

# Per language: the sentences that state the profiled step (and, with it, how many steps
# it is the mean of), MFU, and the speed of light with its share.
STEP = {
    "en": [rf"\((?:{_TIME}) of (?P<step>{_TIME}) on average over (?P<n>{_N}) profiled",
           rf"mean over (?P<n>{_N}) steps? of (?P<step>{_TIME})\)",
           rf"of the profiled step \((?P<step>{_TIME})\)",
           rf"\*\* instead of (?P<step>{_TIME}) \(of which"],
    "ru": [rf"\((?:{_TIME}) из (?P<step>{_TIME}), в среднем за (?P<n>{_N}) шаг",
           rf"в среднем за (?P<n>{_N}) шаг\w*, шаг длится (?P<step>{_TIME})\)",
           rf"шага под профайлером \((?P<step>{_TIME})\)",
           rf"\*\* вместо (?P<step>{_TIME})"],
    "zh": [rf"（单步 (?P<step>{_TIME}) 中的 (?:{_TIME})，取 profiler 记录的 (?P<n>{_N}) 个",
           rf"取 (?P<n>{_N}) 个单步的平均值，单步耗时 (?P<step>{_TIME})）",
           rf"开启 profiler 时单步耗时（(?P<step>{_TIME})）",
           rf"（目前为 (?P<step>{_TIME})"],
}
# The step timed without the profiler (the throughput's): the efficiency paragraph, the
# critical path, a finding's worth and the profiler's distortion state it.
UNPROFILED = {
    "en": [rf"in (?P<t>{_TIME}) \(the timed step, without the profiler\)",
           rf"without the profiler the step took (?P<t>{_TIME})",
           rf"in the (?P<t>{_TIME}) step timed without it",
           rf"the same steps without it (?P<t>{_TIME})"],
    "ru": [rf"шаг без профайлера длится (?P<t>{_TIME})",
           rf"без профайлера шаг занял (?P<t>{_TIME})",
           rf"в шаге без профайлера \((?P<t>{_TIME})\)",
           rf"page faults, без профайлера — (?P<t>{_TIME})"],
    "zh": [rf"，关闭 profiler 时单步耗时 (?P<t>{_TIME})",
           rf"：关闭 profiler 时单步耗时 (?P<t>{_TIME})",
           rf"在关闭 profiler 计时的单步（(?P<t>{_TIME})）",
           rf"关闭 profiler 时同样的单步耗时 (?P<t>{_TIME})"],
}
# How much of the communication compute hides: the breakdown's reading and
# communication-bound's evidence (trace 14 read 14.9% and 15.2% before issue 65).
OVERLAP = {
    "en": [rf"Compute hides (?P<v>{_PCT}) of the communication",
           rf"(?P<v>{_PCT}) of it overlaps computation"],
    "ru": [rf"Вычисления перекрывают (?P<v>{_PCT}) коммуникации",
           rf"с вычислениями перекрывается (?P<v>{_PCT})"],
    "zh": [rf"(?P<v>{_PCT}) 的通信与计算重叠", rf"其中 (?P<v>{_PCT}) 与计算重叠"],
}
MFU = rf"MFU[:：]?\s*\**\s*(?P<v>{_PCT})"
SOL = {
    "en": (rf"speed of light (?P<sol>{_TIME}), (?P<share>{_PCT}) of the profiled step",
           rf"would take \*\*(?P<sol>{_TIME})\*\* instead of (?:{_TIME}) \(of which "
           rf"(?:{_TIME}), [^)]*\): (?P<share>{_PCT})"),
    "ru": (rf"\(speed of light\) — (?P<sol>{_TIME}), или (?P<share>{_PCT}) шага",
           rf"занял бы \*\*(?P<sol>{_TIME})\*\* вместо (?:{_TIME}) \((?P<share>{_PCT});"),
    "zh": (rf"（speed of light）为 (?P<sol>{_TIME})，是开启 profiler 时单步耗时（(?:{_TIME})）的 "
           rf"(?P<share>{_PCT})",
           rf"只需 \*\*(?P<sol>{_TIME})\*\*（目前为 (?:{_TIME})，即缩短到 (?P<share>{_PCT})；"),
}
BUSY = {
    "en": rf"The GPU is busy (?P<busy>{_PCT}) of the step and idle (?P<idle>{_PCT})",
    "ru": rf"GPU занят (?P<busy>{_PCT}) шага и простаивает (?P<idle>{_PCT})",
    "zh": rf"GPU 忙碌时间占单步的 (?P<busy>{_PCT})，空闲 (?P<idle>{_PCT})",
}
IDLE_ROW = {"en": "| idle: ", "ru": "| простой: ", "zh": "| 空闲："}
# A ratio or an interval that rounds to nothing where the value is not exactly that.
ROUNDED_AWAY = re.compile(r"(?<![\d.,])1[.,]0\u00a0?[×x](?!\d)|±\u00a0?0[.,]0\u00a0?%")


def _num(text: str) -> float:
    """A formatted figure's value: "1,234.5 ms" (en), "1 234,5 мс" (ru), "29,5 %"."""
    digits = re.sub(r"[^\d.,]", "", text.replace("\u00a0", "").replace("\u202f", ""))
    if "," in digits and "." not in digits and re.search(r",\d{1,2}$|,\d{1,3}$", digits) \
            and not re.fullmatch(r"\d{1,3}(,\d{3})+", digits):
        digits = digits.replace(",", ".")  # a decimal comma
    return float(digits.replace(",", ""))


def _parts(report: str) -> list[str]:
    """A report's profiled modes: its "## " parts where they hold "### " sections (a run
    of two modes), else the whole report (one mode: its sections are "## ")."""
    if not re.search(r"(?m)^### ", report):
        return [report]
    return re.split(r"(?m)^## ", report)[1:]


def contradictions(report: str, lang: str) -> list[str]:
    """Each fact the report states with two values, or a ratio rounded to nothing."""
    found = [f"rounded to nothing: {m.group(0)!r}" for m in ROUNDED_AWAY.finditer(report)]
    for part in _parts(report):
        title = part.splitlines()[0][:40] if part else ""
        steps = {m.group("step") for p in STEP[lang] for m in re.finditer(p, part)}
        if len(steps) > 1:
            found.append(f"{title}: the profiled step is {sorted(steps)}")
        counts = {m.group("n") for p in STEP[lang] for m in re.finditer(p, part)
                  if "n" in m.groupdict() and m.group("n")}
        if len(counts) > 1:
            found.append(f"{title}: the profiled step is a mean over {sorted(counts)} steps")
        timed = {m.group("t") for p in UNPROFILED[lang] for m in re.finditer(p, part)}
        if len(timed) > 1:
            found.append(f"{title}: the step without the profiler is {sorted(timed)}")
        hidden = {m.group("v") for p in OVERLAP[lang] for m in re.finditer(p, part)}
        if len(hidden) > 1:
            found.append(f"{title}: compute hides {sorted(hidden)} of the communication")
        mfu = {m.group("v") for m in re.finditer(MFU, part)}
        if len(mfu) > 1:
            found.append(f"{title}: MFU is {sorted(mfu)}")
        said = [re.search(p, part) for p in SOL[lang]]
        if all(said):
            a, b = said
            if (a["sol"], a["share"]) != (b["sol"], b["share"]):
                found.append(f"{title}: speed of light {a['sol']} ({a['share']}) and "
                             f"{b['sol']} ({b['share']})")
        busy = re.search(BUSY[lang], part)
        if busy:
            shares = _num(busy["busy"]), _num(busy["idle"])
            if abs(sum(shares) - 100) > 0.11:
                found.append(f"{title}: busy {busy['busy']} and idle {busy['idle']}")
            rows = [line for line in part.splitlines() if line.startswith(IDLE_ROW[lang])]
            idle = sum(_num(line.rsplit("|", 2)[-2]) for line in rows)
            if rows and abs(idle - shares[1]) > 0.05 * len(rows) + 0.051:
                found.append(f"{title}: the idle rows add up to {idle:.1f}%, the reading "
                             f"says {busy['idle']}")
    return found


GOLDENS = sorted(p for p in GOLD.glob("*.md") if p.name[-5:-3] in LANGS)


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: p.name)
def test_every_golden_states_each_fact_once(path):
    report = path.read_text(encoding="utf-8")
    assert contradictions(report, path.name[-5:-3]) == []


def test_the_checker_finds_two_values_for_one_fact():
    """The checker itself: a profiled step, an MFU and an idle share changed in one place
    of a real report are each caught, in every language."""
    for lang in LANGS:
        report = (GOLD / f"cuda-h200-transformer-fixed.{lang}.md").read_text(encoding="utf-8")
        assert contradictions(report, lang) == []
        step = re.search(STEP[lang][1], report)["step"]
        once = report.replace(step, step.replace("8", "9", 1), 1)
        assert any("profiled step is" in c for c in contradictions(once, lang)), lang
        mfu = re.search(MFU, report)["v"]
        assert any("MFU" in c for c in contradictions(
            report.replace(mfu, "1" + mfu, 1), lang)), lang
        busy = re.search(BUSY[lang], report)
        assert any("idle" in c for c in contradictions(
            report.replace(busy["idle"], "99" + busy["idle"][-3:], 1), lang)), lang
        assert contradictions(report + "\n1.0× faster\n", lang)
        # the T5 report of 2026-12-03 gave its unprofiled step as 25.5 and 25.4 ms
        t5 = (GOLD / f"cuda-h200-t5.{lang}.md").read_text(encoding="utf-8")
        timed = re.search(UNPROFILED[lang][0], t5)["t"]
        last = t5.rindex(timed)
        older = t5[:last] + timed.replace("5", "4", 1) + t5[last + len(timed):]
        assert any("without the profiler" in c for c in contradictions(older, lang)), lang


@pytest.mark.parametrize("lang", LANGS)
def test_each_checked_sentence_is_found_in_the_goldens(lang):
    """A template change that rewords a checked sentence makes this fail, instead of the
    checker silently checking nothing."""
    reports = "\n".join(p.read_text(encoding="utf-8") for p in GOLDENS
                        if p.name[-5:-3] == lang)
    for pattern in [*STEP[lang], *UNPROFILED[lang], MFU, *SOL[lang], BUSY[lang]]:
        assert re.search(pattern, reports), pattern


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is absent")
@pytest.mark.parametrize("name", ["07_hta-a100-80gb-rank0.json.gz", "10_hta-nccl-a100.json.gz",
                                  "11_hta-v100-nccl-rank1.json.gz",
                                  "12_hta-a100-rank3-control.json.gz",
                                  "13_hta-v100-rank1-test.json.gz", "14_hta-two-ranks"])
def test_every_corpus_trace_report_states_each_fact_once(name, tmp_path):
    _states_each_fact_once(CORPUS / name, tmp_path, overlap=name.startswith("14_"))


@pytest.mark.parametrize("which", ["ranks", "h200"])
def test_our_trace_reports_state_each_fact_once(which, tmp_path):
    """The same on a folder of two ranks tests/kineto.py writes (an all-reduce beside
    the products: the overlap said) and on the project's H200 trace."""
    from kineto import H200_TRAIN, training_trace, write

    source = H200_TRAIN
    if which == "ranks":
        source = tmp_path / "ranks"
        source.mkdir()
        write(source / "rank0.json", training_trace(rank=0, allreduce_us=400.0))
        write(source / "rank1.json", training_trace(rank=1, kernel_us=90.0,
                                                    allreduce_us=400.0))
    _states_each_fact_once(source, tmp_path, overlap=which == "ranks")


def _states_each_fact_once(source: Path, tmp_path: Path, overlap: bool) -> None:
    from conftest import cli

    name = source.name
    said = set()
    for lang in LANGS:
        out = tmp_path / lang
        result = cli("analyze", source, "--out", out, "--lang", lang)
        assert result.code == 0, result.err
        reports = sorted(out.rglob(f"*.{lang}.md")) or sorted(out.rglob("*.md"))
        assert reports
        for report in reports:
            text = report.read_text(encoding="utf-8")
            assert contradictions(text, lang) == [], report
            said |= {lang for p in OVERLAP[lang] if re.search(p, text)}
            m = re.search(OVERLAP[lang][0], text)
            if m and re.search(OVERLAP[lang][1], text):  # said twice: a change is caught
                changed = text[:m.start("v")] + "9" + text[m.start("v"):]
                assert any("compute hides" in c for c in contradictions(changed, lang))
    if overlap:
        assert said == set(LANGS), f"the overlap is checked on {name} in every language"
