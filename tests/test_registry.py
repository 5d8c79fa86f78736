"""The rule registry: a rule is registered once with its whole story (detection, saving
model, what it explains, when it is a symptom, its what-if), and every part of reporter
that needs to know about a rule asks the registry instead of naming it."""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from pathlib import Path

import pytest

from reporter.analyze.analyzer import analyze
from reporter.analyze.findings import RULES, Worth, rule
from reporter.collect.whatif import RECIPES, timeable
from reporter.model.finding import (EVIDENCE, NOT_QUANTIFIABLE, Evidence, Finding, Saving,
                                    evidence_from)
from reporter.model.profile import Op, Profile
from reporter.render.languages import codes, language
from reporter.render.report import environment

PACKAGE = Path(__file__).resolve().parent.parent / "reporter"
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
        rule("no-saving", saving=None, evidence=Evidence, share=0.1)(  # type: ignore[arg-type]
            lambda p, limits: None)
    assert "no-saving" not in RULES


def _registering_module(rule_id: str) -> Path:
    """The module whose @rule (or @statement) registers ``rule_id``."""
    found = [path for path in PACKAGE.rglob("*.py")
             if re.search(rf"@(rule|statement)\(\s*[\"']{re.escape(rule_id)}[\"']",
                          path.read_text(encoding="utf-8"))]
    assert len(found) == 1, (rule_id, found)
    return found[0]


def test_a_rule_id_is_named_only_by_the_module_that_registers_it():
    """A rule is one slice: its id appears in the module that registers it and nowhere
    else in the package (the analyzer, the savings, the runner, the views and the
    sentences read the registry: Rule.says, host_work, about_products, catch_all...)."""
    found = []
    for rule_id in RULES:
        home = _registering_module(rule_id)
        for path in PACKAGE.rglob("*.py"):
            if path == home:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(rf"[\"']{re.escape(rule_id)}[\"']", line):
                    found.append(f"{rule_id}: {path.relative_to(PACKAGE)}:{n}")
    assert found == []


def test_the_id_check_sees_a_planted_literal(tmp_path, monkeypatch):
    """The check above would fail on a module that names another module's rule."""
    planted = tmp_path / "reporter"
    (planted / "render").mkdir(parents=True)
    (planted / "rules.py").write_text('@rule("copy-heavy", saving=x)\n', encoding="utf-8")
    (planted / "render" / "view.py").write_text('IDS = ("copy-heavy",)\n', encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", planted)
    monkeypatch.setattr(sys.modules[__name__], "RULES", {"copy-heavy": None})
    with pytest.raises(AssertionError, match="render/view.py:1"):
        test_a_rule_id_is_named_only_by_the_module_that_registers_it()


def _profile() -> Profile:
    return Profile(self_cpu_us=10_000, steps=1, ops=[
        Op("aten::conv2d", calls=10, self_cpu_us=8000, cpu_total_us=8000),
        Op("aten::relu", calls=10, self_cpu_us=2000, cpu_total_us=2000)])


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, seen by every module that reads it, for a test to add to."""
    copy = dict(RULES)
    for module in ("findings", "analyzer", "savings", "unprofiled"):
        monkeypatch.setattr(f"reporter.analyze.{module}.RULES", copy)
    for module in ("recipes", "precision"):  # the what-ifs' modules that read it
        monkeypatch.setattr(f"reporter.collect.whatif.{module}.RULES", copy)
    evidence = dict(EVIDENCE)  # the evidence classes by rule id (model.finding)
    yield copy
    EVIDENCE.clear()
    EVIDENCE.update(evidence)


@dataclasses.dataclass(kw_only=True)
class Planted(Evidence):
    basis: str
    share: float


def test_a_rule_added_in_one_place_is_detected_ranked_explains_and_is_timed(registry):
    """What adding a rule takes, in Python: one registration. The analyzer runs it, lets
    it explain a catch-all, ranks it by its own saving model, and the runner learns from
    the registry whether it has a replacement to time."""
    from reporter.analyze.findings import WhatIf
    from reporter.analyze.savings import ranked

    assert [f.rule for f in analyze(_profile())] == ["dominant-operator"]  # conv2d at 80%

    def worth(w: Worth) -> Saving:
        return Saving(w.accounts_us, 1234.0, 1000.0, 1500.0, w.step_us)

    @rule("planted", saving=worth, evidence=Planted,
          explains=lambda f, d: d.ops == ["aten::conv2d"], whatif=WhatIf("attention"),
          share=0.5)
    def planted(profile: Profile, limits: dict[str, float]) -> Finding | None:
        return Finding("planted", "high", Planted(basis="cpu", share=limits["share"]),
                       ops=["aten::relu"])

    assert "planted" in registry
    found = analyze(_profile())
    assert [f.rule for f in found] == ["planted"]  # it explains the dominant conv2d
    (f, s), = ranked(found, _profile())[0]
    assert s.saving_us == 1234.0 and s.accounts_us == pytest.approx(5000)
    assert timeable(found) == ["planted"]
    assert analyze(_profile(), {"planted": {"share": 0.7}})[0].evidence.share == 0.7


def test_the_planted_rule_did_not_stay():
    assert "planted" not in RULES and "planted" not in EVIDENCE


# A finding's evidence ----------------------------------------------------------------

def test_every_rule_returns_its_declared_evidence_and_it_reads_back_from_its_json():
    """Each rule's finding carries the evidence class it declared (``@rule(...,
    evidence=)``), and its JSON (``--json``, a stored finding) reads back as the same
    class with the same keys, in their order."""
    from test_findings import _finding_for

    for rule_id, r in RULES.items():
        assert r.evidence is not Evidence and EVIDENCE[rule_id] is r.evidence, rule_id
        f = _finding_for(rule_id)
        assert type(f.evidence) is r.evidence, (rule_id, type(f.evidence))
        keys = {k: v for k, v in f.to_dict().items() if k not in ("rule", "severity", "ops")}
        back = evidence_from(rule_id, keys)
        assert type(back) is r.evidence and back.as_dict() == keys, rule_id
        assert list(back.as_dict()) == list(keys), rule_id


def test_a_rule_must_declare_and_return_its_evidence(registry):
    def worth(w: Worth) -> Saving:
        return w.unquantified()

    with pytest.raises(ValueError, match="evidence"):
        rule("no-evidence", saving=worth, evidence=Evidence, share=0.1)(
            lambda p, limits: None)

    @rule("planted", saving=worth, evidence=Planted, share=0.5)
    def planted(profile: Profile, limits: dict[str, float]) -> Finding | None:
        # another rule's evidence, or the plain one a dict without its fields makes
        return Finding("planted", "high", {"share": 0.9})

    with pytest.raises(TypeError, match="'planted' returned Evidence, not its evidence Planted"):
        analyze(_profile())


def test_an_old_record_with_other_keys_reads_back_safely():
    """A stored finding's keys that no field declares stay (``extra``, in the JSON); one
    that lacks a field its rule's class needs reads as the plain Evidence, whose shared
    fields the stages after detection read, and its rule's own saving model then says
    the profile cannot tell."""
    ev = evidence_from("slow-copies", {"basis": "step", "share": 0.2, "gone_us": 5.0})
    assert type(ev) is Evidence and ev.share == 0.2 and ev.basis == "step"
    assert ev.as_dict() == {"basis": "step", "share": 0.2, "gone_us": 5.0}
    r = RULES["slow-copies"]
    f = Finding("slow-copies", "high", ev)
    w = Worth(f, _profile(), None, [f], 1, 10_000.0, 2000.0, None)
    assert r.saving(w).note == NOT_QUANTIFIABLE
    from test_findings import _finding_for

    known = _finding_for("sync-stall").to_dict()
    ev = evidence_from("sync-stall", {**{k: v for k, v in known.items()
                                         if k not in ("rule", "severity", "ops")},
                                      "renamed_share": 0.1})
    assert type(ev) is RULES["sync-stall"].evidence and ev.extra == {"renamed_share": 0.1}
    assert list(ev.as_dict())[-1] == "renamed_share"
    assert evidence_from("no-such-rule", {"share": 0.5}).share == 0.5


# What a float field of an evidence class holds, where its name carries no unit: each
# exception says why.
UNITLESS = {
    "threshold": "the share a rule fires above (a limit on ``share``)",
    "updates_per_step": "a count: per-tensor updates per optimizer step",
    "calls_per_step": "a count: calls a step, averaged over the steps",
    "per_step": "a count: graph breaks a step",
    "launches_per_step": "a count: kernel launches a step, averaged",
}
# Unit suffixes: times, bytes, FLOP/s, GB/s; shares are ``share`` or ``*_share``.
UNITS = ("_us", "_ms", "_s", "_b", "_fps", "_gbps")


def test_evidence_fields_that_hold_quantities_name_their_units():
    found = []
    for rule_id, cls in EVIDENCE.items():
        hints = typing.get_type_hints(cls)
        for fld in dataclasses.fields(cls):
            hint = hints[fld.name]
            if fld.name == "extra" or float not in (typing.get_args(hint) or (hint,)):
                continue
            if fld.name == "share" or fld.name.endswith("_share") \
                    or fld.name.endswith(UNITS) or fld.name in UNITLESS:
                continue
            found.append(f"{rule_id}: {cls.__name__}.{fld.name}")
    assert found == []


def test_a_field_named_for_a_unit_holds_a_number():
    """The other way round: ``*_us``, ``*_b``, ``share``... hold a number (a flag or a
    name under a unit's name reads as a quantity in the words and the JSON)."""
    found = []
    for rule_id, cls in EVIDENCE.items():
        hints = typing.get_type_hints(cls)
        for fld in dataclasses.fields(cls):
            named = fld.name == "share" or fld.name.endswith(("_share", *UNITS))
            kinds = set(typing.get_args(hints[fld.name]) or (hints[fld.name],)) - {type(None)}
            if named and not kinds <= {int, float}:
                found.append(f"{rule_id}: {cls.__name__}.{fld.name}")
    assert found == []


def test_the_unit_check_sees_a_float_without_its_unit(monkeypatch):
    @dataclasses.dataclass(kw_only=True)
    class Bad(Evidence):
        wait: float  # a time without _us

    monkeypatch.setitem(EVIDENCE, "bad", Bad)
    with pytest.raises(AssertionError, match="Bad.wait"):
        test_evidence_fields_that_hold_quantities_name_their_units()


# A device test written as a string test: "is it a GPU" is the device record's
# (reporter.model.device: is_gpu, of), decided once.
_DEVICE_TEST = re.compile(r"""startswith\(\s*["']cuda|[=!]=\s*["']cuda["']|["']cuda["']\s*[=!]=""")


def test_no_device_string_test_outside_the_device_record():
    found = [f"{path.relative_to(PACKAGE)}:{n}"
             for path in PACKAGE.rglob("*.py") if path != PACKAGE / "model" / "device.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if _DEVICE_TEST.search(line) and not line.lstrip().startswith("#")]
    assert found == []
    assert _DEVICE_TEST.search('if device.startswith("cuda"):')  # what it looks for
    assert _DEVICE_TEST.search("on_gpu = kind == 'cuda'")
