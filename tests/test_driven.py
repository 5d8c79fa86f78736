"""The report says how reporter drove the step of a live run (issue 66, item 3: the
runner observes, it does not silently fix): inference under inference_mode() and eval(),
training with its own zero_grad(set_to_none=True); an imported profile ran as its own
code did, and says nothing of the kind."""

from __future__ import annotations

import shutil

import pytest

from conftest import FIXTURES, cli

SAYS = {"en": "Step as reporter ran it", "ru": "Шаг в том виде, как его выполнял reporter",
        "zh": "reporter 执行单步的方式"}


@pytest.mark.parametrize("lang", sorted(SAYS))
def test_a_live_run_says_how_its_steps_ran_and_an_import_does_not(tmp_path, lang):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "cpu-transformer", run)
    assert cli("render", run, "--lang", lang).code == 0
    lines = [x for x in (run / f"report.{lang}.md").read_text().splitlines()
             if x.startswith(f"- {SAYS[lang]}")]
    assert len(lines) == 2  # training, then inference
    assert "zero_grad(set_to_none=True)" in lines[0] and "inference_mode()" in lines[1]
    table = FIXTURES / "seeds" / "001_441339d57ff3fab2.txt"
    res = cli("analyze", table, "--lang", lang, "--out", tmp_path / "out")
    assert res.code == 0, res.err
    (report,) = (tmp_path / "out").glob(f"*.{lang}.md")
    assert SAYS[lang] not in report.read_text()
