"""The rule registry: a rule is registered once with its whole story (detection, saving
model, what it explains, when it is a symptom, its what-if), and every part of reporter
that needs to know about a rule asks the registry instead of naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reporter.analyze.analyzer import analyze
from reporter.analyze.findings import RULES, Worth, rule
from reporter.collect.whatif import RECIPES, timeable
from reporter.model.finding import Finding, Saving
from reporter.model.profile import Op, Profile
from reporter.render.languages import codes, language
from reporter.render.report import environment

PACKAGE = Path(__file__).resolve().parent.parent / "reporter"
# The modules that hold rules and statements (their ids are theirs to name).
RULE_MODULES = {"rules.py", "roofline.py", "compiled.py"}


def test_every_rule_has_a_saving_model_and_its_words_in_every_language():
    for r in RULES.values():
        assert callable(r.saving), r.id
        assert (r.func is None) != (r.derive is None), r.id  # a rule or a statement
        assert r.whatif is None or r.whatif.recipe in RECIPES, r.id
        for lang in codes():
            assert (language(lang).folder / "findings" / f"{r.id}.md.j2").is_file(), (lang, r.id)
            assert environment(lang).get_template("terms.j2").module.rule.get(r.id), (lang, r.id)


def test_a_rule_without_a_saving_model_is_refused():
    with pytest.raises(TypeError):
        rule("no-saving", share=0.1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="saving model"):
        rule("no-saving", saving=None, share=0.1)(  # type: ignore[arg-type]
            lambda p, limits: None)
    assert "no-saving" not in RULES


def test_no_module_outside_the_rules_names_a_rule():
    """Rule ids appear only where the rules are registered: the analyzer, the savings and
    the runner read the registry. (The views still name a few: they format them. A
    built-in target names the findings it gives its own fix for, as a user's target does:
    Target.fixes.)"""
    ids = "|".join(re.escape(i) for i in RULES)
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in RULE_MODULES or path.parent.name in ("render", "targets"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(rf"[\"']({ids})[\"']", line):
                found.append(f"{path.relative_to(PACKAGE)}:{n}")
    assert found == []


def _profile() -> Profile:
    return Profile(self_cpu_us=10_000, steps=1, ops=[
        Op("aten::conv2d", calls=10, self_cpu_us=8000, cpu_total_us=8000),
        Op("aten::relu", calls=10, self_cpu_us=2000, cpu_total_us=2000)])


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, seen by every module that reads it, for a test to add to."""
    copy = dict(RULES)
    for module in ("findings", "analyzer", "savings"):
        monkeypatch.setattr(f"reporter.analyze.{module}.RULES", copy)
    monkeypatch.setattr("reporter.collect.whatif.RULES", copy)
    return copy


def test_a_rule_added_in_one_place_is_detected_ranked_explains_and_is_timed(registry):
    """What adding a rule takes, in Python: one registration. The analyzer runs it, lets
    it explain a catch-all, ranks it by its own saving model, and the runner learns from
    the registry whether it has a replacement to time."""
    from reporter.analyze.findings import WhatIf
    from reporter.analyze.savings import ranked

    assert [f.rule for f in analyze(_profile())] == ["dominant-operator"]  # conv2d at 80%

    def worth(w: Worth) -> Saving:
        return Saving(w.accounts_us, 1234.0, 1000.0, 1500.0, w.step_us)

    @rule("planted", saving=worth, explains=lambda f, d: d.ops == ["aten::conv2d"],
          whatif=WhatIf("attention"), share=0.5)
    def planted(profile: Profile, limits: dict[str, float]) -> Finding | None:
        return Finding("planted", "high", {"basis": "cpu", "share": limits["share"]},
                       ops=["aten::relu"])

    assert "planted" in registry
    found = analyze(_profile())
    assert [f.rule for f in found] == ["planted"]  # it explains the dominant conv2d
    (f, s), = ranked(found, _profile())[0]
    assert s.saving_us == 1234.0 and s.accounts_us == pytest.approx(5000)
    assert timeable(found) == ["planted"]
    assert analyze(_profile(), {"planted": {"share": 0.7}})[0].evidence["share"] == 0.7


def test_the_planted_rule_did_not_stay():
    assert "planted" not in RULES
