"""What-ifs on the model's own step (issue #27): the fix applied to the model itself and
its whole step timed with and without it, in turn; the saving read from the share of that
step it saved. Dropout (every dropout at p=0), and the target's own fixes
(Target.fixes)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from reporter.analyze.analyzer import analyze_section
from reporter.analyze.savings import estimate, kept_us
from reporter.collect.target import Target
from reporter.collect.whatif import F_DROPOUTS, TORCH_DROPOUTS, dropout_off, steps_in_turn
from reporter.model.finding import NOT_FASTER, Finding


def _originals():
    return ({n: getattr(F, n) for n in F_DROPOUTS} | {f"torch.{n}": getattr(torch, n)
                                                       for n in TORCH_DROPOUTS}
            | {"sdpa": F.scaled_dot_product_attention})


def _now():
    return ({n: getattr(F, n) for n in F_DROPOUTS} | {f"torch.{n}": getattr(torch, n)
                                                       for n in TORCH_DROPOUTS}
            | {"sdpa": F.scaled_dot_product_attention})


def test_dropout_off_makes_every_kind_of_dropout_do_nothing_and_counts_them():
    """Modules, the functional called directly, torch's own, the one inside
    nn.MultiheadAttention and SDPA's dropout_p: inside the block each returns what p=0
    gives (its input; SDPA without dropout), and the calls that would have drawn a mask
    are counted; those that would not (p=0, eval) are not."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, 16)
    mha = nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True).train()
    q = torch.randn(2, 2, 8, 4)
    counted = [0]
    with dropout_off(counted):
        assert torch.equal(nn.Dropout(0.5).train()(x), x)
        assert F.dropout(x, 0.3) is x and F.dropout(x, p=0.3, training=True) is x
        assert torch.dropout(x, 0.3, True) is x
        assert F.dropout(x, 0.0) is x and F.dropout(x, 0.3, training=False) is x  # not counted
        assert F.alpha_dropout(x, 0.3) is x  # training defaults to False there: not counted
        out, _ = mha(x, x, x, need_weights=False)
        with torch.no_grad():
            eval_out, _ = mha.eval()(x, x, x, need_weights=False)
        mha.train()
        sdpa = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    # the module, the two functional calls, torch's, the attention's, SDPA's
    assert counted[0] == 6
    assert torch.allclose(out, eval_out, atol=1e-6)  # no dropout inside the attention
    assert torch.allclose(sdpa, F.scaled_dot_product_attention(q, q, q), atol=1e-6)
    # counted too, by position as by keyword
    counted = [0]
    with dropout_off(counted):
        F.scaled_dot_product_attention(q, q, q, None, 0.5)
        F.scaled_dot_product_attention(q, q, q, None, 0.0)
    assert counted[0] == 1
    # outside, dropout is dropout again
    assert not torch.equal(F.dropout(torch.ones(1000), 0.5), torch.ones(1000))


def test_dropout_off_puts_everything_back_even_when_the_step_raises():
    before = _originals()
    with pytest.raises(RuntimeError, match="the step broke"):
        with dropout_off():
            assert F.dropout is not before["dropout"]
            raise RuntimeError("the step broke")
    assert _now() == before


def test_steps_in_turn_times_each_variant_and_alternates_them():
    """One step of each a round, the fixed one under its context, each after an untimed
    step of its own, reversed every other round, at least seven rounds."""
    from reporter.collect import device as devices

    order: list[str] = []
    state = {"fixed": False}

    class Fix:
        def __enter__(self):
            state["fixed"] = True

        def __exit__(self, *exc):
            state["fixed"] = False

    def step():
        order.append("fixed" if state["fixed"] else "as is")
        # the fixed step sleeps less: it must come out faster
        torch.ones(1)
        import time
        time.sleep(0.001 if state["fixed"] else 0.004)

    as_is, fixed = steps_in_turn(step, Fix, devices.get("cpu"), budget_s=0.0)
    assert fixed < as_is
    timed = order[4:]  # after two warm-up steps of each
    assert len(timed) >= 28 and timed.count("fixed") == timed.count("as is")
    # each timed step after an untimed one of its own variant
    assert timed[:8] == ["as is"] * 2 + ["fixed"] * 4 + ["as is"] * 2


def _mlp(p: float, modes=("train",)) -> Target:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Dropout(p), nn.Linear(64, 64),
                          nn.GELU(), nn.Dropout(p), nn.Linear(64, 4))
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(256, 64, generator=gen), torch.randint(0, 4, (256,), generator=gen))
               for _ in range(2)]
    return Target(model=model, batches=batches, batch_size=256, modes=modes,
                  loss=lambda out, batch: F.cross_entropy(out, batch[1]),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))


class _Scripted(nn.Module):
    """Dropout where no patch of Python's functions reaches: a TorchScript module."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
        self.drop = torch.jit.script(nn.Dropout(0.5))

    def forward(self, x):
        return self.body[2](self.drop(self.body[1](self.body[0](x))))


def _run(builder, tmp_path):
    from reporter.collect.runner import RunOptions, profile_target

    return profile_target("dropout-test", builder, RunOptions(
        device="cpu", windows=3, time_budget_s=0.3, warmup_steps=1), tmp_path)


@pytest.fixture(scope="module")
def dropout_run(tmp_path_factory):
    """An MLP with dropout at p=0.5 on its two hidden activations, profiled in training
    and then in inference (which leaves the model in eval mode)."""
    for _ in range(3):  # a busy moment's timings are dropped (runner._whatif): again
        run = _run(lambda device="cpu", preset="default": _mlp(0.5, ("train", "inference")),
                   tmp_path_factory.mktemp("dropout"))
        d = run.sections[0].whatif_disturbance
        if d is None or not d.disturbed:
            return run
    pytest.skip("the machine was busy while the what-ifs were timed, in three runs")


@pytest.mark.slow
def test_the_runner_times_the_models_step_with_its_dropout_off(dropout_run):
    """Live: the training section's dropout finding is timed on the model itself (its
    whole step with and without dropout, in turn, twice), in training mode although the
    inference section, profiled after it, left the model in eval mode; the saving is the
    share of the step saved, of the step timed without the profiler."""
    from reporter.analyze.savings import ranked

    train = dropout_run.sections[0]
    timed = train.whatif.get("dropout-cost")
    assert timed is not None, (train.whatif, train.whatif_note)
    assert timed["whole_step"] and timed["calls"] == 2
    assert len(timed["saved_share"]) == 2  # timed twice
    # dropout at p=0.5 on every hidden activation: the step without it is shorter
    assert timed["after_ms"] < timed["before_ms"]
    assert "dropout-cost" not in dropout_run.sections[1].whatif  # inference: none ran
    batch = dropout_run.target["batch_size"]
    f = next(f for f in analyze_section(train, batch).findings if f.rule == "dropout-cost")
    assert f.evidence.timed_off
    real_step_us = train.throughput.step_us(batch)
    main, minor = ranked([f], train.profile, None, train.whatif, real_step_us)
    s = dict((g.rule, s) for g, s in main + minor)["dropout-cost"]
    assert s.measured is not None and s.measured["whole_step"]
    assert s.step_us == pytest.approx(real_step_us)
    assert s.saving_us == pytest.approx(sum(timed["saved_share"]) / 2 * real_step_us)


def test_the_report_says_the_step_was_timed_with_dropout_off_in_every_language(
        dropout_run, tmp_path):
    """The worth line gives the two steps and the share they differ by, and the advice
    says the saving is of dropout off altogether, in en, ru and zh; the stored timing is
    read back and checked."""
    from reporter.errors import BadInput
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown
    from reporter.store import load, run_to_json

    run = dataclasses.replace(dropout_run)
    run.sections = [dataclasses.replace(run.sections[0], whatif={"dropout-cost": {
        "before_ms": 3.0, "after_ms": 1.74, "saved_ms": [1.26, 1.26],
        "saved_share": [0.42, 0.42], "whole_step": True, "fix": "dropout-off",
        "calls": 2}})]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(run_to_json(run))
    words = {"en": ("with every dropout off", "3.00 ms → 1.74 ms, 42.0% shorter"),
             "ru": ("с отключением всех слоёв dropout",
                    "3,00 мс → 1,74 мс, шаг короче на 42,0 %"),
             "zh": ("关闭全部 dropout", "3.00 ms → 1.74 ms，单步缩短 42.0%")}
    loaded = load(folder)
    for lang, texts in words.items():
        said = render_markdown(report_view(loaded, lang)).replace("\u00a0", " ")
        for text in texts:
            assert text in said, (lang, text)
    doc = json.loads((folder / "run.json").read_text())
    doc["run"]["sections"][0]["whatif"]["dropout-cost"]["saved_share"] = ["most", 0.42]
    (folder / "run.json").write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"whatif\.dropout-cost\.saved_share\[0\]"):
        load(folder)


def test_the_report_says_what_faults_the_timing_lacked_in_every_language(dropout_run):
    """A whole-step timing that took no page fault where the step had taken faults worth
    a tenth of it before the profiler (2 us each): the worth line says the fix takes the
    finding's part of them too, in en, ru and zh."""
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown

    run = dataclasses.replace(dropout_run)
    section = run.sections[0]
    step_us = section.throughput.step_us(run.target["batch_size"])
    cost = {**(section.profiler_cost or {}), "unprofiled_minor_faults": step_us / 20,
            "unprofiled_major_faults": 0.0, "fault_us": 2.0, "unprofiled_step_us": step_us}
    run.sections = [dataclasses.replace(section, profiler_cost=cost, whatif={
        "dropout-cost": {"before_ms": 3.0, "after_ms": 1.74, "saved_share": [0.42],
                         "whole_step": True, "fix": "dropout-off", "calls": 2,
                         "faults": [0.0, 0.0]}})]
    words = {"en": "which the step took before the profiler ran but not in these timings",
             "ru": "до запуска профайлера шаг тратил время на эти page faults",
             "zh": "运行 profiler 之前的单步有这些缺页"}
    for lang, text in words.items():
        said = render_markdown(report_view(run, lang)).replace("\u00a0", " ")
        assert text in said, lang


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit
def test_a_dropout_the_patch_cannot_reach_is_not_timed(tmp_path):
    """A TorchScript module's dropout runs in ATen straight from the script: with no call
    turned off (fewer than the profile recorded) the step without dropout is not the fix,
    and the finding keeps its estimate."""
    from reporter.collect.whatif import dropout_step

    def builder(device="cpu", preset="default"):
        torch.manual_seed(0)
        model = _Scripted()
        return dataclasses.replace(_mlp(0.5), model=model,
                                   optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))
    run = _run(builder, tmp_path)
    train = run.sections[0]
    assert "dropout-cost" not in train.whatif
    rules = {f.rule for f in analyze_section(train, 256).findings}
    assert "dropout-cost" in rules  # found from the profile, estimated as before

    # and the recipe says so itself, on a stepper of the same model
    from reporter.collect.runner import _Stepper
    target = builder()
    assert dropout_step(train, "cpu", _Stepper(target, "train", "cpu"), 10) is None


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, as Dynamo imports it
def test_a_compiled_model_is_not_timed():
    """torch.compile's graphs hold their dropouts: patching Python's functions would turn
    none of them off (and could recompile), so the finding keeps its estimate."""
    from reporter.collect.runner import _Stepper
    from reporter.collect.whatif import dropout_step

    target = _mlp(0.5)
    target = dataclasses.replace(target, model=torch.compile(target.model))
    assert dropout_step(None, "cpu", _Stepper(target, "train", "cpu"), 10) is None


def _finding(calls: int = 2) -> Finding:
    return Finding("dropout-cost", "high", {"basis": "cpu", "share": 0.3, "threshold": 0.05,
                                            "op": "aten::dropout", "op_time_us": 3000.0,
                                            "calls": calls, "backward_us": 0.0},
                   ops=["aten::dropout", "aten::bernoulli_"])


def test_a_whole_step_timing_is_a_share_of_the_step_timed_without_the_profiler():
    """The what-if's own steps (3 ms -> 2 ms) were timed at another moment than the step
    timed without the profiler (10 ms): the saving is the share saved (a third) of the
    latter, the fixed step keeps the rest, and two timings apart give a range around
    their mean."""
    from reporter.model.profile import Op, Profile

    profile = Profile(ops=[Op("aten::dropout", self_cpu_us=3000.0, cpu_total_us=3000.0,
                              calls=2)], self_cpu_us=10_000.0, steps=1)
    f = _finding()
    one = {"before_ms": 3.0, "after_ms": 2.0, "whole_step": True, "saved_share": [1 / 3]}
    s = estimate(f, profile, None, [f], one, real_step_us=10_000.0)
    assert s.step_us == 10_000.0
    assert s.saving_us == pytest.approx(10_000 / 3) and s.low_us == s.high_us == s.saving_us
    assert s.measured["saved_share"] == pytest.approx(1 / 3)
    assert kept_us(f, None, s) == pytest.approx(10_000 * 2 / 3)  # the step less the saving
    # the two timings of one run disagree: the mean, within half their difference
    two = dict(one, saved_share=[0.2, 0.4])
    s = estimate(f, profile, None, [f], two, real_step_us=10_000.0)
    assert s.saving_us == pytest.approx(3000) and (s.low_us, s.high_us) == pytest.approx(
        (2000, 4000))
    assert (s.measured["saved_first_ms"], s.measured["saved_second_ms"]) == pytest.approx(
        (2.0, 4.0))
    # a step no faster without dropout: not a main problem, and the report says why
    none = dict(one, after_ms=3.1, saved_share=[-0.03])
    s = estimate(f, profile, None, [f], none, real_step_us=10_000.0)
    assert s.saving_us == 0 and s.note == NOT_FASTER



def test_faults_the_whole_step_timing_lacked_are_set_against_the_step_before_the_profiler():
    """The step took 1,000 page faults a step before the profiler ran (2 us each: 2 ms of
    its 10 ms), and none in its timing after it (the process kept its memory): the share
    saved is of the step without them (8 ms), and the fix takes the finding's part of
    them with it (dropout allocates a quarter of the step's bytes: 0.5 ms). Where the
    timing took them too, or on a GPU, the share of the whole step, as before."""
    from reporter.model.profile import Op, Profile

    def profile() -> Profile:
        p = Profile(ops=[Op("aten::dropout", self_cpu_us=3000.0, cpu_total_us=3000.0,
                            calls=2, self_cpu_mem_b=1000),
                         Op("aten::addmm", self_cpu_us=5000.0, cpu_total_us=5000.0,
                            calls=2, self_cpu_mem_b=3000)],
                    self_cpu_us=10_000.0, steps=1)
        p.host_faults = {"faults": 1000.0, "fault_us": 2.0, "step_us": 10_000.0}
        return p
    f = _finding()
    hidden = {"before_ms": 3.0, "after_ms": 2.0, "whole_step": True,
              "saved_share": [1 / 3], "faults": [0.0, 0.0]}
    s = estimate(f, profile(), None, [f], hidden, real_step_us=10_000.0)
    assert s.saving_us == pytest.approx(8_000 / 3 + 500)
    assert s.measured["faults_ms"] == pytest.approx(0.5)
    assert kept_us(f, None, s) == pytest.approx(8_000 * 2 / 3 + 1_500)
    for counted in ([1000.0, 0.0], [1500.0, 10.0]):  # the timing took them: nothing hidden
        s = estimate(f, profile(), None, [f], dict(hidden, faults=counted),
                     real_step_us=10_000.0)
        assert s.saving_us == pytest.approx(10_000 / 3) and "faults_ms" not in s.measured
    half = estimate(f, profile(), None, [f], dict(hidden, faults=[500.0, 0.0]),
                    real_step_us=10_000.0)
    assert half.saving_us == pytest.approx(9_000 / 3 + 250)


def test_a_targets_own_fixes_are_checked():
    """Target.fixes maps finding ids to functions; anything else is one line (bad-target)."""
    import contextlib

    from reporter.errors import BadInput

    ok = dataclasses.replace(_mlp(0.0), fixes={"dropout-cost": contextlib.nullcontext})
    ok.check("t")
    for fixes, said in (({"no-such-finding": contextlib.nullcontext}, "not a finding"),
                        ({"dropout-cost": 3}, "must be a function"),
                        (["dropout-cost"], "must map finding ids")):
        with pytest.raises(BadInput, match=said) as exc:
            dataclasses.replace(_mlp(0.0), fixes=fixes).check("t")
        assert exc.value.error_id == "bad-target" and "\n" not in str(exc.value)


@pytest.mark.slow
def test_a_targets_own_fix_is_timed_through_the_runner(tmp_path):
    """Live: a target that gives its own fix for a finding has it timed on its step, in
    place of reporter's recipe (here: its dropout removed by the target's own switch), and
    the run says whose fix it was."""
    import contextlib

    def builder(device="cpu", preset="default"):
        target = _mlp(0.5)
        drops = [m for m in target.model.modules() if isinstance(m, nn.Dropout)]

        @contextlib.contextmanager
        def no_dropout():
            for m in drops:
                m.p = 0.0
            try:
                yield
            finally:
                for m in drops:
                    m.p = 0.5
        return dataclasses.replace(target, fixes={"dropout-cost": no_dropout})
    for _ in range(3):  # a busy moment's timings are dropped: again
        run = _run(builder, tmp_path / str(_))
        d = run.sections[0].whatif_disturbance
        if d is None or not d.disturbed:
            break
    else:
        pytest.skip("the machine was busy while the what-ifs were timed, in three runs")
    timed = run.sections[0].whatif["dropout-cost"]
    assert timed["fix"] == "target" and timed["whole_step"]
    assert timed["after_ms"] < timed["before_ms"]
    f = next(f for f in analyze_section(run.sections[0], 256).findings
             if f.rule == "dropout-cost")
    assert f.evidence.timed_off is False  # not reporter's "every dropout off"


def test_a_targets_own_fix_that_raises_leaves_the_run_whole(tmp_path):
    """Live: the target's fix raising inside the timed step is that what-if's failure, one
    line in the run (whatif_failed), not the run's: the profile and the estimate stand."""
    import contextlib

    @contextlib.contextmanager
    def broken():
        raise RuntimeError("this fix needs a GPU")
        yield  # (never reached: it makes this a generator)

    def builder(device="cpu", preset="default"):
        return dataclasses.replace(_mlp(0.5), fixes={"dropout-cost": broken})
    run = _run(builder, tmp_path)
    section = run.sections[0]
    assert "dropout-cost" not in section.whatif
    assert section.whatif_failed["dropout-cost"] == {
        "error": "RuntimeError: this fix needs a GPU"}
    rules = {f.rule for f in analyze_section(section, 256).findings}
    assert "dropout-cost" in rules  # estimated from the profile, as before


def test_a_step_that_saved_more_than_the_findings_operators_take_says_so(dropout_run):
    """Removing dropout can shorten the step by more than its operators' own time (what
    else the fix changes in the step is in the measurement): the worth line then says the
    operators account for less than the step saved, in every language; not otherwise."""
    from reporter.pipeline import report_view
    from reporter.render.report import render_markdown

    words = {"en": "less than the step saved", "ru": "меньше, чем сократился шаг",
             "zh": "少于单步实测缩短的时间"}
    for share, said in ((0.95, True), (0.01, False)):
        run = dataclasses.replace(dropout_run)
        run.sections = [dataclasses.replace(run.sections[0], whatif={"dropout-cost": {
            "before_ms": 3.0, "after_ms": 3.0 * (1 - share), "saved_share": [share],
            "whole_step": True, "fix": "dropout-off"}})]
        for lang, text in words.items():
            assert (text in render_markdown(report_view(run, lang))) is said, (lang, share)


def test_single_precision_runs_the_step_in_float32_and_puts_everything_back():
    """fp64-compute's what-if: inside the block the model's parameters, the optimizer's
    state, each batch and the default dtype are float32 and a step runs; after it the
    same parameter objects hold their float64 values as before, the optimizer its float64
    state, the default dtype float64 again, the batches as they were."""
    from reporter.collect.runner import _Stepper
    from reporter.collect.whatif import single_precision

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        batches = [(torch.randn(16, 8), torch.randint(0, 2, (16,)))]
        target = Target(model=model, batches=batches, batch_size=16,
                        loss=lambda out, b: F.cross_entropy(out, b[1]), optimizer=opt)
        step = _Stepper(target, "train", "cpu")
        step()  # the optimizer's state exists, in float64
        params = list(model.parameters())
        before = [p.detach().clone() for p in params]
        state = {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in params}
        seen: list[torch.dtype] = []
        hook = model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
        with single_precision(step):
            assert all(p.dtype == torch.float32 for p in model.parameters())
            assert model[1].running_mean.dtype == torch.float32
            assert torch.get_default_dtype() == torch.float32
            step()
        hook.remove()
        assert seen == [torch.float32]
        assert list(model.parameters()) == params  # the same objects, the optimizer's
        assert all(p.dtype == torch.float64 and p.grad is None for p in params)
        assert all(torch.equal(p, b) for p, b in zip(params, before))
        assert all(torch.equal(opt.state[p][k], v) and opt.state[p][k].dtype == v.dtype
                   for p in params for k, v in state[id(p)].items())
        assert torch.get_default_dtype() == torch.float64
        assert batches[0][0].dtype == torch.float64 and step.cast is None
        step()  # and the model trains on in float64
    finally:
        torch.set_default_dtype(default)
