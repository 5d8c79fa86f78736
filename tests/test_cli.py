"""The command line end to end: real profiling of small models on the CPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from reporter.store import load
from conftest import FIXTURES, cli


def _report_path(result) -> Path:
    paths = [Path(line) for line in result.out.splitlines() if line.endswith(".md")]
    assert len(paths) == 1, result.out + result.err
    return paths[0]


def _main_problems(md: str) -> str:
    """The main findings (headed "Что ограничивает шаг" when near-roofline stands alone,
    "Возможные проблемы" when other work on the machine disturbed the run); "" for none."""
    parts = re.split(r"## (?:Основные проблемы|Что ограничивает шаг|Возможные проблемы)[^\n]*\n",
                     md, maxsplit=1)
    return parts[1].split("\n## ", 1)[0] if len(parts) > 1 else ""


@pytest.mark.slow
def test_bloat_names_mul_or_copy_and_the_fixed_twin_is_faster(runs):
    slow = cli("run", "--target", "transformer-bloat", "--device", "cpu", "--lang", "ru",
               "--out", runs, "--quiet")
    fast = cli("run", "--target", "transformer-bloat-fixed", "--device", "cpu", "--lang", "ru",
               "--out", runs, "--quiet")
    assert slow.code == 0 and fast.code == 0, slow.err + fast.err
    slow_md, fast_md = _report_path(slow).read_text(), _report_path(fast).read_text()
    problems = _main_problems(slow_md)
    first = problems.strip().splitlines()[0]
    # The blow-up comes first, named by its largest element-wise operator: mul or the
    # copies on a quiet machine, sum when other work stretched the reductions.
    assert re.match(r"- \*\*`aten::(mul|copy_|sum)`\*\*", first), problems
    assert "раздувание тензоров" in first, problems
    assert "`aten::mul`" not in _main_problems(fast_md)
    assert "`aten::copy_`" not in _main_problems(fast_md)
    slow_run, fast_run = load(_report_path(slow).parent), load(_report_path(fast).parent)
    assert fast_run.sections[0].throughput.median > slow_run.sections[0].throughput.median
    # The run folder holds what the store promises.
    folder = _report_path(slow).parent
    assert (folder / "run.json").is_file() and (folder / "trace-train.json.gz").is_file()
    assert "Скорость обработки" in slow_md and "samples/sec" in slow_md


def test_render_list_and_targets(stored, runs):
    root, folder = stored("cpu-transformer-bloat")
    res = cli("render", folder.name, "--runs", root, "--lang", "zh")
    assert res.code == 0, res.err
    out = Path(res.out.strip())
    assert out == folder / "report.zh.md" and "性能分析报告" in out.read_text()
    listed = cli("list", "--runs", root, "--lang", "en")
    assert listed.code == 0 and "transformer-bloat" in listed.out and "report.zh.md" in listed.out
    targets = cli("targets", "--lang", "en")
    assert targets.code == 0
    for name in ("seq2seq", "transformer-bloat-fixed", "cnn", "tensor-ops", "transformer"):
        assert re.search(rf"^{re.escape(name)}\s", targets.out, re.M)


def test_render_latest(stored):
    root, folder = stored("cpu-tensor-ops")
    res = cli("render", "latest", "--runs", root, "--lang", "ru")
    assert res.code == 0 and Path(res.out.strip()).parent == folder


def _one_line_error(res, code: int, *words: str) -> None:
    assert res.code == code, (res.code, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reporter: error"), res.err
    assert "Traceback" not in res.err
    for w in words:
        assert w in lines[0]


@pytest.mark.parametrize("argv,words", [
    (["run", "--target", "nope"], ["unknown target", "nope"]),
    (["run", "--target", "no_such_module_xyz:build"], ["cannot import", "no_such_module_xyz"]),
    (["run", "--target", "json:no_such_function"], ["has no attribute"]),
    (["run", "--target", "json:__doc__"], ["not callable"]),
    (["run", "--target", "missing/file.py:build"], ["no such file"]),
    (["run", "--lang", "fr"], ["unknown language", "fr"]),
    (["render", "latest", "--lang", "de"], ["unknown language"]),
    (["run", "--format", "docx"], ["unknown format"]),
    (["run", "--device", "tpu"], ["invalid choice"]),
    (["render", "no-such-run"], ["no run"]),
    (["frobnicate"], ["invalid choice"]),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, runs):
    res = cli(*argv, "--runs", runs) if argv[0] in ("run", "render") else cli(*argv)
    _one_line_error(res, 2, *words)
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="checks the message on a machine without CUDA")
def test_device_cuda_without_gpu(runs):
    res = cli("run", "--target", "tensor-ops", "--device", "cuda", "--runs", runs)
    _one_line_error(res, 2, "no CUDA device")


def test_user_target_from_file(tmp_path, runs):
    script = tmp_path / "mymodel.py"
    script.write_text(
        "import torch\nfrom reporter import Target\n\n"
        "def build(device='cpu', preset='default'):\n"
        "    model = torch.nn.Linear(8, 2).to(device)\n"
        "    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,)))]\n"
        "    return Target(model=model, batches=data, batch_size=4,\n"
        "                  loss=lambda out, b: torch.nn.functional.cross_entropy(out, b[1]),\n"
        "                  optimizer=torch.optim.SGD(model.parameters(), lr=0.1))\n")
    res = cli("run", "--target", f"{script}:build", "--device", "cpu", "--lang", "en",
              "--out", runs, "--quiet")
    assert res.code == 0, res.err
    md = _report_path(res).read_text()
    assert "mymodel.py:build" in md and "aten::addmm" in md


def test_target_that_raises_exits_1_and_leaves_no_run(tmp_path, runs):
    script = tmp_path / "broken.py"
    script.write_text(
        "import torch\nfrom reporter import Target\n\n"
        "class Boom(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise RuntimeError('shape mismatch in layer 3')\n\n"
        "def build():\n"
        "    return Target(model=Boom(), batches=[(torch.zeros(1),)], batch_size=1,\n"
        "                  modes=('inference',))\n")
    res = cli("run", "--target", f"{script}:build", "--device", "cpu", "--out", runs, "--quiet")
    assert res.code == 1
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "shape mismatch in layer 3" in lines[0], res.err
    assert not any(runs.iterdir()), list(runs.iterdir())


def test_target_returning_the_wrong_thing(tmp_path, runs):
    script = tmp_path / "wrong.py"
    script.write_text("def build():\n    return 42\n")
    res = cli("run", "--target", f"{script}:build", "--device", "cpu", "--out", runs, "--quiet")
    _one_line_error(res, 2, "expected reporter.Target")


@pytest.mark.parametrize("mutate,words", [
    (lambda text: text[: len(text) // 2], ["not valid JSON"]),
    (lambda text: text.replace('"format": 1', '"format": 99'), ["newer", "upgrade"]),
    (lambda text: json.dumps({"meta": {"format": 1}, "run": {"id": "x"}}), ["corrupted"]),
    (lambda text: "[]", ["no meta.format"]),
])
def test_corrupted_or_newer_run_json(stored, mutate, words):
    root, folder = stored("cpu-tensor-ops")
    path = folder / "run.json"
    path.write_text(mutate(path.read_text()))
    res = cli("render", folder, "--lang", "en")
    _one_line_error(res, 2, *words)
    assert not (folder / "report.en.md").exists()


def test_python_dash_m_entry_point():
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "reporter", "targets", "--lang", "en"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "transformer-bloat" in res.stdout


def test_an_unwritable_destination_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    res = cli("compare", FIXTURES / "runs" / "cpu-transformer-bloat",
              FIXTURES / "runs" / "cpu-transformer-bloat-fixed", "--out", blocker / "sub")
    assert res.code == 1
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reporter: error [io]:"), res.err
    assert "Traceback" not in res.err and "internal" not in res.err
