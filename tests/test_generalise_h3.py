"""The runner observes the process, it does not silently fix it (issue 66, items 1 and 3).

What the runner set (inference_mode, eval(), threads) is in the report's facts; what the
user's own path would do differently is a finding: autograd's anomaly detection left on
in training (``debug-mode``, from the profile's NaN checks or the state the runner saw in
the step; timed with the mode off), and an inference whose own forward builds autograd
state (``inference-autograd``; timed as the user's code runs it against the runner's
step). The stored run keeps the observation per section (``Section.process``), which old
runs lack and a malformed one is refused for. Planted models: tests/models/planted_h3.py.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES
from reporter.analyze.analyzer import analyze_section
from reporter.errors import BadInput

PLANTED = Path(__file__).parent / "models" / "planted_h3.py"


def _run(name: str, tmp_path: Path, attempts: int = 1):
    """A live CPU run of a planted model on one thread; with ``attempts``, run again
    while other work on the machine disturbed its timed what-ifs (the runner then drops
    them)."""
    from reporter.collect.runner import RunOptions, profile_target
    from reporter.collect.target import resolve

    spec, builder = resolve(f"{PLANTED}:{name}")
    for i in range(attempts):
        run = profile_target(spec, builder, RunOptions(
            device="cpu", windows=3, time_budget_s=0.5, warmup_steps=1, threads=1),
            tmp_path / f"{name}-{i}")
        if all(s.whatif for s in run.sections):
            break
    return run


def _findings(run, section: int = 0):
    return {f.rule: f for f in analyze_section(run.sections[section],
                                               run.target["batch_size"]).findings}


@pytest.fixture(scope="module")
def anomaly_run(tmp_path_factory):
    return _run("anomaly_on", tmp_path_factory.mktemp("h3"), attempts=3)


def _twin_share(rounds: int = 15) -> float:
    """The share of the anomaly model's training step that turning the mode off saves,
    timed here outside the runner: the twin (the same model and batch), one step with the
    mode on and one off in turn, the order reversed every other round, each after one
    untimed step of its own; the median of each."""
    from tests_models_planted_h3 import anomaly_off  # type: ignore[import-not-found]

    t = anomaly_off()
    batch = t.batches[0]

    def step() -> None:
        loss = t.loss(t.model(batch[0]), batch)
        loss.backward()
        t.optimizer.step()
        t.optimizer.zero_grad(set_to_none=True)

    def timed(on: bool) -> float:
        with torch.autograd.set_detect_anomaly(on):
            step()
            start = time.perf_counter()
            step()
            return time.perf_counter() - start

    with_, without = [], []
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(rounds):
            for on in ((True, False) if i % 2 else (False, True)):
                (with_ if on else without).append(timed(on))
    finally:
        torch.set_num_threads(saved)
    return 1 - statistics.median(without) / statistics.median(with_)


@pytest.fixture(scope="module", autouse=True)
def _planted_importable():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("tests_models_planted_h3", PLANTED)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tests_models_planted_h3"] = module
    spec.loader.exec_module(module)
    yield
    sys.modules.pop("tests_models_planted_h3", None)


@pytest.mark.slow
def test_anomaly_mode_left_on_is_a_finding_worth_the_timed_fix(anomaly_run):
    """Live: the runner saw the mode on in the step, the profile holds its NaN checks, the
    finding is timed on the model with the mode off, and its worth is within 30% of the
    saving timed here on the twin, outside the runner."""
    from reporter.analyze.savings import ranked

    section = anomaly_run.sections[0]
    assert section.process["anomaly"] is True and section.process["grad_enabled"] is True
    assert not torch.is_anomaly_enabled()  # the runner put the process back
    found = _findings(anomaly_run)
    assert "debug-mode" in found
    f = found["debug-mode"]
    assert f.evidence.checks and f.evidence.observed and f.evidence.calls >= 4
    timed = section.whatif.get("debug-mode")
    if timed is None:
        pytest.skip(f"the what-ifs were disturbed in three runs: {section.whatif_disturbance}")
    assert timed["whole_step"] and timed["fix"] == "anomaly-off"
    batch = anomaly_run.target["batch_size"]
    main, minor = ranked([f], section.profile, None, section.whatif,
                         section.throughput.step_us(batch))
    saving = dict((g.rule, s) for g, s in main + minor)["debug-mode"]
    share = saving.saving_us / saving.step_us
    twin = _twin_share()
    assert twin > 0.1, twin  # the mode costs this step a good share of its time
    assert abs(share - twin) <= 0.3 * twin, (share, twin)


@pytest.mark.slow
def test_the_checks_alone_find_the_mode_in_a_profile_without_the_runners_observation(
        anomaly_run):
    """An imported trace has no process state: the NaN checks in its backward find the
    mode all the same, and their time is the estimate (no timing to replace it)."""
    import dataclasses

    section = dataclasses.replace(anomaly_run.sections[0], process={}, whatif={})
    found = {f.rule: f for f in analyze_section(section, 64).findings}
    f = found["debug-mode"]
    assert f.evidence.checks and not f.evidence.observed
    assert 0 < f.evidence.share < 1


@pytest.mark.slow
def test_the_twin_without_the_mode_is_clean_and_the_mode_entered_inside_the_step_is_seen(
        tmp_path):
    """The twin: no finding, the state says the mode was off. The mode entered inside
    the target's forward (``with detect_anomaly():``) is not on for the process, yet the
    runner sees it in the step, and the finding stands on that."""
    clean = _run("anomaly_off", tmp_path)
    assert clean.sections[0].process["anomaly"] is False
    assert "debug-mode" not in _findings(clean)
    inside = _run("anomaly_in_step", tmp_path)
    assert inside.sections[0].process["anomaly"] is True
    f = _findings(inside)["debug-mode"]
    assert f.evidence.observed


def test_anomaly_off_keeps_the_mode_off_even_inside_detect_anomaly():
    """The what-if's fix: the mode off for the block, whether the process set it or the
    step enters it itself; the mode and torch's function put back after."""
    from reporter.collect.whatif import anomaly_off

    orig = torch.set_anomaly_enabled
    with torch.autograd.set_detect_anomaly(True):
        with anomaly_off():
            assert not torch.is_anomaly_enabled()
            with torch.autograd.detect_anomaly():
                assert not torch.is_anomaly_enabled()
            assert not torch.is_anomaly_enabled()
        assert torch.is_anomaly_enabled()
    assert torch.set_anomaly_enabled is orig and not torch.is_anomaly_enabled()


@pytest.fixture(scope="module")
def inference_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("h3i")
    return _run("inference_autograd", root, attempts=3), _run("inference_clean", root)


@pytest.mark.slow
def test_inference_that_builds_autograd_state_is_a_finding(inference_runs):
    """Live: the runner's probe ran the forward as the target handed it over (grad mode
    on, 9 modules in training mode, 2 of them dropout): its output holds a graph that
    saved megabytes of activations; the twin (eval(), frozen parameters) saves none and
    has no finding. Where the timing was not disturbed, the user's step is the longer."""
    built, clean = inference_runs
    p = built.sections[0].process
    assert p["runner_inference_mode"] and p["runner_eval"] and p["grad_enabled"]
    assert p["probe_grad_fn"] is True and p["probe_saved_b"] >= 1 << 20
    assert p["training_modules"] == 9 and p["training_layers"] == 2
    f = _findings(built)["inference-autograd"]
    assert f.evidence.saved_b == p["probe_saved_b"] and f.evidence.training_layers == 2
    q = clean.sections[0].process
    assert q["probe_grad_fn"] is False and q["probe_saved_b"] == 0
    assert q["training_modules"] == 0
    assert "inference-autograd" not in _findings(clean)
    timed = built.sections[0].whatif.get("inference-autograd")
    if timed is not None:
        assert timed["step_is_fixed"] and timed["after_ms"] < timed["before_ms"]


@pytest.mark.slow
def test_the_facts_say_what_the_runner_set_in_every_language(inference_runs, tmp_path):
    """The facts say, for a run that recorded the process: the threads --threads set, and
    that the user's own forward was run once and built autograd state (or none)."""
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown

    built, clean = inference_runs
    words = {
        "en": ("Set by reporter for this run: torch's intra-op threads, 1 (`--threads`).",
               "it builds autograd state, which this profile does not show",
               "it builds no autograd state", "9 of the model's modules were in training"),
        "ru": ("Выставлено reporter на время этого запуска: число потоков torch для "
               "intra-op параллелизма — 1 (`--threads`).",
               "он строит состояние autograd, которого в этом профиле не видно",
               "состояния autograd он не строит", "9 её модулей были в режиме обучения"),
        "zh": ("reporter 为本次运行设置：torch 的 intra-op 线程数为 1（`--threads`）。",
               "它会构建 autograd 状态，而本 profile 中看不到这部分",
               "它不构建任何 autograd 状态", "有 9 个模块处于训练模式"),
    }
    for lang, (threads, graph, nothing, modes) in words.items():
        text = render_markdown(report_view(built, lang))
        assert threads in text and graph in text and modes in text, (lang, text[:3000])
        other = render_markdown(report_view(clean, lang))
        assert nothing in other and graph not in other, (lang, other[:3000])


def _stored(tmp_path: Path, edit) -> Path:
    """The fixture run cpu-transformer copied, its run.json edited by ``edit``."""
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "cpu-transformer", folder)
    doc = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    edit(doc["run"]["sections"][0])
    (folder / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def test_a_run_stored_without_the_process_state_renders_as_before(tmp_path):
    """Runs stored before the process state existed hold no ``process``: they load with
    it empty and render byte-identically to a run whose state is empty."""
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown
    from reporter.store import load

    def drop(section):
        section.pop("process", None)

    def empty(section):
        section["process"] = {}

    old, new = load(_stored(tmp_path / "a", drop)), load(_stored(tmp_path / "b", empty))
    assert old.sections[0].process == {} and old.sections[0].profile.process == {}
    for lang in ("en", "ru", "zh"):
        assert render_markdown(report_view(old, lang)) == render_markdown(
            report_view(new, lang))


@pytest.mark.parametrize("process, words", [
    ("yes", "process: expected an object"),
    ({"threads": "2"}, "process.threads: expected an integer"),
    ({"anomaly": 1}, "process.anomaly: expected bool"),
    ({"threads": -3}, "process.threads: -3 is not between 0"),
    ({"probe_saved_b": 1 << 62}, "process.probe_saved_b"),
    ({"default_dtype": "int7"}, "process.default_dtype: 'int7' is none of"),
])
def test_a_stored_run_with_a_malformed_process_state_is_refused_in_one_line(
        tmp_path, process, words):
    from reporter.store import load

    def put(section):
        section["process"] = process

    with pytest.raises(BadInput) as info:
        load(_stored(tmp_path, put))
    message = str(info.value)
    assert words in message and "\n" not in message, message


def test_the_process_state_reaches_the_rules_and_the_json_keeps_it_out_of_the_profile(
        tmp_path):
    """analyze_section copies the section's state onto the Profile for the rules (as it
    does the host's faults); the stored profile does not hold it twice."""
    from reporter.store import load

    state = {"runner_inference_mode": True, "probe_grad_fn": True, "probe_saved_b": 4 << 20,
             "grad_enabled": True, "training_modules": 3, "training_layers": 1,
             "threads": 2, "runner_threads": False, "default_dtype": "float32"}

    def put(section):
        section["process"] = state

    run = load(_stored(tmp_path, put))
    section = run.sections[0]
    assert section.process == state
    assert "process" not in section.profile.to_dict()
    assert section.to_dict()["process"] == state
    found = {f.rule for f in analyze_section(section, run.target["batch_size"]).findings}
    assert "inference-autograd" in found
