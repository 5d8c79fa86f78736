"""The report's own sentence choices (reporter.render.sentences.REPORT) read typed fields:
each view carries the facts its choices test as a frozen dataclass
(reporter.render.choices), and each choice reads them through a typed getter, never a
view's key by name, so that mypy checks every field a choice reads (issue #67, item 2)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reporter.render import sentences
from reporter.render.sentences import REPORT

SOURCE = Path(sentences.__file__)
ROOT = SOURCE.parents[2]


def _getters() -> set[str]:
    """The module's typed getters: carried(Cls)'s, and worth."""
    return {name for name, value in vars(sentences).items()
            if getattr(value, "__qualname__", "") == "carried.<locals>.get"
            or value is sentences.worth}


def _report_dict() -> ast.Dict:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == "REPORT" and isinstance(node.value, ast.Dict)):
            return node.value
    raise AssertionError("no REPORT = {...} in render/sentences.py")


def test_no_choice_reads_a_view_by_a_string_path():
    """No dotted path (``of("tf32.override")``), key (``f["worth"]``, ``v.get("traces")``,
    ``"x" in f``) or getattr: a misspelled or removed key read None and changed the
    sentence silently, where mypy could not see it."""
    text = SOURCE.read_text(encoding="utf-8")
    assert 'of("' not in text and "def of(" not in text
    getters = _getters()
    assert {"run", "section", "busy", "breakdown", "compiled", "finding", "worth",
            "mode"} <= getters
    wrong = []
    for lam in (n for n in ast.walk(_report_dict()) if isinstance(n, ast.Lambda)):
        names = {a.arg for a in lam.args.args}
        parents = {id(child): node for node in ast.walk(lam.body)
                   for child in ast.iter_child_nodes(node)}
        for node in ast.walk(lam.body):
            line = ast.unparse(lam)
            if isinstance(node, ast.Subscript) or (
                    isinstance(node, ast.Attribute) and node.attr == "get"):
                wrong.append(f"reads by key: {line}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
                wrong.append(f"getattr: {line}")
            if isinstance(node, ast.Name) and node.id in names:
                # the value a sentence is about goes to a typed getter, and nowhere else
                parent = parents.get(id(node))
                if not (isinstance(parent, ast.Call) and parent.args == [node]
                        and getattr(parent.func, "id", None) in getters):
                    wrong.append(f"reads {node.id} but through a typed getter: {line}")
    assert wrong == []


@pytest.mark.parametrize("slot", sorted(REPORT))
def test_a_view_without_its_typed_choices_fails_not_a_sentence_changed(slot):
    """A value that carries no choices of the kind (a hand-made dict, a view that lost
    them) stops the render with a TypeError: it never reads as "not said"."""
    with pytest.raises(TypeError, match="a report sentence about"):
        REPORT[slot].pick({})


def test_mypy_names_a_misspelled_field_a_choice_reads(tmp_path):
    """A copy of render/sentences.py that reads a field no typed choices have, and
    compares a Literal field with a value it cannot hold: mypy names both lines (the
    module is checked strictly: pyproject.toml). About 2 s with a fresh cache."""
    if shutil.which("mypy") is None and subprocess.run(
            [sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode:
        pytest.skip("mypy is not installed")
    text = SOURCE.read_text(encoding="utf-8")
    good = 'lambda s: section(s).interval_high)'
    same = 'path_row(r).group == "host"'
    assert good in text and same in text
    shadow = tmp_path / "sentences.py"
    shadow.write_text(text.replace(good, 'lambda s: section(s).interval_hihg)')
                      .replace(same, 'path_row(r).group == "hots"'), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), "--shadow-file", str(SOURCE), str(shadow),
         str(SOURCE)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert '"SectionChoices" has no attribute "interval_hihg"' in out, out
    assert "Non-overlapping equality check" in out and "'hots'" in out, out
