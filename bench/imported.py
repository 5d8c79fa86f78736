"""Benchmark: do the findings read from a user's own profiles come true?

Some findings are seen only where the user profiled their own loop: the runner drives
its step itself (``zero_grad(set_to_none=True)``, for one), so bench/diagnosis.py, which
profiles targets with the runner, cannot plant them. Here each pair is a user's training
loop with one mistake and the same loop with the finding's advice applied
(tests/models/planted_*.py). The baseline is profiled as the user would (torch.profiler
with a schedule, in a fresh process), its Chrome trace read by reporter as ``reporter
analyze`` reads it, and the finding's predicted saving (its share of the profiled step,
and the range the report prints) is set against the saving measured without the
profiler, two ways, as bench/diagnosis.py measures (and judged by its ``judge``):

- alone: the baseline and the fix each stepped in a fresh process of its own (pairs of
  processes, the order swapped each pair): 1 - the fix's median step over the baseline's;
- interleaved: both loops in one fresh process, stepped in alternation (ROUNDS rounds of
  about ROUND_S seconds a side, the order swapped each round): 1 - the median of the
  fix's steps over the baseline's.

Each is the mean over ``--processes`` (pairs of) processes, with its noise: the larger of
half the width of the 95% interval of that mean and half the interquartile range of a
process's paired rounds. Children run on one thread fewer than the machine's cores and,
unless ``--malloc default``, with glibc's malloc holding the memory it frees (bench/
diagnosis.py's ``HELD``): with glibc's defaults the fixed loop's freshly allocated
gradients can fault on every step (the finding says so on the CPU), and what is judged
here is the fix's own work. Not a test: run it by hand.

    .venv/bin/python bench/imported.py [--processes 3] [--malloc held|default] [--only NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from diagnosis import HELD, interval, judge  # noqa: E402

MODELS = ROOT / "tests" / "models"
# name: (module file, its loop builder's keyword for the baseline and the fix, the rule)
PAIRS: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {
    "zero_grad": ("planted_zero_grad.py", {"set_to_none": False}, {"set_to_none": True},
                  "zero-grad-fill"),
}
ROUNDS = 15
ROUND_S = 0.2
WARMUP = 5


def _module(name: str) -> Any:
    """The planted module of pair ``name``."""
    path = PAIRS[name][0]
    spec = importlib.util.spec_from_file_location(path.removesuffix(".py"), MODELS / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _loop(name: str, fixed: bool) -> Callable[[], None]:
    """The pair's loop (the baseline, or the fix), warmed up."""
    _, base, fix, _ = PAIRS[name]
    step: Callable[[], None] = _module(name).loop(**(fix if fixed else base))
    for _ in range(WARMUP):
        step()
    return step


def _steps_for(step: Callable[[], None], seconds: float) -> int:
    t = time.perf_counter()
    step()
    return max(1, int(seconds / max(time.perf_counter() - t, 1e-6)))


def _window(step: Callable[[], None], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t) / n


def child_profile(name: str) -> dict[str, Any]:
    """The baseline profiled as a user does, read as ``reporter analyze`` reads it: the
    rule's predicted share of the profiled step and its printed range (as shares)."""
    from reporter.pipeline import analysis_json

    planted = _module(name)  # it also profiles and exports, as the user would
    with tempfile.TemporaryDirectory() as scratch:
        trace, _ = planted.profiled(planted.loop(**PAIRS[name][1]), Path(scratch), name)
        found = {f["rule"]: f for f in
                 analysis_json(str(trace), Path(scratch))["profiles"][0]["findings"]}
    f = found.get(PAIRS[name][3])
    if f is None or not f.get("saving_ms"):
        return {"predicted": 0.0, "low": 0.0, "high": 0.0, "fired": sorted(found)}
    per_ms = f["saving_share"] / f["saving_ms"]  # the share of one ms of the step
    return {"predicted": f["saving_share"], "low": f["saving_low"] * per_ms,
            "high": f["saving_high"] * per_ms, "fired": sorted(found)}


def child_interleave(name: str) -> dict[str, Any]:
    """Both loops in this process, in alternation: the fix's saving and its noise."""
    base, fix = _loop(name, False), _loop(name, True)
    n_base, n_fix = _steps_for(base, ROUND_S), _steps_for(fix, ROUND_S)
    tb: list[float] = []
    tf: list[float] = []
    for r in range(ROUNDS):
        order = ((base, n_base, tb), (fix, n_fix, tf))
        for step, n, into in (order if r % 2 else order[::-1]):
            into.append(_window(step, n))
    paired = sorted(1 - f / b for b, f in zip(tb, tf))
    q = statistics.quantiles(paired, n=4)
    return {"saving": 1 - statistics.median(tf) / statistics.median(tb),
            "noise": (q[2] - q[0]) / 2}


def child_alone(name: str, fixed: bool) -> dict[str, Any]:
    """One loop in this process: its median step."""
    step = _loop(name, fixed)
    n = _steps_for(step, ROUND_S)
    return {"step_s": statistics.median(_window(step, n) for _ in range(ROUNDS))}


def _child(args: list[str], env: dict[str, str], threads: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", *args, "--threads",
                          str(threads)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"bench/imported.py: {' '.join(args)} failed: {last}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--malloc", choices=("held", "default"), default="held")
    parser.add_argument("--only", default="", help="comma-separated pair names")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1) - 1))
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        what, name, *rest = args.child
        result = (child_profile(name) if what == "profile" else child_interleave(name)
                  if what == "interleave" else child_alone(name, rest == ["fixed"]))
        print(json.dumps(result))
        return
    env = {k: v for k, v in os.environ.items() if k not in HELD}
    if args.malloc == "held":
        env.update(HELD)
    names = [n for n in PAIRS if not args.only or n in args.only.split(",")]
    print(f"bench/imported.py: {args.processes} processes a way, {args.threads} thread(s), "
          f"malloc {args.malloc}, load {os.getloadavg()[0]:.2f}")
    print("| pair | rule | predicted | measured alone | measured interleaved |")
    print("| --- | --- | ---: | ---: | ---: |")
    met = total = 0
    for name in names:
        rule = PAIRS[name][3]
        p = _child(["profile", name], env, args.threads)
        alone = []
        for i in range(args.processes):
            order = (False, True) if i % 2 == 0 else (True, False)
            steps = {fixed: _child(["alone", name, "fixed" if fixed else "base"], env,
                                   args.threads)["step_s"] for fixed in order}
            alone.append(1 - steps[True] / steps[False])
        inter = [_child(["interleave", name], env, args.threads)
                 for _ in range(args.processes)]
        cells = []
        for savings, own in ((alone, 0.0), ([g["saving"] for g in inter],
                                            statistics.median(g["noise"] for g in inter))):
            mean = statistics.fmean(savings)
            noise = max(own, interval(savings))
            ok, said = judge(p["predicted"], mean, noise, p["low"], p["high"])
            met += bool(ok)
            total += ok is not None
            cells.append(f"{mean:.1%} (±{noise:.1%}): {said}")
        band = f" ({p['low']:.1%}-{p['high']:.1%})" if p["high"] > p["low"] else ""
        print(f"| {name} | {rule} | {p['predicted']:.1%}{band} | {cells[0]} | {cells[1]} |")
    print(f"within the goal: {met} of {total}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
